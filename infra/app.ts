// The CDK app: one Tollgate stack, checked by cdk-nag's AwsSolutions and Serverless packs on every synth.
import { App, Validations } from "aws-cdk-lib";
import { AwsSolutionsChecks, ServerlessChecks } from "cdk-nag";
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

if (process.argv[1]?.endsWith("app.ts")) buildApp().app.synth();
