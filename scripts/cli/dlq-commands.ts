// `tollgate dlq list|show|redrive`: the campaign queue's dead letters with the reason each was given, and
// sending them back to the campaign queue once the cause is fixed.
import type { Command } from "commander";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import { type DeadLetter, redriveDeadLetters, sweepDeadLetters } from "../dead-letter-queue.ts";
import { type AwsOptions, aws, required, withAws } from "./aws-options.ts";
import { integerIn, UsageError } from "./option-values.ts";

type DlqOptions = AwsOptions & { queueUrl?: string };

function withDlq(command: Command): Command {
  return withAws(command.option("--queue-url <url>", "the campaign queue's DLQ"));
}

function dlqOf(options: DlqOptions) {
  const { sqs, local } = aws(options);
  return { sqs, local, queueUrl: required(options.queueUrl, local?.deadLetterQueueUrl, "--queue-url") };
}

/** One line per dead letter: its ID, when, the campaign, and why. */
export function deadLetterLine(letter: DeadLetter): string {
  const campaign =
    letter.campaignId === undefined
      ? "(not a campaign batch)"
      : `${letter.campaignId} ${letter.channel ?? "?"} ${letter.users ?? "?"} users`;
  const field = letter.path ? ` [${letter.path}]` : "";
  return `${letter.messageId}  ${new Date(letter.sentAt).toISOString()}  ${campaign}  ${letter.error}${field}: ${letter.reason}`;
}

export function addDlqCommands(program: Command): void {
  const dlq = program.command("dlq").description("the campaign queue's dead letters, with their reasons");
  withDlq(
    dlq
      .command("list")
      .description("one line per dead letter: ID, time, campaign, error, field and reason (moves nothing)")
      .option("--max <n>", "stop after this many", integerIn(1, 1_000_000), 1000)
      .option("--json", "JSON lines, bodies included"),
  ).action(async (options: DlqOptions & { max: number; json?: boolean }) => {
    const { sqs, queueUrl } = dlqOf(options);
    const letters = await sweepDeadLetters(sqs, queueUrl, { max: options.max });
    for (const letter of letters) console.log(options.json ? JSON.stringify(letter) : deadLetterLine(letter));
    console.error(`${letters.length} dead letters`);
  });

  withDlq(
    dlq
      .command("show")
      .description("one dead letter in full: reason, attributes and body")
      .argument("<message-id>", "the ID `dlq list` prints"),
  ).action(async (messageId: string, options: DlqOptions) => {
    const { sqs, queueUrl } = dlqOf(options);
    const letters = await sweepDeadLetters(sqs, queueUrl, {});
    const letter = letters.find((candidate) => candidate.messageId === messageId);
    if (!letter)
      throw new ValidationError("<message-id>", `no dead letter ${messageId} on ${queueUrl} (${letters.length} there)`);
    const { body, ...fields } = letter;
    let parsed: unknown = body;
    try {
      parsed = JSON.parse(body);
    } catch {
      // shown as the text it is
    }
    console.log(JSON.stringify({ ...fields, body: parsed }, null, 2));
  });

  withDlq(
    dlq
      .command("redrive")
      .description("send dead letters back to the campaign queue as they came, each removed once sent")
      .argument("[message-ids...]", "the dead letters to redrive (or --all)")
      .option("--all", "every dead letter")
      .option("--to <url>", "the campaign queue"),
  ).action(async (ids: string[], options: DlqOptions & { all?: boolean; to?: string }) => {
    if (options.all === true && ids.length > 0) throw new UsageError("give message IDs or --all, not both");
    if (options.all !== true && ids.length === 0) throw new UsageError("give message IDs or --all");
    const { sqs, local, queueUrl } = dlqOf(options);
    const to = required(options.to, local?.campaignQueueUrl, "--to");
    const wanted = new Set(ids);
    const redriven = await redriveDeadLetters(
      sqs,
      queueUrl,
      to,
      (letter) => options.all === true || wanted.has(letter.messageId),
    );
    for (const letter of redriven) console.log(`redriven ${deadLetterLine(letter)}`);
    const missing = ids.filter((id) => !redriven.some((letter) => letter.messageId === id));
    console.error(`${redriven.length} dead letters redriven to ${to}`);
    if (missing.length > 0)
      throw new ValidationError("<message-ids>", `no dead letter ${missing.join(", ")} on ${queueUrl}`);
  });
}
