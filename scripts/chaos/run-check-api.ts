// One check API scenario: the check API in a process of its own (two execution environments behind a local
// Function URL), its clients (every algorithm, lagging, true and leading clocks, hot keys) sending from t₀,
// the nemesis injected 3 s in and healed after its duration, 4 s more of load; then every answer replayed
// against the contract's models.
import { setTimeout as sleep } from "node:timers/promises";
import { type Answer, type CheckApiCheck, checkAnswers } from "./check-api-checker.ts";
import { checkApiClients, runClient } from "./check-api-clients.ts";
import { type CheckApiLossTimeline, checkAnswersAfterLoss } from "./check-api-loss-checker.ts";
import type { ClusterControl } from "./cluster-control.ts";
import { seedOf } from "./seeded.ts";
import type { ChaosStack } from "./stack.ts";
import { type ProductNemesis, STORE_NEMESES, type StoreContext } from "./store-nemeses.ts";

export interface CheckApiResult {
  id: string;
  nemesis: ProductNemesis;
  check: CheckApiCheck;
  /** Every answer, for a closer look than the figures give. */
  answers: Answer[];
  known: string | undefined;
  wallMs: number;
}

const INJECT_AFTER_MS = 3000;
const OBSERVE_AFTER_HEAL_MS = 4000;
/** Requests per second of each client (one at a time, so fewer while the API is slow). */
const PER_SECOND = 10;
/** How long the run asks GET /v1/health for a data loss before it stops waiting (and fails). */
const REPORT_WAIT_MS = 10_000;
/** The load after the heal when the run acknowledges a loss: the acknowledge writes every slot (1–3 s). */
const OBSERVE_AFTER_ACKNOWLEDGE_MS = 8000;

export const CHECK_API_NEMESES: readonly ProductNemesis[] = STORE_NEMESES;

export async function runCheckApiScenario(
  nemesis: ProductNemesis,
  parts: { cluster: ClusterControl; stack: ChaosStack; runId: string; index: number; seed: number },
  known: string | undefined,
): Promise<CheckApiResult> {
  const id = `check-api/${nemesis.name}`;
  const began = Date.now();
  const prefix = `a${parts.runId}-${parts.index}`;
  const clients = checkApiClients(prefix);
  const context: StoreContext = { cluster: parts.cluster, pattern: `*${prefix}-*`, state: {} };
  const answers: Answer[] = [];
  // the store initialised before the load, as a deployment's is, and none of its slots lost: the stack is
  // shared by the scenarios, and an earlier one's FLUSHALL or emptied node leaves slots the check API rightly
  // answers 503 for until someone acknowledges (and a flush while the first calls write the epoch keys would
  // lose nothing counted)
  await parts.stack.acknowledgeStoreLoss();
  const t0 = Date.now() + 200;
  const injectAt = t0 + INJECT_AFTER_MS;
  const end =
    injectAt + nemesis.durationMs + (nemesis.acknowledged ? OBSERVE_AFTER_ACKNOWLEDGE_MS : OBSERVE_AFTER_HEAL_MS);
  const running = clients.map((spec) =>
    runClient(
      parts.stack.functionUrl,
      spec,
      { from: t0, to: end, perSecond: PER_SECOND, seed: seedOf(parts.seed, id, spec.client) },
      answers,
    ),
  );
  await sleep(Math.max(0, injectAt - Date.now()));
  const injectedAt = Date.now();
  try {
    await nemesis.inject(context);
    await sleep(Math.max(0, injectAt + nemesis.durationMs - Date.now()));
  } finally {
    await nemesis.heal(context);
  }
  const loss: CheckApiLossTimeline = {
    injectedAt,
    healedAt: Date.now(),
    reportedAt: undefined,
    acknowledgeStartedAt: undefined,
    acknowledgedAt: undefined,
  };
  if (nemesis.acknowledged) await acknowledgeOnceReported(parts.stack, loss);
  await Promise.all(running);
  await parts.cluster.waitReady();
  const check = nemesis.acknowledged ? checkAnswersAfterLoss(clients, answers, loss) : checkAnswers(clients, answers);
  const decided = answers.filter((a) => a.outcome === "allowed" || a.outcome === "denied").length;
  if (decided === 0) {
    // every answer a 503 passes the contract and proves nothing
    check.verdicts.push({ rule: "run", pass: false, detail: `none of ${answers.length} requests was decided` });
    check.pass = false;
  }
  if (context.state.notTheScenario) {
    check.verdicts.push({ rule: "run", pass: false, detail: context.state.notTheScenario });
    check.pass = false;
  }
  return { id, nemesis, check, answers, known, wallMs: Date.now() - began };
}

/** The operator's part: once GET /v1/health names lost slots, `tollgate store acknowledge`. */
async function acknowledgeOnceReported(stack: ChaosStack, loss: CheckApiLossTimeline): Promise<void> {
  const deadline = Date.now() + REPORT_WAIT_MS;
  while (Date.now() < deadline) {
    const lost = await stack.lostSlotsInHealth().catch(() => []);
    if (lost.length > 0) {
      loss.reportedAt = Date.now();
      break;
    }
    await sleep(100);
  }
  if (loss.reportedAt === undefined) return;
  loss.acknowledgeStartedAt = Date.now();
  const slots = await stack.acknowledgeStoreLoss();
  loss.acknowledgedAt = Date.now();
  process.stderr.write(`[chaos] store acknowledged: ${slots.length} slots written again\n`);
}
