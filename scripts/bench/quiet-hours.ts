// The quiet-hours section: the dense campaign of the capping section (fresh logs each row) with none of the
// user's-day features configured, with zones and quiet hours (nobody quiet, then two zones of seven quiet and
// deferred, also with CAP_COMPACT_CLASSES=on), with zones and calendar caps (and quiet hours, nobody quiet), and a million users deferred to one instant: the messages it takes and the time to re-decide
// them all at that instant. One row per configuration: a later feature adds its row to ROWS. Beside them, taking
// turns with "none configured", the engine as it was before the issue (baseline-engine.ts), the target's "today".
import { cpus, loadavg } from "node:os";
import type { Redis } from "ioredis";
import { RoaringBitmap32 } from "roaring-wasm";
import { RedisCapStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import type { CampaignBatch } from "../../functions/core/capping/campaign-batch.ts";
import { Capper } from "../../functions/core/capping/capper.ts";
import { deferralMessages } from "../../functions/core/capping/deferral.ts";
import { parsePolicy } from "../../functions/core/capping/policy.ts";
import { SegmentIndex, ZoneIndex } from "../../functions/core/capping/segment-index.ts";
import { type Clock, fixedClock } from "../../functions/core/shared/clock.ts";
import { type BaselineEngine, BEFORE_QUIET_HOURS, baselineEngine } from "./baseline-engine.ts";
import { BATCH, policyDocument, SEGMENTS, segmentOfUser, T0, USERS } from "./campaign.ts";
import { cpuSeconds, redisVersion, usedMemory } from "./redis-stats.ts";
import { n, today } from "./tables.ts";

const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 4);
/** BENCH_QUIET_ROUNDS (3): how many times each row runs. */
const ROUNDS = Number(process.env.BENCH_QUIET_ROUNDS ?? 3);
/**
 * BENCH_QUIET_PAIRS (9): how many times the earlier engine and "none configured" take turns (the first
 * ROUNDS of them among every row). Their ratio is a few per cent, and the shared machine's load moves a round
 * by more: each pair runs back to back, and the target's ratio is the median of the pairs' ratios.
 */
const PAIRS = Number(process.env.BENCH_QUIET_PAIRS ?? 9);
const HOUR = 3_600_000;
/** At T0 (09:00 UTC): 09:00, 10:00, 14:30, 04:00, 01:00, 18:00 local, and 09:00 in the default zone (UTC). */
const ZONES = [
  "Europe/London",
  "Europe/Berlin",
  "Asia/Kolkata",
  "America/New_York",
  "America/Los_Angeles",
  "Asia/Tokyo",
];
/** The user's zone: an index into ZONES, or ZONES.length for the default zone. */
const zoneOfUser = (id: number) => (Math.imul(id ^ 0x5bd1e995, 0x2545f491) >>> 0) % (ZONES.length + 1);

interface Row {
  label: string;
  /** The policy file's additions to the dense campaign's. */
  document: Record<string, unknown>;
  defer?: { maxMs: number };
  /** Caps added to every segment's push caps (calendar windows). */
  caps?: { window: string; max: number }[];
  /** The capper's compactClasses (CAP_COMPACT_CLASSES=on: page blocks of format 6). */
  compactClasses?: boolean;
}

/** One push a calendar day and 3 a calendar week in the user's zone, beside the dense campaign's own caps. */
const CALENDAR_CAPS = [
  { window: "day", max: 1 },
  { window: "week", max: 3 },
];

/** The configurations, each decided over every user on its own namespace (empty logs). */
const ROWS: Row[] = [
  { label: "none configured", document: {} },
  {
    label: "zones + quiet hours, nobody quiet",
    document: { zones: ZONES, defaultZone: "UTC", quietHours: { push: [{ from: "02:00", to: "03:00" }] } },
  },
  {
    label: "zones + quiet hours 21:00-08:00, 2 zones of 7 quiet, deferred",
    document: { zones: ZONES, defaultZone: "UTC", quietHours: { push: [{ from: "21:00", to: "08:00" }] } },
    defer: { maxMs: 12 * HOUR },
  },
  {
    label: "zones + quiet hours 21:00-08:00, 2 zones of 7 quiet, deferred, CAP_COMPACT_CLASSES=on",
    document: { zones: ZONES, defaultZone: "UTC", quietHours: { push: [{ from: "21:00", to: "08:00" }] } },
    defer: { maxMs: 12 * HOUR },
    compactClasses: true,
  },
  {
    label: "zones + calendar caps (day 1, week 3)",
    document: { zones: ZONES, defaultZone: "UTC" },
    caps: CALENDAR_CAPS,
  },
  {
    label: "zones + calendar caps + quiet hours, nobody quiet",
    document: { zones: ZONES, defaultZone: "UTC", quietHours: { push: [{ from: "02:00", to: "03:00" }] } },
    caps: CALENDAR_CAPS,
  },
];

/** The dense campaign's policy with a row's additions. */
function rowPolicy(row: Row) {
  const document = { ...policyDocument(), ...row.document };
  const caps = row.caps;
  if (!caps) return parsePolicy(document);
  const withCaps = (segment: { caps: Record<string, unknown[]> }) => ({
    ...segment,
    caps: { ...segment.caps, push: [...(segment.caps.push ?? []), ...caps] },
  });
  return parsePolicy({ ...document, segments: document.segments.map(withCaps), default: withCaps(document.default) });
}

interface Phase {
  seconds: number;
  decisions: number;
  bytes: number;
  /** CPU time of this process (the deciding side) and of the Redis primaries over the phase. */
  processSeconds: number;
  redisSeconds: number;
  /** What `work` returned, summed: deferred messages, or allowed sends. */
  counted: number;
}

/** The section's table. */
export async function runQuietHours(connect: () => TollgateCluster): Promise<string[]> {
  const batches: number[][] = [];
  for (let start = 0; start < USERS; start += BATCH) {
    batches.push(Array.from({ length: Math.min(BATCH, USERS - start) }, (_, i) => start + i));
  }
  const members = SEGMENTS.map(() => new RoaringBitmap32());
  const zoneMembers = ZONES.map(() => new RoaringBitmap32());
  for (let id = 0; id < USERS; id++) {
    members[segmentOfUser(id)]?.add(id);
    zoneMembers[zoneOfUser(id)]?.add(id);
  }
  for (const bitmap of [...members, ...zoneMembers]) bitmap.runOptimize();
  const segments = new SegmentIndex(members);
  const zones = new ZoneIndex(zoneMembers, ZONES);
  const cluster = connect();
  await cluster.ping();
  const primaries = cluster.nodes("master");
  const clock = fixedClock(T0);

  // untimed: the first campaign on a cluster also pays for loading the script and the first pages
  const warm = parsePolicy(policyDocument());
  const warmCapper = new Capper({
    store: new RedisCapStore(cluster),
    rules: () => ({ policy: warm, segments, zones }),
    clock,
    namespace: "bench-quiet-warm",
  });
  await measure(primaries, batches, async (userIds) => {
    await warmCapper.capBatch({ campaignId: "warm", channel: "push", userIds });
    return 0;
  });
  const baseline = await baselineEngine();
  const before = "missing" in baseline ? undefined : baseline;
  // the rows take turns, ROUNDS times, each time on fresh namespaces: the median is what the table shows, so
  // a burst of load on the shared machine moves one round of one row, not the ratio. The earlier engine runs
  // beside "none configured", first in one round and second in the next, so neither has the other's place.
  const rounds: Phase[][] = ROWS.map(() => []);
  const beforeRounds: Phase[] = [];
  // the earlier engine's tree is deleted however the rounds end
  try {
    if (before)
      await measure(primaries, batches, baselineWork(before, cluster, members, clock, "bench-quiet-warm-before"));
    for (let round = 0; round < Math.max(ROUNDS, before ? PAIRS : 0); round++) {
      const turns: (number | "before")[] = ROWS.map((_, i) => i).filter((i) => round < ROUNDS || i === 0);
      if (before && round < PAIRS) turns.splice(round % 2, 0, "before");
      for (const i of turns) {
        if (i === "before") {
          const phase = await measure(
            primaries,
            batches,
            baselineWork(before as BaselineEngine, cluster, members, clock, `bench-quiet-${round}-before`),
          );
          beforeRounds.push(phase);
          console.log(`round ${round + 1}, engine at ${BEFORE_QUIET_HOURS}: ${perDecision(phase)}`);
          continue;
        }
        const row = ROWS[i] as Row;
        const policy = rowPolicy(row);
        const capper = new Capper({
          store: new RedisCapStore(cluster),
          rules: () => ({ policy, segments, zones }),
          clock,
          namespace: `bench-quiet-${round}-${i}`,
          compactClasses: row.compactClasses === true,
        });
        const phase = await measure(primaries, batches, async (userIds) => {
          const batch: CampaignBatch = {
            campaignId: "quiet",
            channel: "push",
            userIds,
            ...(row.defer ? { defer: row.defer } : {}),
          };
          return deferralMessages(batch, await capper.capBatch(batch)).length;
        });
        rounds[i]?.push(phase);
        console.log(`round ${round + 1}, ${row.label}: ${perDecision(phase)}`);
      }
    }
  } finally {
    before?.close();
  }
  const phases = rounds.map(medianPhase);
  const beforePhase = before ? medianPhase(beforeRounds) : undefined;
  // each pair's ratios: the round's "none configured" over the earlier engine in the same round
  const paired = beforeRounds.map((phase, round) => [phase, rounds[0]?.[round] as Phase] as const);
  const pairRatio = (ratio: (before: Phase, today: Phase) => number) =>
    median(paired.map(([before, today]) => ratio(before, today)));

  // a million users deferred to one instant: everyone in the default zone, decided at 04:00 UTC
  const night = parsePolicy({ ...policyDocument(), quietHours: { push: [{ from: "21:00", to: "08:00" }] } });
  const capper = new Capper({
    store: new RedisCapStore(cluster),
    rules: () => ({ policy: night, segments }),
    clock,
    namespace: "bench-quiet-deferred",
  });
  clock.set(T0 - 5 * HOUR);
  const bodies: string[] = [];
  for (const userIds of batches) {
    const batch: CampaignBatch = { campaignId: "deferred", channel: "push", userIds, defer: { maxMs: 12 * HOUR } };
    for (const deferral of deferralMessages(batch, await capper.capBatch(batch))) bodies.push(deferral.body);
  }
  const instants = new Set(bodies.map((body) => (JSON.parse(body) as CampaignBatch).at));
  clock.set(T0 - HOUR);
  const redecide = await measure(
    primaries,
    bodies.map((_, i) => [i]),
    async ([i]) => {
      const result = await capper.capBatch(JSON.parse(bodies[i as number] as string) as CampaignBatch);
      return Object.values(result.totals).reduce((sum, t) => sum + t.allowed, 0);
    },
  );
  console.log(`${USERS} users deferred: ${bodies.length} messages, re-decided in ${redecide.seconds.toFixed(1)} s`);

  const rate = (phase: Phase) => phase.decisions / phase.seconds;
  const [none] = phases as [Phase];
  const x = (value: number) => `${value.toFixed(2)}×`;
  const load = loadavg()
    .map((value) => value.toFixed(2))
    .join(" / ");
  const figures = (phase: Phase) =>
    `${n(rate(phase))} | ${x(rate(phase) / rate(none))} | ${us(cpuPerDecision(phase))} (${us(phase.processSeconds / phase.decisions)} + ${us(phase.redisSeconds / phase.decisions)}) | ${x(cpuPerDecision(phase) / cpuPerDecision(none))} | ${(phase.bytes / USERS).toFixed(2)} B | ${((phase.bytes - none.bytes) / USERS).toFixed(2)} B more | ${n(phase.counted)}`;
  // the most bytes per user any row of those `which` picks (not "none configured") takes beyond it
  const moreBytes = (which: (row: Row) => boolean) =>
    Math.max(
      ...phases.flatMap((phase, i) => (i > 0 && which(ROWS[i] as Row) ? [(phase.bytes - none.bytes) / USERS] : [])),
    ).toFixed(2);
  const beforeLabel = `engine at ${BEFORE_QUIET_HOURS}, before the quiet hours issue`;
  const beforeTarget = beforePhase
    ? `this run ${x(pairRatio((before, today) => rate(today) / rate(before)))} by decisions/s and ` +
      `${x(pairRatio((before, today) => cpuPerDecision(before) / cpuPerDecision(today)))} by CPU per decision ` +
      `(the earlier engine's CPU per decision over today's), the medians of ${paired.length} back-to-back pairs`
    : `not measured: ${(baseline as { missing: string }).missing}`;
  return [
    `Measured ${today()} by \`npm run bench\` (BENCH_USERS=${USERS}, ${CONCURRENCY} batches of ${BATCH} in flight), ` +
      `Node ${process.version}, ${cpus().length} × ${cpus()[0]?.model ?? "cpu"}, ${await redisVersion(primaries)}, ` +
      `3 primaries + 3 replicas on loopback, one Node process, load average ${load} at the end. The Tollgate engine; ` +
      `each row one campaign to every user on its own namespace (empty logs); the rows take turns ${ROUNDS} times after an untimed one, and the table shows the median round of each figure (the first two rows' over their ${PAIRS} rounds). ` +
      `The first row is the engine at commit ${BEFORE_QUIET_HOURS}, the last before the quiet hours issue's first change (1c0a7be), in the same process on the same cluster (its own library), ` +
      `taking turns with "none configured" ${PAIRS} times (first in one round, second in the next; the first ${ROUNDS} among the other rows). ` +
      "CPU per decision: this process's user + system time (the deciding side) plus the Redis primaries' (`INFO cpu`), over the decisions.",
    "",
    "| Dense campaign | Decisions/s | vs none configured | CPU per decision (Node + primaries) | vs none configured | Redis memory per user | vs none configured | Deferred messages |",
    "|---|---|---|---|---|---|---|---|",
    beforePhase ? `| ${beforeLabel} | ${figures(beforePhase)} |` : `| ${beforeLabel} | ${beforeTarget} | | | | | | |`,
    ...ROWS.map((row, i) => `| ${row.label} | ${figures(phases[i] as Phase)} |`),
    "",
    `${n(USERS)} users deferred to one instant (08:00 UTC, decided at 04:00): ${n(bodies.length)} deferred messages ` +
      `(${instants.size} instant), re-decided at the instant in ${redecide.seconds.toFixed(1)} s ` +
      `(${n(redecide.counted)} allowed).`,
    "",
    `Targets (quiet hours issue): none configured ≥ 0.95× the engine before the issue, by decisions/s and by CPU per decision — ${beforeTarget}; ` +
      `zones + quiet hours ≥ 0.75× — this run ${x(Math.min(...phases.slice(1).map((phase) => rate(phase) / rate(none))))}` +
      (beforePhase
        ? ` (against the engine before the issue: ${x(Math.min(...phases.slice(1).map((phase) => rate(phase) / rate(beforePhase))))})`
        : "") +
      "; " +
      `≤ 2 B per user more — this run ${moreBytes((row) => !row.compactClasses)} B, ${moreBytes((row) => row.compactClasses === true)} B with CAP_COMPACT_CLASSES=on; ` +
      `≤ 200 messages and ≤ 60 s to re-decide a million deferred users — this run ${bodies.length} and ${redecide.seconds.toFixed(1)} s.`,
  ];
}

/** CPU seconds of this process and the primaries per decision. */
const cpuPerDecision = (phase: Phase) => (phase.processSeconds + phase.redisSeconds) / phase.decisions;
const us = (seconds: number) => `${(seconds * 1e6).toFixed(2)} µs`;
const perDecision = (phase: Phase) =>
  `${n(phase.decisions / phase.seconds)} decisions/s, ${us(cpuPerDecision(phase))} CPU/decision ` +
  `(${us(phase.processSeconds / phase.decisions)} + ${us(phase.redisSeconds / phase.decisions)}), ${(phase.bytes / USERS).toFixed(2)} B/user`;

/** The earlier engine's dense campaign, none configured, on its own namespace: `measure`'s work. */
function baselineWork(
  engine: BaselineEngine,
  cluster: TollgateCluster,
  bitmaps: readonly RoaringBitmap32[],
  clock: Clock,
  namespace: string,
): (userIds: number[]) => Promise<number> {
  const capper = engine.capper({ cluster, document: policyDocument(), bitmaps, clock, namespace });
  return async (userIds) => {
    await capper.capBatch({ campaignId: "quiet", channel: "push", userIds });
    return 0;
  };
}

/** Runs `work` over every batch, CONCURRENCY at a time, with the primaries' used memory before and after. */
async function measure(
  primaries: Redis[],
  batches: number[][],
  work: (userIds: number[]) => Promise<number>,
): Promise<Phase> {
  const memoryBefore = await usedMemory(primaries);
  const redisBefore = await cpuSeconds(primaries);
  const processBefore = process.cpuUsage();
  const started = performance.now();
  let next = 0;
  let decisions = 0;
  let counted = 0;
  const worker = async () => {
    while (next < batches.length) {
      const batch = batches[next++] as number[];
      const inBatch = await work(batch);
      counted += inBatch;
      decisions += batch.length;
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const seconds = (performance.now() - started) / 1000;
  const { user, system } = process.cpuUsage(processBefore);
  const redisSeconds = (await cpuSeconds(primaries)) - redisBefore;
  const bytes = (await usedMemory(primaries)) - memoryBefore;
  return { seconds, decisions, bytes, counted, processSeconds: (user + system) / 1e6, redisSeconds };
}

const median = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;

/** The median of each figure over the rounds of one row. */
function medianPhase(phases: readonly Phase[]): Phase {
  const rate = median(phases.map((phase) => phase.decisions / phase.seconds));
  const decisions = phases[0]?.decisions ?? 0;
  // the round of the median CPU per decision, so the two parts shown add up to the figure
  const cpuRound = [...phases].sort((a, b) => cpuPerDecision(a) - cpuPerDecision(b))[
    Math.floor(phases.length / 2)
  ] as Phase;
  return {
    decisions,
    seconds: decisions / rate,
    bytes: median(phases.map((phase) => phase.bytes)),
    counted: median(phases.map((phase) => phase.counted)),
    processSeconds: cpuRound.processSeconds,
    redisSeconds: cpuRound.redisSeconds,
  };
}
