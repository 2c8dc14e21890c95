// Grab's per-user design as the capping sections run it: a sorted-set sliding log per user
// (grab-sliding-log.lua), one script call per user and decision.
import { readFileSync } from "node:fs";
import type { TollgateCluster } from "../../functions/adapters/redis-cluster.ts";

/** The script's call: the user's log key; now, the two caps as window and max, the time up to which entries go. */
export type GrabCall = (key: string, ...args: number[]) => Promise<number>;

export const grabLua = () => readFileSync(new URL("./grab-sliding-log.lua", import.meta.url), "utf8");

/** Defines the script on `cluster` (once per client) and returns its call. */
export function grabCallOn(cluster: TollgateCluster): GrabCall {
  cluster.defineCommand("grabSlidingLog", { numberOfKeys: 1, lua: grabLua() });
  return (cluster as unknown as { grabSlidingLog: GrabCall }).grabSlidingLog.bind(cluster);
}
