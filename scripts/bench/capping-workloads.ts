// The capping engine on the hostile-but-valid workloads of the engine issue (sparse IDs, a busy week,
// busy single users, a big policy, a huge sparse message), beside Grab's per-user design where it
// applies, each with Redis' own slowest script (SLOWLOG) and the PING round trip of the same run.
import { RoaringBitmap32 } from "roaring-wasm";
import { RedisCapStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { type CapStore, MAX_CALLS_IN_FLIGHT } from "../../functions/core/capping/cap-sends-script.ts";
import { Capper } from "../../functions/core/capping/capper.ts";
import { parsePolicy } from "../../functions/core/capping/policy.ts";
import { SegmentIndex } from "../../functions/core/capping/segment-index.ts";
import { fixedClock } from "../../functions/core/shared/clock.ts";
import { capIdentityKey, capRecordKey, capTagOf, perUserLogKey, recordRangeOf } from "../../sdk/src/protocol/index.ts";
import { DAY, T0 } from "./campaign.ts";
import { grabCallOn } from "./grab.ts";
import {
  cpuSeconds,
  fillReplicationBacklogs,
  keysMemory,
  loggedScriptCalls,
  pingLatency,
  replicationBacklogs,
  resetSlowlog,
  SLOWLOG_THRESHOLD_MICROS,
  scriptTime,
  slowestOf,
  slowestScript,
  usedMemory,
} from "./redis-stats.ts";
import { batchesOf, scatteredIds, weekHalf } from "./workload-ids.ts";

/**
 * BENCH_WORKLOAD_RUNS (2): how many times the busy week, the checks and the busy user run, each run in its own
 * namespace with the same clock and inputs; their slowest script is also reported as the slowest call's
 * fastest run (a call slow in one run only was preempted, not working: the machine is shared). Calls are
 * matched by their keys and arguments.
 */
const RUNS = Math.max(1, Number(process.env.BENCH_WORKLOAD_RUNS ?? 2));
/** BENCH_WORKLOADS=sparse,busy,...: only those scenarios (while iterating); default all. */
const SCENARIOS = ["sparse", "week", "checks", "busy", "big", "huge"] as const;
const chosen = new Set(process.env.BENCH_WORKLOADS?.split(",") ?? SCENARIOS);
const want = (scenario: (typeof SCENARIOS)[number]) => chosen.has(scenario);
/** The control script's loop: about as long as a check's script on this machine (~0.05 ms). */
const CONTROL_LOOP_STEPS = "6000";

/** A CapStore that counts the script calls made through it and the most that were in flight at once. */
export function countingCapStore(inner: CapStore): CapStore & { calls: number; mostInFlight: number } {
  let inFlight = 0;
  const counting = {
    calls: 0,
    mostInFlight: 0,
    async capSends(keys: Parameters<CapStore["capSends"]>[0], args: Parameters<CapStore["capSends"]>[1]) {
      counting.calls++;
      counting.mostInFlight = Math.max(counting.mostInFlight, ++inFlight);
      try {
        return await inner.capSends(keys, args);
      } finally {
        inFlight--;
      }
    },
  };
  return counting;
}

interface Row {
  scenario: string;
  tollgate: string;
  grab: string;
  target: string;
  /** The engine issue's "Now" figure for the scenario, before this layout. */
  before: string;
}

function onePolicy(caps: Record<string, { window: string; max: number }[]>) {
  return {
    policy: parsePolicy({ version: "bench", channels: ["push"], segments: [], default: { name: "everyone", caps } }),
    segments: new SegmentIndex([]),
  };
}

export async function runCappingWorkloads(cluster: TollgateCluster): Promise<string[]> {
  await cluster.ping();
  const primaries = cluster.nodes("master");
  const grabCall = grabCallOn(cluster);
  const rows: Row[] = [];
  const us = (seconds: number, decisions: number) => `${((seconds / decisions) * 1e6).toFixed(2)} µs`;
  const bytes = (delta: number, users: number) => `${(delta / users).toFixed(1)} B`;
  const ms = (value: number) => `${value.toFixed(2)} ms`;
  const slowestText = (slowest: { ms: number; calls: number; p99: number }) =>
    slowest.calls === 0
      ? `slowest script < ${SLOWLOG_THRESHOLD_MICROS / 1000} ms (none logged)`
      : `slowest script ${ms(slowest.ms)} (${slowest.calls} at or over ${SLOWLOG_THRESHOLD_MICROS / 1000} ms; p99 of those ${ms(slowest.p99)})`;
  const capperWith = (rules: ReturnType<typeof onePolicy>, namespace: string, store?: CapStore) => {
    const clock = fixedClock(T0);
    return {
      clock,
      capper: new Capper({ store: store ?? new RedisCapStore(cluster), rules: () => rules, clock, namespace }),
    };
  };
  const ping = await pingLatency(primaries);
  /** The mean Redis time of the script calls since `before`: robust where one slowest call measures the machine. */
  const meanScript = async (before: { calls: number; micros: number }) => {
    const after = await scriptTime(primaries);
    return `mean script ${((after.micros - before.micros) / 1000 / Math.max(1, after.calls - before.calls)).toFixed(3)} ms`;
  };
  /**
   * A deterministic scenario run RUNS - 1 more times after its first (`logged`, its calls in `namespace`), each
   * time in a namespace of its own: the slowest of each logged call's fastest run, as text (a call missing from
   * a run's log was under the threshold there and is dropped).
   */
  const fastestOfRuns = async (
    logged: Map<string, number>,
    namespace: string,
    run: (namespace: string) => Promise<unknown>,
  ) => {
    if (RUNS < 2) return "";
    const fastest = new Map(logged);
    for (let again = 1; again < RUNS; again++) {
      await resetSlowlog(primaries);
      await run(`${namespace}-${again}`);
      const other = await loggedScriptCalls(primaries, `${namespace}-${again}`);
      for (const [call, micros] of fastest) {
        const time = other.get(call);
        if (time === undefined) fastest.delete(call);
        else if (time < micros) fastest.set(call, time);
      }
    }
    const steadiest = Math.max(0, ...fastest.values());
    return fastest.size === 0
      ? `; over ${RUNS} runs no call was at or over ${SLOWLOG_THRESHOLD_MICROS / 1000} ms in every run`
      : `; the slowest call's fastest of ${RUNS} runs ${ms(steadiest / 1000)} (${fastest.size} calls at or over ${SLOWLOG_THRESHOLD_MICROS / 1000} ms in every run)`;
  };

  // Sparse campaign: 100k IDs at random in 0..2^31, two campaigns a day apart (caps 1/1d, 2/7d)
  if (want("sparse")) {
    const ids = scatteredIds(100_000, 2 ** 31, 7);
    const rules = onePolicy({
      push: [
        { window: "1d", max: 1 },
        { window: "7d", max: 2 },
      ],
    });
    const { capper, clock } = capperWith(rules, "bench-sparse");
    await fillReplicationBacklogs(primaries);
    await resetSlowlog(primaries);
    const memoryBefore = await usedMemory(primaries);
    const cpuBefore = await cpuSeconds(primaries);
    for (let day = 0; day < 2; day++) {
      clock.set(T0 + day * DAY);
      await Promise.all(
        batchesOf(ids).map((userIds) => capper.capBatch({ campaignId: `sparse-${day}`, channel: "push", userIds })),
      );
    }
    const cpu = (await cpuSeconds(primaries)) - cpuBefore;
    const slowest = await slowestScript(primaries);
    const memory = (await usedMemory(primaries)) - memoryBefore;
    const own = await keysMemory(primaries, "bench-sparse:*");
    const backlog = await replicationBacklogs(primaries);
    const grabBefore = await usedMemory(primaries);
    const grabCpuBefore = await cpuSeconds(primaries);
    for (let day = 0; day < 2; day++) {
      const now = T0 + day * DAY;
      for (const chunk of batchesOf(ids)) {
        await Promise.all(
          chunk.map((id) => grabCall(perUserLogKey("bench-grab-sparse", id), now, DAY, 1, 7 * DAY, 2, now - 7 * DAY)),
        );
      }
    }
    const grabCpu = (await cpuSeconds(primaries)) - grabCpuBefore;
    const grabMemory = (await usedMemory(primaries)) - grabBefore;
    rows.push({
      scenario: "Sparse campaign: 100k IDs at random in 0..2^31, 2 sends (bytes/user, primary CPU/decision)",
      tollgate: `${bytes(memory, ids.length)} (keys' own MEMORY USAGE: ${bytes(own, ids.length)}; replication backlogs filled beforehand, ${(backlog / 2 ** 20).toFixed(1)} MB), ${us(cpu, 2 * ids.length)}; ${slowestText(slowest)}`,
      grab: `${bytes(grabMemory, ids.length)}, ${us(grabCpu, 2 * ids.length)}`,
      target: "≤ 24 B and ≤ 1.0 µs",
      before: "62 B, 3.1 µs (Grab ~157 B, ~9 µs)",
    });
  }

  // A busy week: 100k consecutive users, 30 campaigns, each to a random half (caps 10/1d, 30/7d)
  if (want("week")) {
    const users = 100_000;
    const rules = onePolicy({
      push: [
        { window: "1d", max: 10 },
        { window: "7d", max: 30 },
      ],
    });
    const half = (campaign: number) => weekHalf(users, campaign);
    /** The 30 campaigns in namespace `namespace` (the same clock and halves every time); the sends decided. */
    const runWeek = async (namespace: string) => {
      const { capper, clock } = capperWith(rules, namespace);
      let sends = 0;
      for (let campaign = 0; campaign < 30; campaign++) {
        clock.set(T0 + Math.floor((campaign * 7 * DAY) / 30));
        const ids = half(campaign);
        sends += ids.length;
        await Promise.all(
          batchesOf(ids).map((userIds) =>
            capper.capBatch({ campaignId: `week-${campaign}`, channel: "push", userIds }),
          ),
        );
      }
      return sends;
    };
    // filled here too: the week may run without the sparse scenario before it (BENCH_WORKLOADS=week)
    await fillReplicationBacklogs(primaries);
    await resetSlowlog(primaries);
    const memoryBefore = await usedMemory(primaries);
    const scriptsBefore = await scriptTime(primaries);
    const sends = await runWeek("bench-week");
    const logged = await loggedScriptCalls(primaries, "bench-week");
    const slowest = slowestOf([...logged.values()]);
    // before Grab's calls below, which are EVALSHAs too
    const mean = await meanScript(scriptsBefore);
    const memory = (await usedMemory(primaries)) - memoryBefore;
    const own = await keysMemory(primaries, "bench-week:*");
    // the same week again in namespaces of its own
    const repeated = await fastestOfRuns(logged, "bench-week", runWeek);
    const grabBefore = await usedMemory(primaries);
    for (let campaign = 0; campaign < 30; campaign++) {
      const now = T0 + Math.floor((campaign * 7 * DAY) / 30);
      const ids = half(campaign);
      for (const chunk of batchesOf(ids)) {
        await Promise.all(
          chunk.map((id) => grabCall(perUserLogKey("bench-grab-week", id), now, DAY, 10, 7 * DAY, 30, now - 7 * DAY)),
        );
      }
    }
    const grabMemory = (await usedMemory(primaries)) - grabBefore;
    rows.push({
      scenario: `30 campaigns in a week, each to a random half of 100k users (${sends.toLocaleString("en-US")} sends): bytes/user, slowest script`,
      tollgate: `${bytes(memory, users)} (keys' own MEMORY USAGE: ${bytes(own, users)}), ${slowestText(slowest)}${repeated}, ${mean}`,
      grab: bytes(grabMemory, users),
      target: "≤ 40 B, slowest script ≤ 5 ms",
      before: "67 B, scripts to 16 ms",
    });
  }

  // 256 users × 260 anonymous checks at 2 per 1m (POST /v1/frequency's engine method)
  if (want("checks")) {
    const rules = onePolicy({ push: [{ window: "1m", max: 2 }] });
    /** The checks in `namespace`: how many were answered and allowed. */
    const runChecks = async (namespace: string) => {
      const { capper, clock } = capperWith(rules, namespace);
      let answered = 0;
      let allowed = 0;
      for (let round = 0; round < 260; round++) {
        clock.set(T0 + round * 250);
        const results = await Promise.all(
          Array.from({ length: 256 }, (_, userId) => capper.checkUser({ userId, channel: "push" })),
        );
        answered += results.length;
        allowed += results.filter((result) => result.allowed).length;
      }
      return { answered, allowed };
    };
    await resetSlowlog(primaries);
    const scriptsBefore = await scriptTime(primaries);
    const { answered, allowed } = await runChecks("bench-checks");
    const logged = await loggedScriptCalls(primaries, "bench-checks");
    const mean = await meanScript(scriptsBefore);
    const repeated = await fastestOfRuns(logged, "bench-checks", runChecks);
    rows.push({
      scenario: "256 users × 260 anonymous checks at 2 per 1m (66,560 checks)",
      tollgate: `${answered.toLocaleString("en-US")} answered (${allowed} allowed), ${slowestText(slowestOf([...logged.values()]))}${repeated}, ${mean}`,
      grab: "",
      target: "every check answered; slowest script ≤ 5 ms",
      before: "fails at 65,536 events",
    });
    // The machine's own tail, as a control: a script of fixed work and no data, as long as a check, called
    // as often and as concurrently on the same primary. A slowest call here is scheduling (the bench's own
    // process, six Redis processes, the VM) and says what part of the checks' slowest is not their work.
    const control = "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return x";
    const routeKey = capIdentityKey("bench-checks", 0);
    const sha = String(await cluster.script("LOAD", control));
    await Promise.all(primaries.map((primary) => primary.script("LOAD", control)));
    await resetSlowlog(primaries);
    const controlBefore = await scriptTime(primaries);
    for (let round = 0; round < 260; round++) {
      await Promise.all(Array.from({ length: 256 }, () => cluster.evalsha(sha, 1, routeKey, CONTROL_LOOP_STEPS)));
    }
    const controlSlowest = await slowestScript(primaries);
    rows.push({
      scenario: "Control for the row above: a fixed-work script of no data, 66,560 calls 256 at a time, same primary",
      tollgate: `${slowestText(controlSlowest)}, ${await meanScript(controlBefore)}`,
      grab: "",
      target: "(the machine's own slowest call)",
      before: "",
    });
  }

  // 1 user × 8,000 sends at 1 per 1s
  if (want("busy")) {
    const rules = onePolicy({ push: [{ window: "1s", max: 1 }] });
    const namespace = "bench-busy-user";
    const user = 4242;
    const runBusy = async (namespace: string) => {
      const { capper, clock } = capperWith(rules, namespace);
      for (let i = 0; i < 8_000; i++) {
        clock.set(T0 + i * 1000);
        await capper.capBatch({ campaignId: `s${i}`, channel: "push", userIds: [user] });
      }
    };
    await resetSlowlog(primaries);
    const scriptsBefore = await scriptTime(primaries);
    await runBusy(namespace);
    const logged = await loggedScriptCalls(primaries, namespace);
    const mean = await meanScript(scriptsBefore);
    const key = capRecordKey(namespace, capTagOf(user), recordRangeOf(user));
    const size = Number(await cluster.call("MEMORY", "USAGE", key));
    // the tag's identity table holds the campaign IDs of the user's kept sends: printed beside the record,
    // since a campaign ID per send makes it the larger key
    const identities = Number(await cluster.call("MEMORY", "USAGE", capIdentityKey(namespace, capTagOf(user))));
    rows.push({
      scenario: "1 user × 8,000 sends at 1 per 1s: the user's key, slowest script",
      tollgate: `${(size / 1024).toFixed(1)} KB (the tag's identity table: ${(identities / 1024).toFixed(0)} KB), ${slowestText(slowestOf([...logged.values()]))}${await fastestOfRuns(logged, namespace, runBusy)}, ${mean}`,
      grab: "",
      target: "≤ 16 KB, slowest script ≤ 2 ms",
      before: "1.8 MB block, 110 ms",
    });
  }

  // 65 segments × 32 caps, 256-user calls (4 users in each segment), 20 campaigns 20 minutes apart
  if (want("big")) {
    const caps = (segment: number) => ({
      push: Array.from({ length: 32 }, (_, i) => ({ window: `${i + 1}h`, max: 2 + ((i + segment) % 3) })),
    });
    const bitmaps = Array.from({ length: 64 }, (_, s) => new RoaringBitmap32([0, 1, 2, 3].map((k) => s * 4 + k)));
    const rules = {
      policy: parsePolicy({
        version: "bench-big",
        channels: ["push"],
        segments: Array.from({ length: 64 }, (_, s) => ({
          name: `s${s}`,
          bitmap: `segments/s${s}.roaring`,
          caps: caps(s),
        })),
        default: { name: "rest", caps: caps(64) },
      }),
      segments: new SegmentIndex(bitmaps),
    };
    const { capper, clock } = capperWith(rules, "bench-big-policy");
    const userIds = Array.from({ length: 256 }, (_, i) => i);
    await resetSlowlog(primaries);
    const scriptsBefore = await scriptTime(primaries);
    for (let step = 0; step < 20; step++) {
      clock.set(T0 + step * 20 * 60_000);
      await capper.capBatch({ campaignId: `big-${step}`, channel: "push", userIds });
    }
    const slowest = await slowestScript(primaries);
    rows.push({
      scenario: "65 segments × 32 caps, 256-user calls (20 campaigns)",
      tollgate: `${slowestText(slowest)}, ${await meanScript(scriptsBefore)}`,
      grab: "",
      target: "≤ 5 ms",
      before: "777 ms",
    });
  }

  // One message of 90,000 scattered IDs
  if (want("huge")) {
    const rules = onePolicy({ push: [{ window: "1d", max: 1 }] });
    const counting = countingCapStore(new RedisCapStore(cluster));
    const { capper } = capperWith(rules, "bench-huge-message", counting);
    const userIds = scatteredIds(90_000, 2 ** 32, 11);
    await resetSlowlog(primaries);
    const started = performance.now();
    const result = await capper.capBatch({ campaignId: "huge", channel: "push", userIds });
    const seconds = (performance.now() - started) / 1000;
    const slowest = await slowestScript(primaries);
    rows.push({
      scenario: "One message of 90,000 scattered IDs (a 2 s command timeout, 6 s call deadline)",
      tollgate: `decided in ${seconds.toFixed(2)} s: ${counting.calls.toLocaleString("en-US")} calls, at most ${counting.mostInFlight} in flight (bound ${MAX_CALLS_IN_FLIGHT}), ${slowestText(slowest)}, ${result.totals.everyone?.allowed} allowed`,
      grab: "",
      target: "decided within the time budget, in-flight calls bounded",
      before: "fails on a busy machine",
    });
  }

  return [
    `PING round trip in the same run (one at a time, primaries in turn): p50 ${ms(ping.p50)}, p99 ${ms(ping.p99)}. ` +
      `Slowest script: the longest script call (FCALL, EVALSHA) in Redis' SLOWLOG over the scenario, all primaries (commands over ${SLOWLOG_THRESHOLD_MICROS / 1000} ms are logged).`,
    "",
    "| Scenario | Tollgate | Grab per-user sliding log | Target | Before (engine issue) |",
    "|---|---|---|---|---|",
    ...rows.map((row) => `| ${row.scenario} | ${row.tollgate} | ${row.grab} | ${row.target} | ${row.before} |`),
  ];
}
