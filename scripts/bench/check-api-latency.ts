// The check-api section's latencies: the check API's handler in process, one request at a time, per algorithm
// and for the frequency check (a fresh block, and the same block after a long history), beside a bare Redis
// round trip on the same client (the floor).
import type { Context } from "aws-lambda";
import { localPrincipalEvent } from "../local/local-principals.ts";
import type { LocalStack } from "../local-stack.ts";
import { latencies } from "./timing.ts";

type Environment = LocalStack["checkApiEnvironments"][number];

const ms = (value: number) => `${value.toFixed(3)} ms`;

/** The rows of the in-process table (`| What | p50 | p99 |`), each with what was not a 200 among its answers. */
export async function latencyRows(environment: Environment, context: Context): Promise<string[]> {
  // a latency is only worth printing with the answers it measured: each row counts what was not a 200
  const refused = new Map<number, number>();
  const handler = async (event: Parameters<Environment["handler"]>[0]) => {
    const response = await environment.handler(event, context);
    const status = response.statusCode ?? 200;
    if (status !== 200) refused.set(status, (refused.get(status) ?? 0) + 1);
    return response;
  };
  /** What was not a 200 since the last row, e.g. " (3 × 503)", and starts counting again. */
  const notOk = () => {
    const text = [...refused].map(([status, count]) => `${count} × ${status}`).join(", ");
    refused.clear();
    return text ? ` (${text})` : "";
  };
  const limits: Record<string, object> = {
    "token-bucket": { algorithm: "token-bucket", max: 1_000_000, refillAmount: 1, refillEveryMs: 1000 },
    "sliding-window": { algorithm: "sliding-window", max: 1_000_000, windowMs: 60_000 },
    "sliding-log": { algorithm: "sliding-log", max: 100_000, windowMs: 60_000 },
    "fixed-window": { algorithm: "fixed-window", max: 1_000_000, windowMs: 60_000 },
    gcra: { algorithm: "gcra", burst: 1_000_000, count: 1000, periodMs: 1000 },
  };
  const rows: string[] = [];
  const floor = await latencies(2000, () => environment.cluster.ping());
  rows.push(`| Redis round trip (PING, same client): the floor | ${ms(floor.p50)} | ${ms(floor.p99)} |`);
  for (const [name, spec] of Object.entries(limits)) {
    // 1,000 keys in turn: every request is allowed and reaches Redis (no negative-cache answers)
    const result = await latencies(2000, (i) =>
      handler(localPrincipalEvent("/v1/limit", JSON.stringify({ key: `k${i % 1000}`, ...spec }))),
    );
    rows.push(`| POST /v1/limit ${name}${notOk()} | ${ms(result.p50)} | ${ms(result.p99)} |`);
  }
  const frequency = await latencies(2000, (i) =>
    handler(localPrincipalEvent("/v1/frequency", JSON.stringify({ userId: i + 1000, channel: "push" }))),
  );
  rows.push(`| POST /v1/frequency${notOk()} | ${ms(frequency.p50)} | ${ms(frequency.p99)} |`);
  // one block (256 consecutive users) whose log grows: the cost must not follow its history
  const inBlock = (i: number) =>
    handler(localPrincipalEvent("/v1/frequency", JSON.stringify({ userId: 512_000 + (i & 255), channel: "push" })));
  const freshBlock = await latencies(1000, inBlock);
  rows.push(
    `| POST /v1/frequency, one block, its first 1,200 checks${notOk()} | ${ms(freshBlock.p50)} | ${ms(freshBlock.p99)} |`,
  );
  // the block's history, one check at a time (a burst on one block would measure contention instead)
  for (let i = 1200; i < 10_000; i++) await inBlock(i);
  const filling = notOk();
  const grownBlock = await latencies(2000, inBlock);
  rows.push(
    `| POST /v1/frequency, the same block after 10,000 earlier checks${filling}${notOk()} | ${ms(grownBlock.p50)} | ${ms(grownBlock.p99)} |`,
  );
  return rows;
}
