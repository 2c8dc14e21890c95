// The example client's CDK app: `npx cdk synth` here (cdk.json) works offline, like Tollgate's; deploy it
// after the Tollgate stack, in the same account and region, with the same `tollgateName`.
import { App } from "aws-cdk-lib";
import { OrdersStack } from "./orders-stack.ts";

const app = new App();
new OrdersStack(app, "OrdersApi", {
  tollgateName: app.node.tryGetContext("tollgateName") ?? "tollgate",
  tollgateSubnets: Number(app.node.tryGetContext("tollgateSubnets") ?? 2),
});
app.synth();
