// The DLQ page: the campaign queue's dead letters with their reasons, read as `tollgate dlq list` reads them
// (held out of sight, never a receive toward anything), and redriven to the campaign queue as
// `tollgate dlq redrive` sends them.
import { z } from "zod";
import { redriveDeadLetters, sweepDeadLetters } from "../../dead-letter-queue.ts";
import { needed } from "../console-context.ts";
import { type ConsolePage, route } from "../console-page.ts";

export const dlqPage: ConsolePage = {
  id: "dlq",
  title: "Dead letters",
  routes: [
    route({
      method: "GET",
      path: "",
      input: z.object({}),
      handle: async (context) => {
        const queueUrl = needed(context.deadLetterQueueUrl, "--queue-url");
        const letters = await sweepDeadLetters(context.sqs, queueUrl, { max: 1000 });
        return { queueUrl, letters };
      },
    }),
    route({
      method: "POST",
      path: "redrive",
      input: z.object({ messageIds: z.array(z.string().min(1)).min(1, "choose at least one dead letter") }),
      handle: async (context, { messageIds }) => {
        const from = needed(context.deadLetterQueueUrl, "--queue-url");
        const to = needed(context.campaignQueueUrl, "--to");
        const wanted = new Set(messageIds);
        const redriven = await redriveDeadLetters(context.sqs, from, to, (letter) => wanted.has(letter.messageId));
        const missing = messageIds.filter((id) => !redriven.some((letter) => letter.messageId === id));
        return { to, redriven: redriven.map((letter) => letter.messageId), missing };
      },
    }),
  ],
};
