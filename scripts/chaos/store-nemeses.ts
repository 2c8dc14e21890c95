// The faults on the store that the campaign pipeline's and the check API's scenarios share: each acts on the
// primary a product's keys live on most (its keys match the scenario's pattern), or on every node.
import { isStoreEpochKey } from "../../sdk/src/protocol/index.ts";
import type { ClusterControl } from "./cluster-control.ts";

export interface StoreContext {
  cluster: ClusterControl;
  /** A SCAN pattern matching the scenario's keys (its own namespace or key prefix). */
  pattern: string;
  /**
   * What inject left for heal (the node it killed, its id), and what made the run not the scenario it names
   * (the runner fails it with this as a "run" verdict).
   */
  state: { port?: number; id?: string; notTheScenario?: string };
}

export interface ProductNemesis<C extends StoreContext = StoreContext> {
  name: string;
  /** One line for docs/chaos.md and `--list`. */
  summary: string;
  /** From injected to healed, ms (0: a single act). */
  durationMs: number;
  /** The store's data is lost (the products find it by the store epoch). */
  dataLoss?: boolean;
  /**
   * Every slot is lost: the run acknowledges the loss once a product reports it (`tollgate store acknowledge`)
   * and judges the pause and what follows, the store counting from empty.
   */
  acknowledged?: boolean;
  inject(context: C): Promise<void>;
  heal(context: C): Promise<void>;
}

const nothing = async () => {};
/** How long the killed primary's replica has to take over before the run is not the scenario (node timeout 2 s). */
export const FAILOVER_WITHIN_MS = 20_000;

export const STORE_NEMESES: readonly ProductNemesis[] = [
  { name: "none", summary: "no fault", durationMs: 0, inject: nothing, heal: nothing },
  {
    name: "kill-9-primary",
    summary:
      "kill -9 of the primary holding most of the scenario's keys; its replica takes over; restarted after 5 s (once the replica serves its slots)",
    durationMs: 5000,
    inject: async (c) => {
      c.state.port = await c.cluster.busiestPrimary(c.pattern);
      c.state.id = await c.cluster.idOf(c.state.port);
      c.cluster.kill9(c.state.port);
    },
    heal: async (c) => {
      // restarted before its replica took over, the node would come back empty and still primary: a data loss,
      // which is node-restarted-empty's scenario, not this one
      if (!(await c.cluster.waitTakenOver(c.state.id as string, FAILOVER_WITHIN_MS)))
        c.state.notTheScenario = `no replica took over the killed primary within ${FAILOVER_WITHIN_MS / 1000} s`;
      c.cluster.restart(c.state.port as number);
    },
  },
  {
    name: "client-pause-3s",
    summary: "CLIENT PAUSE 3000 ALL on the primary holding most of the scenario's keys",
    durationMs: 3000,
    inject: async (c) => c.cluster.pause(await c.cluster.busiestPrimary(c.pattern), 3000),
    heal: nothing,
  },
  {
    name: "flushall",
    summary: "FLUSHALL on every primary",
    durationMs: 0,
    dataLoss: true,
    acknowledged: true,
    inject: (c) => c.cluster.flushAll(),
    heal: nothing,
  },
  {
    name: "node-restarted-empty",
    summary: "the primary holding most of the scenario's keys killed and restarted at once, empty, before any failover",
    durationMs: 0,
    dataLoss: true,
    inject: async (c) => {
      const port = await c.cluster.busiestPrimary(c.pattern);
      c.cluster.kill9(port);
      c.cluster.restart(port);
    },
    heal: nothing,
  },
  {
    name: "slot-migration",
    summary:
      "every slot holding the scenario's state moved to the next primary (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE), its store epoch key with it",
    durationMs: 0,
    inject: async (c) => {
      // an initialised store has an epoch key in every slot: the slots to move are those holding state
      const moved = await c.cluster.migrateSlotsOf(c.pattern, 150, (key) => !isStoreEpochKey(key));
      process.stderr.write(`[chaos] slot-migration: ${moved} slots moved\n`);
    },
    heal: nothing,
  },
  {
    name: "cluster-stopped-10s",
    summary: "every node SIGSTOPped for 10 s under load (data kept), then SIGCONT",
    durationMs: 10_000,
    inject: async (c) => c.cluster.signalAll("SIGSTOP"),
    heal: async (c) => c.cluster.signalAll("SIGCONT"),
  },
];
