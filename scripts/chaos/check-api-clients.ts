// The check API's clients of a chaos run: for each algorithm, clients whose clocks lag by up to what the API
// accepts (364 days, 2 hours), are true, or lead (4 minutes), plus hot keys at the documented maxima (a
// sliding log of max 100,000 and a token bucket of max 1,000,000,000, large costs). Each sends signed
// `POST /v1/limit` requests dated by its own clock, one at a time on a seeded schedule, and records each answer.
import { LOCAL_SIGNING } from "../local/local-principals.ts";
import { signRequest } from "../sign-request.ts";
import type { Answer, ClientSpec, LimitSpec, Outcome } from "./check-api-checker.ts";
import { arrivals, seededRandom } from "./seeded.ts";

const DAY = 86_400_000;
/** Every lag and lead the API accepts (`at` at most 365 days behind and 5 minutes ahead), and none. */
export const CLOCK_OFFSETS_MS = [-364 * DAY, -2 * 3_600_000, 0, 4 * 60_000] as const;
/** A request with no answer in this long is one that may have been counted. */
const REQUEST_TIMEOUT_MS = 5_000;

const LIMITS: readonly LimitSpec[] = [
  { algorithm: "fixed-window", max: 5, windowMs: 1_000 },
  { algorithm: "sliding-window", max: 8, windowMs: 2_000 },
  { algorithm: "sliding-log", max: 6, windowMs: 1_500 },
  { algorithm: "token-bucket", max: 5, refillAmount: 1, refillEveryMs: 200 },
  { algorithm: "gcra", burst: 3, count: 5, periodMs: 1_000 },
];

/** The hot keys: the schema's largest sliding log and bucket, costs up to a third of them. */
const HOT: readonly { limit: LimitSpec; costMax: number }[] = [
  { limit: { algorithm: "sliding-log", max: 100_000, windowMs: 60_000 }, costMax: 30_000 },
  {
    limit: { algorithm: "token-bucket", max: 1_000_000_000, refillAmount: 1_000_000, refillEveryMs: 1_000 },
    costMax: 300_000_000,
  },
];

/** The run's clients, keys prefixed with `prefix` (so a nemesis finds the primary they live on). */
export function checkApiClients(prefix: string): ClientSpec[] {
  const clients: ClientSpec[] = [];
  for (const limit of LIMITS)
    for (const clockOffsetMs of CLOCK_OFFSETS_MS)
      clients.push({ client: clients.length, key: `${prefix}-${clients.length}`, limit, clockOffsetMs, costMax: 1 });
  for (const hot of HOT)
    for (const clockOffsetMs of [CLOCK_OFFSETS_MS[0], 0])
      clients.push({ client: clients.length, key: `${prefix}-${clients.length}`, clockOffsetMs, ...hot });
  return clients;
}

async function outcomeOf(response: Response): Promise<Outcome> {
  const body = (await response.json().catch(() => ({}))) as {
    allowed?: boolean;
    error?: { code?: string; maybeCounted?: boolean };
  };
  if (response.status === 200) return body.allowed === true ? "allowed" : "denied";
  if (response.status === 503 && body.error?.maybeCounted === false) return "not-counted";
  if (response.status >= 400 && response.status < 500) return "refused";
  return "maybe-counted";
}

/**
 * Runs one client from `from` to `to` (ms on Date.now()) at `perSecond`: a request at each arrival of its seeded
 * schedule, or as soon as the one before is answered when that is later (one request at a time: the API
 * decides its key's requests in the order they were sent).
 */
export async function runClient(
  url: string,
  spec: ClientSpec,
  schedule: { from: number; to: number; perSecond: number; seed: number },
  answers: Answer[],
): Promise<void> {
  const random = seededRandom(schedule.seed);
  for (const arrival of arrivals(random, schedule.perSecond, schedule.from, schedule.to)) {
    const wait = arrival - Date.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const sentAt = Date.now();
    const at = sentAt + spec.clockOffsetMs;
    const cost = spec.costMax === 1 ? 1 : 1 + Math.floor(random() * spec.costMax);
    const body = JSON.stringify({ key: spec.key, ...spec.limit, cost, at });
    const target = `${url}/v1/limit`;
    const headers = { "content-type": "application/json" };
    let outcome: Outcome;
    try {
      const signed = await signRequest({ url: target, method: "POST", headers, body }, LOCAL_SIGNING);
      const response = await fetch(target, {
        method: "POST",
        headers: signed.headers,
        body,
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
      outcome = await outcomeOf(response);
    } catch {
      outcome = "maybe-counted";
    }
    answers.push({ client: spec.client, at, cost, outcome, sentAt, answeredAt: Date.now() });
  }
}
