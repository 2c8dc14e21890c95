// One scenario of the chaos grid: its rule set by the operator's code, N instance processes offered
// open-loop load, the nemesis injected 3 s in and healed after its duration, then the history judged.
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import type { QuotaRuleDocument } from "../../functions/core/shared/quota-rules.ts";
import { utilisation } from "./checker.ts";
import type { ClusterControl } from "./cluster-control.ts";
import type { ContractPhase, History } from "./contract.ts";
import { Hostile, type HostileOutcome } from "./hostile.ts";
import { Instance, setClockOffset } from "./instances.ts";
import { isolationVerdicts } from "./isolation.ts";
import { type InstanceTransport, referenceClock } from "./messages.ts";
import type { NemesisContext } from "./nemeses.ts";
import { KNOWN_FAILING, type Scenario } from "./scenarios.ts";
import { seedOf } from "./seeded.ts";
import { CHAOS_TENANT, type ChaosStack } from "./stack.ts";
import { type ChaosTenant, isOwnKey, TENANT_A, TENANT_B, tenantConfigKey, tenantKeyPrefix } from "./tenants.ts";
import { type CheckResult, check, type Expectations, type Verdict } from "./verdicts.ts";

export interface RunSettings {
  seed: number;
  /** SDK instance processes (default 3); in a tenant scenario, per tenant: 2, one on each transport. */
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
  /** The hostile instance's attempts and how each was answered (tenant scenarios). */
  hostile?: HostileOutcome[];
}

const WINDOW_MS = 1000;
/** The one key every instance of a scenario checks. */
const KEY = "k";
const INJECT_AFTER_MS = 3000;
const OBSERVE_AFTER_HEAL_MS = 4000;
/** Instances of each tenant in a tenant scenario, alternating direct and HTTP. */
const TENANT_INSTANCES = 2;
/** Least utilisation of its own limit a tenant keeps beside the other (a shared key gives each ≤ 50 %). */
const TENANT_UTILISATION = 0.8;

/** The instances of one tenant (the local one in a single-tenant scenario) and the rule over time for it. */
interface Fleet {
  tenant: ChaosTenant | undefined;
  instances: Instance[];
  phases: ContractPhase[];
}

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
  const tenants: (ChaosTenant | undefined)[] = scenario.tenants ? [TENANT_A, TENANT_B] : [undefined];
  const grantTo = scenario.tenants ? tenants.map((t) => (t as ChaosTenant).name) : [CHAOS_TENANT];
  let rule: QuotaRuleDocument = { name, mode: scenario.mode, limits: [{ window: "1s", max: settings.max }] };
  await parts.stack.setRule(rule, grantTo);
  const clockFile = nemesis.clockOffsetMs === undefined ? undefined : join(settings.dir, `clock-${name}.txt`);
  if (clockFile) setClockOffset(clockFile, nemesis.clockOffsetMs as number);
  const transportOf = (i: number): InstanceTransport =>
    (scenario.transport === "mixed" ? (i % 2 === 0 ? "redis" : "http") : scenario.transport) === "redis"
      ? { kind: "redis", nodes: parts.cluster.nodes }
      : { kind: "http", url: parts.stack.quotaSyncUrl };
  let spawned = 0;
  const spawn = (tenant: ChaosTenant | undefined, i: number) =>
    new Instance({
      config: {
        // unique over the scenario: the checker's readyAt is by instance
        index: spawned++,
        transport: transportOf(i),
        rule: name,
        key: KEY,
        origin: parts.origin.toString(),
        syncIntervalMs: settings.syncIntervalMs,
        ...(tenant ? { tenant } : {}),
        ...(nemesis.front ? { front: nemesis.front } : {}),
        ...(nemesis.pacing ? { pacing: nemesis.pacing } : {}),
      },
      ...(i === 0 && clockFile ? { clockFile } : {}),
      ...(settings.logFile === undefined ? {} : { logFile: settings.logFile }),
    });
  const perFleet = scenario.tenants ? TENANT_INSTANCES : settings.instances;
  const fleets: Fleet[] = tenants.map((tenant) => ({
    tenant,
    instances: Array.from({ length: perFleet }, (_, i) => spawn(tenant, i)),
    phases: [phaseOf(rule, Number.NEGATIVE_INFINITY)],
  }));
  const all = () => fleets.flatMap((fleet) => fleet.instances);
  const hostile = scenario.tenants
    ? new Hostile({
        self: TENANT_A,
        victim: TENANT_B,
        rule: name,
        key: KEY,
        url: parts.stack.quotaSyncUrl,
        nodes: parts.cluster.nodes,
      })
    : undefined;
  try {
    return await drive();
  } finally {
    // a scenario that threw leaves no process behind (a finished one is gone already)
    for (const instance of all()) instance.kill();
    await hostile?.stop();
  }

  async function drive(): Promise<ScenarioResult> {
    const ready = await Promise.all(all().map((instance) => instance.ready(15_000)));
    const load = nemesis.load ?? 2;
    const perInstance = (load * settings.max) / perFleet;
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
    // each tenant's instance i draws the same schedule: A and B are offered the same load
    for (const fleet of fleets) for (const [i, instance] of fleet.instances.entries()) instance.start(startOf(i, t0));
    hostile?.start(250);

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
          if (next) await parts.stack.setRule(next, grantTo);
          else await parts.stack.removeRule(name);
          for (const fleet of fleets)
            fleet.phases.push(next ? phaseOf(next, now()) : { ...phaseOf(rule, now()), removed: true });
          if (next) rule = next;
        } catch (error) {
          // a change the product refuses (a slotGroups change of a rule in service): the old rule stays, and
          // the run judges it as it is
          if (!(error instanceof ValidationError)) throw error;
          process.stderr.write(`[chaos] ${scenario.id}: the change was refused: ${error.message}\n`);
        }
      }
      if (nemesis.revokes) {
        await parts.stack.revokeRule(name, [TENANT_A.name]);
        (fleets[0] as Fleet).phases.push({ ...phaseOf(rule, now()), removed: true });
      }
      await nemesis.inject(context);
      if (nemesis.joins) {
        const fleet = fleets[0] as Fleet;
        const joiner = spawn(fleet.tenant, fleet.instances.length);
        fleet.instances.push(joiner);
        // its load from when it runs: arrivals scheduled while it was starting are not sent to it at once
        await joiner.up(20_000);
        joiner.start(startOf(fleet.instances.length - 1, now()));
      }
      await sleep(Math.max(0, healPlanned - now()));
    } finally {
      await nemesis.heal(context);
      healAt = now();
    }
    await Promise.all(all().map((instance) => instance.finish(Math.max(0, end - now()) + 20_000)));
    const outcomes = await hostile?.stop();
    // what each tenant's namespace holds, before the rule leaves the policy
    const scans = scenario.tenants
      ? await Promise.all(tenants.map((t) => parts.cluster.keysUnder(tenantKeyPrefix(t as ChaosTenant))))
      : [];

    // d of the published bound: the store's delay while it answers normally, before the fault
    const storeDelayMs =
      p99(all().flatMap((instance) => instance.latencies.filter((l) => l.at < injectAt).map((l) => l.ms))) / 2;
    // the single-tenant targets; a tenant scenario judges utilisation as isolation (below)
    const { utilisation: utilisationAtLeast, underLimitShare } = (scenario.tenants ? undefined : nemesis.judge) ?? {};
    const expectations: Expectations = {
      // the scenarios that judge denials under the limit inject no fault (a process joining is what one judges):
      // every decision after ready() counts
      faultSpans: nemesis.judge?.underLimitShare === undefined ? [[injectAt, healAt + WINDOW_MS]] : [],
      ...(nemesis.steady ? {} : { healAt }),
      ...(utilisationAtLeast === undefined
        ? {}
        : { utilisation: { min: utilisationAtLeast, from: t0 + WINDOW_MS, to: end } }),
      ...(underLimitShare === undefined ? {} : { underLimitShare }),
    };
    const checks = fleets.map((fleet) => {
      const history: History = {
        decisions: fleet.instances.flatMap((instance) => instance.decisions),
        readyAt: new Map(
          fleet.instances.flatMap((instance) =>
            instance.readyAt === undefined ? [] : [[instance.options.config.index, instance.readyAt]],
          ),
        ),
        offeredPerSecond: perInstance * fleet.instances.length,
        storeDelayMs,
        startAt: t0,
        endAt: end,
      };
      return { fleet, history, result: check(history, fleet.phases, expectations) };
    });
    let result = (checks[0] as (typeof checks)[number]).result;
    if (scenario.tenants) {
      // each tenant judged against its own limit; the figures shown are B's, the tenant watched for crossing
      const [a, b] = checks as [(typeof checks)[number], (typeof checks)[number]];
      // no fault before injection; a fault-free run (or a change to A's grant only) is judged to the end for B
      const faultFree = nemesis.steady || nemesis.revokes;
      const judgedTo = (fleet: Fleet) => (faultFree && fleet === b.fleet ? end : injectAt);
      const scanOf = (tenant: ChaosTenant) => scans[tenants.indexOf(tenant)] ?? [];
      const verdicts: Verdict[] = [
        ...a.result.verdicts.map((v) => ({ ...v, detail: `${TENANT_A.name}: ${v.detail}` })),
        ...b.result.verdicts.map((v) => ({ ...v, detail: `${TENANT_B.name}: ${v.detail}` })),
        ...isolationVerdicts({
          outcomes: outcomes ?? [],
          utilisations: [a, b].map(({ fleet, history }) => ({
            tenant: (fleet.tenant as ChaosTenant).name,
            value: utilisation(history, fleet.phases, t0 + WINDOW_MS, judgedTo(fleet)),
            min: TENANT_UTILISATION,
          })),
          victim: { tenant: TENANT_B.name, keys: scanOf(TENANT_B), isOwn: (key) => isOwnKey(TENANT_B, key, KEY) },
          ...(nemesis.dataLoss
            ? {
                required: {
                  keys: [tenantConfigKey(TENANT_A, name), tenantConfigKey(TENANT_B, name)],
                  found: [...scanOf(TENANT_A), ...scanOf(TENANT_B)],
                },
              }
            : {}),
        }),
      ];
      result = { figures: b.result.figures, verdicts, pass: verdicts.every((v) => v.pass) };
    }

    // the next scenario starts on a healthy cluster, without this one's rule in the policy
    await parts.cluster.waitReady();
    if (fleets.every((fleet) => fleet.phases.every((phase) => !phase.removed)) || nemesis.revokes)
      await parts.stack.removeRule(name).catch(() => {});
    return {
      scenario,
      check: result,
      known: KNOWN_FAILING[scenario.id],
      notReady: ready.filter((r) => !r).length,
      syncErrors: all().reduce((sum, instance) => sum + instance.syncErrors, 0),
      lastError: all()
        .map((instance) => instance.lastError)
        .find((e) => e !== undefined),
      wallMs: now() - began,
      ...(outcomes ? { hostile: outcomes } : {}),
    };
  }
}
