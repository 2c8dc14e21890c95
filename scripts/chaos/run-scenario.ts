// One scenario of the chaos grid: its rule set by the operator's code, N instance processes offered
// open-loop load, the nemesis injected 3 s in and healed after its duration, then the history judged.
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import type { QuotaRuleDocument } from "../../functions/core/shared/quota-rules.ts";
import type { ClusterControl } from "./cluster-control.ts";
import type { ContractPhase, History } from "./contract.ts";
import { Instance, setClockOffset } from "./instances.ts";
import { type InstanceTransport, referenceClock } from "./messages.ts";
import type { NemesisContext } from "./nemeses.ts";
import { KNOWN_FAILING, type Scenario } from "./scenarios.ts";
import { seedOf } from "./seeded.ts";
import type { ChaosStack } from "./stack.ts";
import { type CheckResult, check, type Expectations } from "./verdicts.ts";

export interface RunSettings {
  seed: number;
  /** SDK instance processes (default 3). */
  instances: number;
  /** The rule's limit per 1 s window. */
  max: number;
  syncIntervalMs: number;
  /** Where instance clock files go. */
  dir: string;
  /** The instances' and the QuotaSync function's output (a file descriptor). */
  logFile?: number;
}

export interface RunParts {
  cluster: ClusterControl;
  stack: ChaosStack;
  /** The reference clock's origin (hrtime of the harness at the grid's start). */
  origin: bigint;
  /** Makes rule names unique across runs on one cluster. */
  runId: string;
}

export interface ScenarioResult {
  scenario: Scenario;
  check: CheckResult;
  /** Why this scenario is known to fail at this commit (KNOWN_FAILING), if it is. */
  known: string | undefined;
  /** Instances whose ready() never resolved; sync errors the instances saw. */
  notReady: number;
  syncErrors: number;
  lastError: string | undefined;
  wallMs: number;
}

const WINDOW_MS = 1000;
/** The one key every instance of a scenario checks. */
const KEY = "k";
const INJECT_AFTER_MS = 3000;
const OBSERVE_AFTER_HEAL_MS = 4000;

function phaseOf(rule: QuotaRuleDocument, from: number): ContractPhase {
  return { from, mode: rule.mode, limits: rule.limits.map((l) => ({ windowMs: WINDOW_MS, max: l.max })) };
}

function p99(values: number[]): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))] as number;
}

export async function runScenario(
  scenario: Scenario,
  index: number,
  settings: RunSettings,
  parts: RunParts,
): Promise<ScenarioResult> {
  const { nemesis } = scenario;
  const now = referenceClock(parts.origin);
  const began = now();
  const name = `c${parts.runId}-${index}`;
  let rule: QuotaRuleDocument = { name, mode: scenario.mode, limits: [{ window: "1s", max: settings.max }] };
  await parts.stack.setRule(rule);
  const clockFile = nemesis.clockOffsetMs === undefined ? undefined : join(settings.dir, `clock-${name}.txt`);
  if (clockFile) setClockOffset(clockFile, nemesis.clockOffsetMs as number);
  const transport: InstanceTransport =
    scenario.transport === "redis"
      ? { kind: "redis", nodes: parts.cluster.nodes }
      : { kind: "http", url: parts.stack.quotaSyncUrl };
  const spawn = (i: number) =>
    new Instance({
      config: {
        index: i,
        transport,
        rule: name,
        key: KEY,
        origin: parts.origin.toString(),
        syncIntervalMs: settings.syncIntervalMs,
        ...(nemesis.front ? { front: nemesis.front } : {}),
        ...(nemesis.pacing ? { pacing: nemesis.pacing } : {}),
      },
      ...(i === 0 && clockFile ? { clockFile } : {}),
      ...(settings.logFile === undefined ? {} : { logFile: settings.logFile }),
    });
  const instances = Array.from({ length: settings.instances }, (_, i) => spawn(i));
  try {
    return await drive(instances);
  } finally {
    // a scenario that threw leaves no process behind (a finished one is gone already)
    for (const instance of instances) instance.kill();
  }

  async function drive(instances: Instance[]): Promise<ScenarioResult> {
    const ready = await Promise.all(instances.map((instance) => instance.ready(15_000)));
    const load = nemesis.load ?? 2;
    const perInstance = (load * settings.max) / settings.instances;
    const t0 = now() + 200;
    const injectAt = t0 + INJECT_AFTER_MS;
    const healPlanned = injectAt + nemesis.durationMs;
    const end = healPlanned + OBSERVE_AFTER_HEAL_MS;
    const gaps: [number, number][] = nemesis.idle ? [[injectAt, healPlanned]] : [];
    const startOf = (i: number, from: number) => ({
      from,
      to: end,
      perSecond: perInstance,
      seed: seedOf(settings.seed, scenario.id, i),
      gaps,
    });
    for (const [i, instance] of instances.entries()) instance.start(startOf(i, t0));

    const phases: ContractPhase[] = [phaseOf(rule, Number.NEGATIVE_INFINITY)];
    const context: NemesisContext = {
      cluster: parts.cluster,
      stack: parts.stack,
      rule: name,
      key: KEY,
      clockFile,
      state: {},
    };
    await sleep(Math.max(0, injectAt - now()));
    let healAt = injectAt;
    try {
      if (nemesis.change) {
        const next = nemesis.change(rule);
        try {
          if (next) await parts.stack.setRule(next);
          else await parts.stack.removeRule(name);
          phases.push(next ? phaseOf(next, now()) : { ...phaseOf(rule, now()), removed: true });
          if (next) rule = next;
        } catch (error) {
          // a change the product refuses (a slotGroups change of a rule in service): the old rule stays, and
          // the run judges it as it is
          if (!(error instanceof ValidationError)) throw error;
          process.stderr.write(`[chaos] ${scenario.id}: the change was refused: ${error.message}\n`);
        }
      }
      await nemesis.inject(context);
      if (nemesis.joins) {
        const joiner = spawn(instances.length);
        instances.push(joiner);
        joiner.start(startOf(instances.length - 1, now()));
      }
      await sleep(Math.max(0, healPlanned - now()));
    } finally {
      await nemesis.heal(context);
      healAt = now();
    }
    await Promise.all(instances.map((instance) => instance.finish(Math.max(0, end - now()) + 20_000)));

    const history: History = {
      decisions: instances.flatMap((instance) => instance.decisions),
      readyAt: new Map(
        instances.flatMap((instance, i) => (instance.readyAt === undefined ? [] : [[i, instance.readyAt]])),
      ),
      offeredPerSecond: perInstance * instances.length,
      // d of the published bound: the store's delay while it answers normally, before the fault
      storeDelayMs:
        p99(instances.flatMap((instance) => instance.latencies.filter((l) => l.at < injectAt).map((l) => l.ms))) / 2,
      startAt: t0,
      endAt: end,
    };
    const { utilisation: utilisationAtLeast, underLimitShare } = nemesis.judge ?? {};
    const expectations: Expectations = {
      faultSpans: [[injectAt, healAt + WINDOW_MS]],
      ...(nemesis.steady ? {} : { healAt }),
      ...(utilisationAtLeast === undefined
        ? {}
        : { utilisation: { min: utilisationAtLeast, from: t0 + WINDOW_MS, to: end } }),
      ...(underLimitShare === undefined ? {} : { underLimitShare }),
    };
    const result = check(history, phases, expectations);

    // the next scenario starts on a healthy cluster, without this one's rule in the policy
    await parts.cluster.waitReady();
    if (phases.every((phase) => !phase.removed)) await parts.stack.removeRule(name).catch(() => {});
    return {
      scenario,
      check: result,
      known: KNOWN_FAILING[scenario.id],
      notReady: ready.filter((r) => !r).length,
      syncErrors: instances.reduce((sum, instance) => sum + instance.syncErrors, 0),
      lastError: instances.map((instance) => instance.lastError).find((e) => e !== undefined),
      wallMs: now() - began,
    };
  }
}
