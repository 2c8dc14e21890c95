// `tollgate delivery tail`: what arrived on the delivery queue, as JSON lines.
import type { Command } from "commander";
import { readDelivery } from "../delivery-queue.ts";
import { type AwsOptions, aws, required, withAws } from "./aws-options.ts";
import { integerIn } from "./option-values.ts";

export function addDeliveryCommands(program: Command): void {
  withAws(
    program
      .command("delivery")
      .description("the delivery queue")
      .command("tail")
      .description("print delivery messages as JSON lines")
      .option("--queue-url <url>", "the delivery queue")
      .option("--max <n>", "stop after this many messages", integerIn(1, 1_000_000), 100)
      .option("--remove", "delete what was read (default: leave it for the real consumer)"),
  ).action(async (options: AwsOptions & { queueUrl?: string; max: number; remove?: boolean }) => {
    const { sqs, local } = aws(options);
    const queueUrl = required(options.queueUrl, local?.deliveryQueueUrl, "--queue-url");
    let sends = 0;
    const count = await readDelivery(sqs, queueUrl, {
      max: options.max,
      remove: options.remove === true,
      onMessage: (message) => {
        // print whatever arrives, even a message that is not a delivery message
        sends += Array.isArray(message.sends) ? message.sends.length : 0;
        console.log(JSON.stringify(message));
      },
    });
    console.error(`${count} delivery messages, ${sends} sends`);
  });
}
