// What a Redis error reply says about the command it answers: one list for the SDK's direct transport and
// the Tollgate service (functions/adapters/redis-errors.ts), so both classify a reply the same way.

/**
 * Error kinds (the reply's first word, which the protocol defines) that Redis sends instead of running
 * the command: a topology change, a node that cannot serve yet, a script hogging the node. The command
 * did not run, so sending it again is safe whether it is idempotent or not.
 */
const NOT_RUN = new Set([
  "MOVED",
  "ASK",
  "TRYAGAIN",
  "CLUSTERDOWN",
  "LOADING",
  "MASTERDOWN",
  "READONLY",
  "NOREPLICAS",
  "BUSY",
  "NOSCRIPT",
]);

/** Whether an error reply's message proves its command did not run (see NOT_RUN). */
export function provesNotRun(replyMessage: string): boolean {
  return NOT_RUN.has(replyMessage.split(" ", 1)[0] ?? "");
}
