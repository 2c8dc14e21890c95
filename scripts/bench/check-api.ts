// The check-api section: the check API's handler in process one request at a time (check-api-latency.ts),
// then the local Function URL server under autocannon beside rate-limiter-flexible behind an HTTP server as
// small (rlf-contenders.ts), and the same request without HTTP, layer by layer, to show where the figure goes.
import { loadavg } from "node:os";
import type { RateLimiterRedis } from "rate-limiter-flexible";
import { createAwsClients } from "../../functions/adapters/aws-clients.ts";
import { RedisLimitStore, type TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import { uploadObject } from "../../functions/app/operator-actions.ts";
import { Limiter } from "../../functions/core/limits/limiter.ts";
import { LOCAL_IAM, localPrincipalEvent, withLocalTenant } from "../local/local-principals.ts";
import { lambdaContext } from "../local/sqs-poller.ts";
import { DAY } from "./campaign.ts";
import { latencyRows } from "./check-api-latency.ts";
import { combined, type LoadResult, measuredLoad } from "./http-load.ts";
import { type Stoppable, startRlfContenders } from "./rlf-contenders.ts";
import { startBenchStack } from "./stack.ts";
import { n, today } from "./tables.ts";
import { inTurns } from "./timing.ts";

export async function runCheckApi(): Promise<string[]> {
  // 32 execution environments for autocannon's 32 connections, as Lambda would scale to them
  const stack = await startBenchStack({
    queuePrefix: "bench-check",
    namespace: "bench-check",
    checkApiConcurrency: 32,
    // no campaign queue here: its poller's long polls cost this process 2 % of a core, which the CPU per
    // request of every server measured in it would carry
    poll: false,
    // autocannon does not sign: the requests arrive as the local principal, as the function sees them on AWS
    // once the Function URL has checked the signature (without it every answer was a 403)
    trustedCaller: LOCAL_IAM,
  });
  const servers: Stoppable[] = [];
  // the managed-instances setting: one execution environment taking 32 invocations at once (autocannon's 32
  // connections), its checks of one slot sharing a script call (CHECK_SLOT_BATCH), as the stack deploys it
  const managed = await startBenchStack({
    queuePrefix: "bench-check-mi",
    namespace: "bench-check-mi",
    checkApiConcurrency: 1,
    checkApiPerEnvironment: 32,
    quotaSyncConcurrency: 1,
    poll: false,
    trustedCaller: LOCAL_IAM,
  });
  servers.push({ stop: () => managed.stop() });
  try {
    for (const { endpoints } of [stack, managed]) {
      const { s3 } = createAwsClients({ region: endpoints.region, endpoint: endpoints.awsEndpoint });
      await uploadObject(
        s3,
        endpoints.bucket,
        "config/policy.json",
        JSON.stringify(
          withLocalTenant({
            version: "bench",
            channels: ["push"],
            segments: [],
            // the largest cap a policy may hold: no user of the frequency rows reaches it
            default: { name: "everyone", caps: { push: [{ window: "1d", max: 10_000 }] } },
          }),
        ),
      );
    }
    const environments = stack.checkApiEnvironments;
    // one execution environment, one request at a time, for the latencies
    const first = environments[0] as (typeof environments)[number];
    const context = lambdaContext(30_000);
    const rows = await latencyRows(first, context);

    const redisNodes = stack.endpoints.redis
      .slice(0, 3)
      .map((node) => ({ host: "127.0.0.1", port: Number(node.split(":")[1]) }));
    const rlfContenders = await startRlfContenders(redisNodes, environments.length, servers);
    // a year-long window: a run never crosses an epoch-aligned window boundary, so every charge stays counted
    const body = JSON.stringify({
      key: "http-bench",
      algorithm: "fixed-window",
      max: 1_000_000_000,
      windowMs: 365 * DAY,
    });
    const primaries = first.cluster.nodes("master");
    // the servers take turns, 5 s each, twice: load from outside this run falls on all of them alike
    const runs: Record<"ours" | "managed" | "plain" | "pipelined" | "lambda", LoadResult[]> = {
      ours: [],
      managed: [],
      plain: [],
      pipelined: [],
      lambda: [],
    };
    // FCALLs the primaries ran during the managed-instances runs: how many checks a call carried
    let managedCalls = 0;
    for (let round = 0; round < 2; round++) {
      runs.ours.push(await measuredLoad(`${stack.endpoints.functionUrl}/v1/limit`, body, 5, primaries));
      const calledBefore = await scriptCalls(primaries);
      runs.managed.push(await measuredLoad(`${managed.endpoints.functionUrl}/v1/limit`, body, 5, primaries));
      managedCalls += (await scriptCalls(primaries)) - calledBefore;
      runs.plain.push(await measuredLoad(rlfContenders.urls.plain, body, 5, primaries));
      runs.pipelined.push(await measuredLoad(rlfContenders.urls.pipelined, body, 5, primaries));
      runs.lambda.push(await measuredLoad(rlfContenders.lambdaUrl, body, 5, primaries));
    }
    const ours = combined(runs.ours);
    const oursManaged = combined(runs.managed);
    const managedAnswers = runs.managed.reduce((sum, run) => sum + run.requests, 0);
    const theirsLambda = combined(runs.lambda);
    const theirsPlain = combined(runs.plain);
    const theirsPipelined = combined(runs.pipelined);
    const baseline = theirsPlain.rps >= theirsPipelined.rps ? "plain" : "pipelined";
    const theirs = baseline === "plain" ? theirsPlain : theirsPipelined;
    const rlf = rlfContenders.limiters.get(baseline) as RateLimiterRedis;
    // every 200 charged 1; more charges than 200s are requests answered otherwise (or still in flight,
    // at most 32, when autocannon stopped) that were charged all the same
    const peek = await first.handler(
      localPrincipalEvent("/v1/limit", JSON.stringify({ ...JSON.parse(body), cost: 0 })),
      context,
    );
    const charged = 1_000_000_000 - (JSON.parse(peek.body ?? "{}") as { remaining: number }).remaining;
    // where the HTTP figure goes: the same request with 32 in flight, without HTTP, layer by layer
    const parsed = JSON.parse(body) as Record<string, unknown>;
    const namespace = `bench-layers-${Date.now()}`;
    const limiterOn = (cluster: TollgateCluster) =>
      new Limiter({ store: new RedisLimitStore(cluster, { deadlineMs: 1000 }), namespace });
    const oneClient = limiterOn(first.cluster);
    const perEnvironment = oneCallEach(
      environments.map((environment) => {
        const limiter = limiterOn(environment.cluster);
        return (request: unknown) => limiter.check(request);
      }),
    );
    const event = localPrincipalEvent("/v1/limit", body);
    const handlers = oneCallEach(
      environments.map(
        (environment) => (event: ReturnType<typeof localPrincipalEvent>) => environment.handler(event, context),
      ),
    );
    // the managed-instances setting's one environment, all 32 invocations at once, no HTTP and no emulation:
    // what the function itself does beside rate-limiter-flexible on one client
    const managedEnvironment = managed.checkApiEnvironments[0] as (typeof environments)[number];
    const rlfPerEnvironment = oneCallEach(
      rlfContenders.environments.map((limiter) => (key: string) => limiter.consume(key)),
    );
    // the layers take turns, 1 s each, 5 rounds: load from outside this run falls on all of them alike
    const layers = await inTurns({
      limiter: () => oneClient.check(parsed),
      limiterPerEnvironment: () => perEnvironment(parsed),
      // the event is built once, as the Lambda runtime (not the handler) builds it
      handler: () => handlers(event),
      managedHandler: () => managedEnvironment.handler(event, context),
      rlf: () => rlf.consume("layers"),
      rlfPerEnvironment: () => rlfPerEnvironment("layers"),
    });
    console.log(
      `check api http: ${Math.round(ours.rps)} req/s vs rate-limiter-flexible ${Math.round(theirs.rps)} req/s; ` +
        `${ours.statuses}; ${charged} charged`,
    );
    const layer = (name: string, { rps, cpuUs }: { rps: number; cpuUs: number }, ratio: string) =>
      `| ${name} | ${n(rps)} | ${cpuUs.toFixed(0)} µs | ${ratio} |`;
    const n32 = environments.length;
    // per round, each layer against the one below it in the same round
    const perRound = (a: number[], b: number[]) => a.map((value, i) => value / (b[i] as number));
    const span = (values: number[]) => `${Math.min(...values).toFixed(2)}–${Math.max(...values).toFixed(2)}`;
    const handlerLayer = layers.handler.rps / layers.limiterPerEnvironment.rps;
    const httpRatio = ours.rps / theirs.rps;
    const lambdaRatio = ours.rps / theirsLambda.rps;
    const managedRatio = oursManaged.rps / theirs.rps;
    const managedInProcess = layers.managedHandler.rps / layers.rlf.rps;
    const verdict = (met: boolean) => (met ? "met" : "not met");
    const us = (value: number) => `${value.toFixed(0)} µs`;
    /** theirs / ours, CPU per request (the server's, Redis', or both): above 1 when ours costs less. */
    const cpuRatio = (theirs: LoadResult, ours: LoadResult, part?: "serverUs" | "redisUs") => {
      const cost = (run: LoadResult) => (part ? run[part] : run.serverUs + run.redisUs);
      return `${(cost(theirs) / cost(ours)).toFixed(2)}×`;
    };
    return [
      `Measured ${today()} by \`npm run bench\`, load average ${loadavg()[0]?.toFixed(1)} at the end of the section.`,
      "",
      "| Target | This run |",
      "|---|---|",
      `| Handler layer: handler throughput / \`Limiter.check\` throughput, ${n32} execution environments, ≥ 0.8 | ${handlerLayer.toFixed(2)} (rounds ${span(perRound(layers.handler.rates, layers.limiterPerEnvironment.rates))}; by CPU per call ${(layers.limiterPerEnvironment.cpuUs / layers.handler.cpuUs).toFixed(2)}): ${verdict(handlerLayer >= 0.8)} |`,
      `| HTTP: local Function URL server / rate-limiter-flexible behind a minimal server ≥ 0.7× | ${httpRatio.toFixed(2)}× (rounds ${span(perRound(ours.rates, theirs.rates))}×; by CPU per request, server and Redis: ${cpuRatio(theirs, ours)}): ${verdict(httpRatio >= 0.7)} |`,
      `| What the ${n32} Lambda-like environments cost: \`Limiter.check\` on ${n32} clients / on one | ${(layers.limiterPerEnvironment.rps / layers.limiter.rps).toFixed(2)}× (rounds ${span(perRound(layers.limiterPerEnvironment.rates, layers.limiter.rates))}×; by CPU per call ${(layers.limiter.cpuUs / layers.limiterPerEnvironment.cpuUs).toFixed(2)}×) |`,
      `| The same for rate-limiter-flexible: \`consume\` on ${n32} clients / on one | ${(layers.rlfPerEnvironment.rps / layers.rlf.rps).toFixed(2)}× (rounds ${span(perRound(layers.rlfPerEnvironment.rates, layers.rlf.rates))}×; by CPU per call ${(layers.rlf.cpuUs / layers.rlfPerEnvironment.cpuUs).toFixed(2)}×) |`,
      `| HTTP, both in the same ${n32} Lambda-like environments: local Function URL server, check API / rate-limiter-flexible | ${lambdaRatio.toFixed(2)}× (rounds ${span(perRound(ours.rates, theirsLambda.rates))}×; by CPU per request, server and Redis: ${cpuRatio(theirsLambda, ours)}) |`,
      `| HTTP, managed-instances setting (one environment, 32 invocations at once, checks of one slot sharing a script call) / rate-limiter-flexible behind a minimal server ≥ 1.0× | ${managedRatio.toFixed(2)}× (rounds ${span(perRound(oursManaged.rates, theirs.rates))}×; by CPU per request, server and Redis: ${cpuRatio(theirs, oursManaged)}): ${verdict(managedRatio >= 1)} |`,
      `| In process, managed-instances setting: the handler (one environment, ${n32} invocations at once, no HTTP, no Function URL emulation) / \`RateLimiterRedis.consume\` on one client, ${n32} in flight | ${managedInProcess.toFixed(2)}× (rounds ${span(perRound(layers.managedHandler.rates, layers.rlf.rates))}×; by CPU per call ${(layers.rlf.cpuUs / layers.managedHandler.cpuUs).toFixed(2)}×) |`,
      "",
      "2,000 sequential requests per row after 200 warm-up ones (1,000 for a fresh block), the handler called in process (payload 2.0 events, Powertools logger), on the bench cluster.",
      "",
      "| In process, one request at a time | p50 | p99 |",
      "|---|---|---|",
      ...rows,
      "",
      `Over HTTP on loopback, autocannon in its own process (32 connections), one key, a limit never reached, the servers taking turns (5 s each, 2 rounds; mean rate, rounds in brackets); the check API runs ${n32} execution environments, one invocation each at a time, as Lambda would, and, with the managed-instances setting, one environment taking all 32 at once (its own stack on the same cluster, its keys in their own namespace); rate-limiter-flexible runs on plain ioredis clients of its own, and the faster is the baseline. CPU per request: this Node process's (every server runs in it, one under load at a time) and the primaries' (INFO cpu), over the same runs: what load from outside the run moves least:`,
      "",
      "| Server | Requests/s | p99 | Server CPU per request | Redis CPU per request | Answers |",
      "|---|---|---|---|---|---|",
      `| Tollgate local Function URL server, POST /v1/limit fixed-window | ${n(ours.rps)} (${ours.rates.map(n).join(", ")}) | ${ours.p99} ms | ${us(ours.serverUs)} | ${us(ours.redisUs)} | ${ours.statuses}; ${n(charged)} charged |`,
      `| Tollgate local Function URL server, managed-instances setting: one execution environment, 32 invocations at once, CHECK_SLOT_BATCH=32 | ${n(oursManaged.rps)} (${oursManaged.rates.map(n).join(", ")}) | ${oursManaged.p99} ms | ${us(oursManaged.serverUs)} | ${us(oursManaged.redisUs)} | ${oursManaged.statuses}; ${(managedAnswers / Math.max(1, managedCalls)).toFixed(1)} checks per FCALL |`,
      `| rate-limiter-flexible \`RateLimiterRedis.consume\` behind a minimal Node HTTP server, ioredis defaults${baseline === "plain" ? " (baseline)" : ""} | ${n(theirsPlain.rps)} (${theirsPlain.rates.map(n).join(", ")}) | ${theirsPlain.p99} ms | ${us(theirsPlain.serverUs)} | ${us(theirsPlain.redisUs)} | ${theirsPlain.statuses} |`,
      `| the same, ioredis autopipelining${baseline === "pipelined" ? " (baseline)" : ""} | ${n(theirsPipelined.rps)} (${theirsPipelined.rates.map(n).join(", ")}) | ${theirsPipelined.p99} ms | ${us(theirsPipelined.serverUs)} | ${us(theirsPipelined.redisUs)} | ${theirsPipelined.statuses} |`,
      `| Ratio | ${httpRatio.toFixed(2)}× | | ${cpuRatio(theirs, ours, "serverUs")} | ${cpuRatio(theirs, ours, "redisUs")} | |`,
      `| Ratio, managed-instances setting | ${managedRatio.toFixed(2)}× | | ${cpuRatio(theirs, oursManaged, "serverUs")} | ${cpuRatio(theirs, oursManaged, "redisUs")} | |`,
      `| rate-limiter-flexible \`consume\` in ${n32} Lambda-like environments behind the same local Function URL server (one plain client each, one invocation each at a time) | ${n(theirsLambda.rps)} (${theirsLambda.rates.map(n).join(", ")}) | ${theirsLambda.p99} ms | ${us(theirsLambda.serverUs)} | ${us(theirsLambda.redisUs)} | ${theirsLambda.statuses} |`,
      `| Ratio, both in the same environments | ${lambdaRatio.toFixed(2)}× | | ${cpuRatio(theirsLambda, ours, "serverUs")} | ${cpuRatio(theirsLambda, ours, "redisUs")} | |`,
      "",
      "The same request in process, 32 in flight, layer by layer, the layers taking turns (1 s each, 5 rounds) (CPU: this Node process's, per call; Redis runs in its own processes). The handler's event is built once: the Lambda runtime builds it, not the handler.",
      "",
      "| Layer | Requests/s | CPU per call | Ratio |",
      "|---|---|---|---|",
      layer("`Limiter.check` (validation, Lua, result), one Redis client", layers.limiter, ""),
      layer(
        `\`Limiter.check\` on ${n32} clients, one call each at a time (as ${n32} execution environments)`,
        layers.limiterPerEnvironment,
        `${(layers.limiterPerEnvironment.rps / layers.limiter.rps).toFixed(2)}× one client: what ${n32} environments cost ` +
          `(by CPU per call: ${(layers.limiter.cpuUs / layers.limiterPerEnvironment.cpuUs).toFixed(2)}×)`,
      ),
      layer(
        `the handler (Powertools logger and metrics, routing, JSON, headers), ${n32} execution environments`,
        layers.handler,
        `${(layers.handler.rps / layers.limiterPerEnvironment.rps).toFixed(2)}× the line above: the handler layer ` +
          `(by CPU per call: ${(layers.limiterPerEnvironment.cpuUs / layers.handler.cpuUs).toFixed(2)}×)`,
      ),
      layer(
        `the handler, managed-instances setting: one execution environment, ${n32} invocations at once (CHECK_SLOT_BATCH=${n32})`,
        layers.managedHandler,
        `${managedInProcess.toFixed(2)}× \`RateLimiterRedis.consume\` on one client (by CPU per call: ${(layers.rlf.cpuUs / layers.managedHandler.cpuUs).toFixed(2)}×)`,
      ),
      layer(
        `\`RateLimiterRedis.consume\`, one Redis client (${baseline === "plain" ? "ioredis defaults" : "autopipelining"})`,
        layers.rlf,
        "",
      ),
      layer(
        `\`RateLimiterRedis.consume\` on ${n32} plain clients, one call each at a time (as ${n32} execution environments)`,
        layers.rlfPerEnvironment,
        `${(layers.rlfPerEnvironment.rps / layers.rlf.rps).toFixed(2)}× one client (by CPU per call: ${(layers.rlf.cpuUs / layers.rlfPerEnvironment.cpuUs).toFixed(2)}×)`,
      ),
    ];
  } finally {
    for (const server of servers) await server.stop();
    await stack.stop();
  }
}

/** FCALL and FCALL_RO calls the primaries have run (INFO commandstats). */
async function scriptCalls(primaries: readonly { info(section: string): Promise<string> }[]): Promise<number> {
  let calls = 0;
  for (const node of primaries) {
    const info = await node.info("commandstats");
    for (const match of info.matchAll(/^cmdstat_fcall(?:_ro)?:calls=(\d+)/gm)) calls += Number(match[1]);
  }
  return calls;
}

/** Runs each call on a free worker, one call per worker at a time (as one per execution environment). */
function oneCallEach<A, R>(workers: readonly ((arg: A) => Promise<R>)[]): (arg: A) => Promise<R> {
  const idle = [...workers];
  const waiting: ((worker: (arg: A) => Promise<R>) => void)[] = [];
  return async (arg) => {
    const worker = idle.pop() ?? (await new Promise<(arg: A) => Promise<R>>((resolve) => waiting.push(resolve)));
    try {
      return await worker(arg);
    } finally {
      const next = waiting.shift();
      if (next) next(worker);
      else idle.push(worker);
    }
  };
}
