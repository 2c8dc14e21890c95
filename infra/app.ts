// The CDK app: one Tollgate stack, checked by cdk-nag's AwsSolutions and Serverless packs on every synth.
import { App, Validations } from "aws-cdk-lib";
import { AwsSolutionsChecks, ServerlessChecks } from "cdk-nag";
import { ConfigError } from "./config.ts";
import { acknowledgeFindings } from "./nag.ts";
import { TollgateStack } from "./tollgate-stack.ts";

export function buildApp(
  context: Record<string, unknown> = {},
  options: { acknowledge?: boolean } = {},
): { app: App; stack: TollgateStack } {
  const app = new App({ context });
  const stack = new TollgateStack(app, String(app.node.tryGetContext("tollgate:stackName") ?? "Tollgate"), {
    env: { account: process.env.CDK_DEFAULT_ACCOUNT, region: process.env.CDK_DEFAULT_REGION },
  });
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app), new ServerlessChecks(app));
  if (options.acknowledge !== false) acknowledgeFindings(stack);
  return { app, stack };
}

if (process.argv[1]?.endsWith("app.ts")) {
  try {
    buildApp().app.synth();
  } catch (error) {
    // a bad setting is the user's to fix: its message names the context key, a stack trace would bury it
    if (!(error instanceof ConfigError)) throw error;
    console.error(error.message);
    process.exit(1);
  }
}
