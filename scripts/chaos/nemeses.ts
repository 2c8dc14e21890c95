// The faults of the chaos grid, one nemesis each: what it does when injected and how it heals. A scenario
// is a nemesis on one mode and one transport (scenarios.ts); the runner injects it 3 s into the load.
import type { QuotaRuleDocument } from "../../functions/core/shared/quota-rules.ts";
import { DEFAULT_NAMESPACE, quotaKey, slotGroupOf, slotGroupPrefix } from "../../sdk/src/protocol/index.ts";
import type { ClusterControl } from "./cluster-control.ts";
import { setClockOffset } from "./instances.ts";
import type { Transport } from "./scenario-types.ts";
import type { ChaosStack } from "./stack.ts";

export interface NemesisContext {
  cluster: ClusterControl;
  stack: ChaosStack;
  /** The scenario's rule name and key. */
  rule: string;
  key: string;
  /** The clock file of instance 0 (clock nemeses only). */
  clockFile: string | undefined;
  /** What inject left for heal (the node it killed). */
  state: { port?: number; restored?: string[] };
}

export interface Nemesis {
  name: string;
  /** One line for docs/chaos.md and the grid. */
  summary: string;
  /** Default: both. */
  transports?: readonly Transport[];
  /** From injected to healed, ms (0: a single act). */
  durationMs: number;
  /** No load while the fault lasts (the "idle" outages). */
  idle?: boolean;
  /** Offered load in multiples of the limit (default 2). */
  load?: number;
  /** Instance 0 runs under libfaketime, its wall clock this far off from the start (ms). */
  clockOffsetMs?: number;
  /** The operator changes the rule at injection (undefined: removes it); the checker's contract follows. */
  change?: (rule: QuotaRuleDocument) => QuotaRuleDocument | undefined;
  /** The operator revokes tenant A's grant of the rule at injection (tenant scenarios); B keeps it. */
  revokes?: boolean;
  /** Only in the tenant scenarios (scenarios.ts). */
  tenantsOnly?: boolean;
  /** The instances serve Express (`expressQuotas`) on loopback, their load from autocannon (default: direct). */
  front?: "direct" | "express";
  /** express: autocannon's pacing (default) or the seeded Poisson arrivals from a process of our own. */
  pacing?: "autocannon" | "poisson";
  /** A fresh instance process joins at injection. */
  joins?: boolean;
  /** The store's data is lost (recovery may take one window plus the lease). */
  dataLoss?: boolean;
  /** Nothing happens at injection (no fault, or one for the whole run): no recovery to measure. */
  steady?: boolean;
  /** Verdicts judged beside the window rule: utilisation at least, denials under the limit at most (a share). */
  judge?: { utilisation?: number; underLimitShare?: number };
  inject(context: NemesisContext): Promise<void>;
  heal(context: NemesisContext): Promise<void>;
}

const nothing = async () => {};
/** The primary serving the scenario's key (slot group 0 of the rule: the harness's rules have one group). */
const rulesPrimary = (c: NemesisContext) =>
  c.cluster.primaryOf(quotaKey(slotGroupPrefix(DEFAULT_NAMESPACE, c.rule, slotGroupOf(c.key, 1)), c.key));

function clusterStopped(seconds: number, idle: boolean): Nemesis {
  return {
    name: `cluster-stopped-${seconds}s-${idle ? "idle" : "loaded"}`,
    summary: `every node SIGSTOPped for ${seconds} s (data kept), ${idle ? "no load meanwhile" : "under load"}, then SIGCONT`,
    durationMs: seconds * 1000,
    idle,
    inject: async (c) => c.cluster.signalAll("SIGSTOP"),
    heal: async (c) => c.cluster.signalAll("SIGCONT"),
  };
}

function clockStep(ms: number): Nemesis {
  return {
    name: `clock-step${ms > 0 ? "+" : ""}${ms}ms`,
    summary: `instance 0's wall clock steps ${ms > 0 ? "forward" : "back"} ${Math.abs(ms)} ms (libfaketime), and stays there`,
    durationMs: 0,
    clockOffsetMs: 0,
    inject: async (c) => setClockOffset(c.clockFile as string, ms),
    heal: nothing,
  };
}

function clockSkew(ms: number): Nemesis {
  return {
    name: `clock-skew${ms > 0 ? "+" : ""}${ms / 1000}s`,
    summary: `instance 0's wall clock ${ms > 0 ? "ahead" : "behind"} by ${Math.abs(ms) / 1000} s for the whole run`,
    durationMs: 0,
    clockOffsetMs: ms,
    steady: true,
    inject: nothing,
    heal: nothing,
  };
}

function proxyFault(name: string, summary: string, fault: ChaosStack["proxy"]["fault"]): Nemesis {
  return {
    name,
    summary: `${summary} for 3 s (the fault proxy in front of the sync route)`,
    transports: ["http"],
    durationMs: 3000,
    inject: async (c) => {
      c.stack.proxy.fault = fault;
    },
    heal: async (c) => {
      c.stack.proxy.fault = { kind: "pass" };
    },
  };
}

export const NEMESES: readonly Nemesis[] = [
  {
    name: "none",
    summary: "no fault: 2× the limit",
    durationMs: 0,
    steady: true,
    judge: { utilisation: 0.95 },
    inject: nothing,
    heal: nothing,
  },
  {
    name: "none-express",
    summary: "no fault: 2× the limit through real HTTP (Express + expressQuotas, autocannon in its own process)",
    durationMs: 0,
    steady: true,
    front: "express",
    judge: { utilisation: 0.95 },
    inject: nothing,
    heal: nothing,
  },
  {
    name: "none-express-poisson",
    summary:
      "no fault: 2× the limit through real HTTP (Express), the seeded Poisson arrivals sent from a process of their own",
    durationMs: 0,
    steady: true,
    front: "express",
    pacing: "poisson",
    judge: { utilisation: 0.95 },
    inject: nothing,
    heal: nothing,
  },
  {
    name: "steady-97pct",
    summary: "no fault: 0.97× the limit (under it, so nothing should be denied)",
    durationMs: 0,
    load: 0.97,
    steady: true,
    judge: { underLimitShare: 0.01 },
    inject: nothing,
    heal: nothing,
  },
  {
    name: "fresh-process",
    summary: "a new instance process joins at 0.5× the limit (its requests after ready() are under the limit)",
    durationMs: 0,
    load: 0.5,
    joins: true,
    steady: true,
    judge: { underLimitShare: 0 },
    inject: nothing,
    heal: nothing,
  },
  {
    name: "kill-9-primary",
    summary: "kill -9 of the primary serving the rule's key; its replica takes over; restarted after 5 s",
    durationMs: 5000,
    inject: async (c) => {
      c.state.port = await rulesPrimary(c);
      c.cluster.kill9(c.state.port);
    },
    heal: async (c) => c.cluster.restart(c.state.port as number),
  },
  {
    name: "client-pause-3s",
    summary: "CLIENT PAUSE 3000 ALL on the primary serving the rule's key",
    durationMs: 3000,
    inject: async (c) => c.cluster.pause(await rulesPrimary(c), 3000),
    heal: nothing,
  },
  {
    name: "flushall",
    summary: "FLUSHALL on every primary",
    durationMs: 0,
    dataLoss: true,
    inject: (c) => c.cluster.flushAll(),
    heal: nothing,
  },
  {
    name: "flushall-restored",
    summary: "FLUSHALL on every primary, then the scheduled restore 1 s later (on AWS: within a minute)",
    durationMs: 1000,
    dataLoss: true,
    tenantsOnly: true,
    inject: (c) => c.cluster.flushAll(),
    heal: async (c) => {
      c.state.restored = await c.stack.restoreNow();
    },
  },
  {
    name: "node-restarted-empty",
    summary: "the primary serving the rule's key killed and restarted at once, empty, before any failover",
    durationMs: 0,
    dataLoss: true,
    inject: async (c) => {
      const port = await rulesPrimary(c);
      c.cluster.kill9(port);
      c.cluster.restart(port);
    },
    heal: nothing,
  },
  clusterStopped(10, true),
  clusterStopped(10, false),
  clusterStopped(60, true),
  clusterStopped(60, false),
  clockStep(100),
  clockStep(500),
  clockStep(1200),
  clockStep(-1000),
  clockSkew(2000),
  clockSkew(-2000),
  {
    name: "max-lowered",
    summary: "the operator lowers max from 100 to 50 (`quotas set --redis`)",
    durationMs: 0,
    change: (rule) => ({ ...rule, limits: rule.limits.map((l) => ({ ...l, max: 50 })) }),
    inject: nothing,
    heal: nothing,
  },
  {
    name: "slot-groups-1-to-8",
    summary: "the operator changes slotGroups from 1 to 8, max unchanged (refused while the rule is in service)",
    durationMs: 0,
    change: (rule) => ({ ...rule, slotGroups: 8 }),
    inject: nothing,
    heal: nothing,
  },
  {
    name: "mode-flipped",
    summary: "the operator switches the rule's mode (strict ⇄ approximate)",
    durationMs: 0,
    change: (rule) => ({ ...rule, mode: rule.mode === "strict" ? "approximate" : "strict" }),
    inject: nothing,
    heal: nothing,
  },
  {
    name: "rule-removed",
    summary: "the rule removed from the policy (`policy upload`), Redis written as `quotas set --redis` does",
    durationMs: 0,
    change: () => undefined,
    inject: nothing,
    heal: nothing,
  },
  {
    name: "rule-revoked-for-a",
    summary: "the operator revokes tenant A's grant of the rule; tenant B, same rule name, keeps it",
    durationMs: 0,
    revokes: true,
    tenantsOnly: true,
    inject: nothing,
    heal: nothing,
  },
  {
    name: "sync-function-restarted",
    summary: "kill -9 of the QuotaSync function's process, started again at once (a cold start)",
    transports: ["http"],
    durationMs: 0,
    inject: async (c) => {
      await c.stack.killSyncServer();
      await c.stack.startSyncServer();
    },
    heal: nothing,
  },
  proxyFault("proxy-500", "every sync answered 500", { kind: "status", status: 500 }),
  proxyFault("proxy-latency-300ms", "300 ms added to every sync", { kind: "latency", ms: 300 }),
  proxyFault("proxy-drop", "every sync connection dropped", { kind: "drop" }),
];
