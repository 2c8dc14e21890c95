// The rate-limit scripts as they were before their numbers travelled packed (test/compat/v0.2.0/, v0.2.0's, the
// text-argument, integer-reply protocol), behind the same LimitStore port, so a Limiter runs them: the
// packed arguments are turned back into the text the previous code sent, and the integer reply into the
// packed one the current decoder reads. Run as EVAL scripts of their chunks.
import { readFileSync } from "node:fs";
import type { TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import type { LimitStore } from "../../functions/core/limits/limit-script.ts";
import { ALGORITHMS, type Algorithm } from "../../functions/core/limits/limit-specs.ts";
import { evalScriptOf } from "../../sdk/src/protocol/index.ts";

const load = (name: string) => readFileSync(new URL(`./v0.2.0/${name}.lua`, import.meta.url), "utf8");
const common = load("limit-common");
const oneLimit = Object.fromEntries(
  ALGORITHMS.map((algorithm) => [algorithm, evalScriptOf([common, load(algorithm), load("limit")].join("\n"))]),
) as Record<Algorithm, string>;
const severalLimits = evalScriptOf([common, ...ALGORITHMS.map(load), load("limits")].join("\n"));

/** p1..p4 as the previous code sent them: unused ones left out, a strict flag "1" or "0". */
function previousParameters(algorithm: Algorithm, p: readonly number[]): string[] {
  const [p1, p2, p3, p4] = p as [number, number, number, number];
  switch (algorithm) {
    case "token-bucket":
      return [String(p1), String(p2), String(p3), p4 === 1 ? "1" : "0"];
    case "gcra":
      return [String(p1), String(p2), String(p3)];
    default:
      return [String(p1), String(p2)];
  }
}

const doubles = (packed: Buffer, at: number, n: number) =>
  Array.from({ length: n }, (_, i) => packed.readDoubleLE(at + 8 * i));

/** The last time a reply names (lua/limit-common.lua's MAX_REPLY: the last a JavaScript Date holds). */
const MAX_REPLY = 8.64e15;
/**
 * A previous script's reply for one limit (allowed, limit, remaining, resetAt, retryAfterMs) with the two
 * corrections made since (both defects of the previous scripts): a fixed window whose windowMs changed so that its stored end
 * is no boundary of the new length is reset at the first boundary after it, not at that end (the stored count
 * still counts until then); a capped retry keeps now + retryAfterMs within the last time, as a capped resetAt.
 */
function corrected(algorithm: string, now: number, p: readonly number[], reply: number[]): number[] {
  let [allowed, limit, remaining, resetAt, retry] = reply as [number, number, number, number, number];
  const windowMs = p[1] as number;
  if (algorithm === "fixed-window" && resetAt < MAX_REPLY && resetAt % windowMs !== 0) {
    resetAt = resetAt - (resetAt % windowMs) + windowMs;
    if (!allowed) retry = resetAt - now;
    resetAt = Math.min(resetAt, MAX_REPLY);
  }
  if (!allowed) retry = Math.min(retry, MAX_REPLY - now);
  return [allowed, limit, remaining, resetAt, retry];
}

export class PreviousLimitStore implements LimitStore {
  constructor(private readonly cluster: TollgateCluster) {}

  async runLimit(algorithm: Algorithm, key: string, args: Buffer): Promise<Buffer> {
    const [now = 0, cost = 0, ...p] = doubles(args, 0, 6);
    const text = [String(now), String(cost), ...previousParameters(algorithm, p)];
    const reply = corrected(
      algorithm,
      now,
      p,
      (await this.cluster.eval(oneLimit[algorithm], 1, key, ...text)) as number[],
    );
    const packed = Buffer.alloc(8 * reply.length);
    reply.forEach((n, i) => {
      packed.writeDoubleLE(n, 8 * i);
    });
    return packed;
  }

  async runLimits(keys: readonly string[], args: readonly (string | Buffer)[]): Promise<number[]> {
    const numbers = args[0] as Buffer;
    const now = numbers.readDoubleLE(0);
    const text = [String(now)];
    const parameters: number[][] = [];
    keys.forEach((_, i) => {
      const algorithm = args[1 + i] as Algorithm;
      const [cost, ...p] = doubles(numbers, 8 + 40 * i, 5) as number[];
      parameters.push(p);
      const params = previousParameters(algorithm, p);
      while (params.length < 4) params.push("");
      text.push(algorithm, String(cost), ...params);
    });
    const reply = (await this.cluster.eval(severalLimits, keys.length, ...keys, ...text)) as number[];
    return [
      reply[0] as number,
      ...keys.flatMap((_, i) =>
        corrected(args[1 + i] as string, now, parameters[i] as number[], reply.slice(1 + 5 * i, 6 + 5 * i)),
      ),
    ];
  }
}
