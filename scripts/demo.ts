// `npm run demo`: the main job on this machine. Starts the local Redis Cluster, builds sample segments for
// 1,000,000 users and a policy, loads them the way production does (policy parser, portable bitmaps through
// an ObjectStore), runs a campaign to every user, a second one an hour later on the same channel, and
// redelivers a batch of the first; prints who was sent and who was capped, then stops what it started.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { FileObjectStore } from "../functions/adapters/file-object-store.ts";
import { createRedisCluster, RedisCapStore } from "../functions/adapters/redis-cluster.ts";
import { type CapBatchResult, Capper, type SegmentTotals } from "../functions/core/capper.ts";
import { systemClock } from "../functions/core/clock.ts";
import { parsePolicyText } from "../functions/core/policy.ts";
import { buildSegments } from "../functions/core/segment-builder.ts";
import { loadSegmentIndex } from "../functions/core/segment-index.ts";
import { startCluster, stopCluster } from "./redis-cluster.ts";

const USERS = Number(process.env.DEMO_USERS ?? 1_000_000);
const BATCH = 10_000;
const root = join(".local", "demo");

const policyDocument = {
  version: "demo.1",
  channels: ["email", "push", "sms"],
  segments: [
    { name: "new", bitmap: "segments/new.roaring", caps: { push: [{ window: "1d", max: 1 }] } },
    { name: "active", bitmap: "segments/active.roaring", caps: { push: [{ window: "1d", max: 2 }, { window: "7d", max: 5 }] } },
    { name: "dormant", bitmap: "segments/dormant.roaring", caps: { "*": [{ window: "7d", max: 1 }] } },
  ],
  default: { name: "unsegmented", caps: { "*": [{ window: "7d", max: 3 }] } },
};

/** Sample membership: 10% new, 40% active, 30% dormant, the rest in no segment. */
function sampleSegments(): { name: string; userIds: number[] }[] {
  const lists: Record<string, number[]> = { new: [], active: [], dormant: [] };
  for (let id = 0; id < USERS; id++) {
    const bucket = (Math.imul(id, 0x9e3779b1) >>> 0) % 10;
    const name = bucket < 1 ? "new" : bucket < 5 ? "active" : bucket < 8 ? "dormant" : undefined;
    if (name) lists[name]?.push(id);
  }
  return Object.entries(lists).map(([name, userIds]) => ({ name, userIds }));
}

async function main(): Promise<void> {
  console.log("starting the local Redis Cluster (3 primaries + 3 replicas on 127.0.0.1) ...");
  const local = await startCluster();
  const cluster = createRedisCluster({ nodes: local.ports.slice(0, 3).map((port) => ({ host: local.host, port })) });
  try {
    mkdirSync(join(root, "segments"), { recursive: true });
    mkdirSync(join(root, "config"), { recursive: true });
    const built = buildSegments(sampleSegments());
    for (const [name, bytes] of built) writeFileSync(join(root, "segments", `${name}.roaring`), bytes);
    writeFileSync(join(root, "config", "policy.json"), JSON.stringify(policyDocument, null, 2));

    const store = new FileObjectStore(root);
    const policy = parsePolicyText(Buffer.from(await store.get("config/policy.json")).toString("utf8"));
    const segments = await loadSegmentIndex(policy, store);
    console.log(
      `policy ${policy.version}; segments ${policy.segments
        .slice(0, -1)
        .map((s, i) => `${s.name} (${segments.sizes()[i]} users)`)
        .join(", ")}; ${USERS} users in all`,
    );

    // A namespace per run, so running the demo again starts from empty logs.
    const capper = new Capper({
      store: new RedisCapStore(cluster),
      rules: () => ({ policy, segments }),
      namespace: `demo-${Date.now()}`,
    });
    const now = systemClock.now();
    const first = await campaign(capper, "spring-sale", now - 3_600_000);
    const second = await campaign(capper, "flash-sale", now);
    const redelivered = await capper.capBatch({
      campaignId: "spring-sale",
      channel: "push",
      userIds: Array.from({ length: BATCH }, (_, i) => i),
      at: now - 3_600_000,
    });

    printTable([
      ["spring-sale (push, 1 h ago)", first],
      ["flash-sale (push, now)", second],
    ]);
    const again = Object.values(redelivered.totals).reduce((sum, t) => sum + t.duplicate, 0);
    console.log(`\nredelivered the first batch of spring-sale: ${again} of ${BATCH} recognised as duplicates, none counted twice`);
  } finally {
    await cluster.quit();
    if (local.started) {
      await stopCluster();
      console.log("stopped the local Redis Cluster");
    }
  }
}

async function campaign(capper: Capper, campaignId: string, at: number): Promise<Record<string, SegmentTotals>> {
  const started = performance.now();
  const totals: Record<string, SegmentTotals> = {};
  for (let start = 0; start < USERS; start += BATCH) {
    const userIds = Array.from({ length: Math.min(BATCH, USERS - start) }, (_, i) => start + i);
    const result: CapBatchResult = await capper.capBatch({ campaignId, channel: "push", userIds, at });
    for (const [segment, counts] of Object.entries(result.totals)) {
      const sum = (totals[segment] ??= { allowed: 0, capped: 0, duplicate: 0, exempt: 0, cappedBy: {} });
      sum.allowed += counts.allowed;
      sum.capped += counts.capped;
      sum.duplicate += counts.duplicate;
      sum.exempt += counts.exempt;
      for (const [cap, n] of Object.entries(counts.cappedBy)) sum.cappedBy[cap] = (sum.cappedBy[cap] ?? 0) + n;
    }
  }
  const seconds = (performance.now() - started) / 1000;
  console.log(`${campaignId}: ${USERS} users decided in ${seconds.toFixed(2)} s`);
  return totals;
}

function printTable(campaigns: [string, Record<string, SegmentTotals>][]): void {
  const rows = [["campaign", "segment", "sent", "capped", "cap that bit"]];
  for (const [label, totals] of campaigns) {
    for (const [segment, t] of Object.entries(totals)) {
      const caps = Object.entries(t.cappedBy).map(([cap, n]) => `${cap} (${n})`).join(", ");
      rows.push([label, segment, String(t.allowed + t.duplicate), String(t.capped), caps || "-"]);
    }
  }
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((row) => row[c]!.length)));
  console.log("");
  for (const row of rows) console.log(row.map((cell, c) => cell.padEnd(widths[c]!)).join("  ").trimEnd());
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
