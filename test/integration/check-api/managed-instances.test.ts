// The check API as Lambda Managed Instances run it, emulated locally: one execution environment (one
// handler instance, its module state shared) taking 64 invocations at once from the local Function URL
// server, CHECK_SLOT_BATCH on as the stack sets it. Over signed HTTP on the real cluster: N concurrent
// checks of one key with max M allow exactly M, the answers are the serial reference model's (as a multiset:
// HTTP does not tell the order they reached the handler in), and the primaries ran fewer FCALLs than requests.
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatcher } from "../../../scripts/local/function-url-server.ts";
import { localPrincipalEvent } from "../../../scripts/local/local-principals.ts";
import { lambdaContext } from "../../../scripts/local/sqs-poller.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { clusterPorts, primariesOf } from "../../support/cluster.ts";
import { checkOne, FixedWindowModel, type ModelReply } from "../../support/limit-models.ts";
import { testStack, uploadRules } from "../../support/pipeline.ts";
import { signedFetch } from "../../support/signed-fetch.ts";

const PER_ENVIRONMENT = 64;
let stack: LocalStack;
let nodes: Redis[];
beforeAll(async () => {
  stack = await testStack({
    checkApiConcurrency: 1,
    checkApiPerEnvironment: PER_ENVIRONMENT,
    // every request reaches the store: a denial answered from the cache would be a call saved without joining
    checkApiEnvironment: { NEGATIVE_CACHE: "false" },
  });
  // the policy names the tenants (the local principal's) every limit runs as
  await uploadRules(
    stack,
    {
      version: "mi.1",
      channels: ["push"],
      segments: [],
      default: { name: "rest", caps: { push: [{ window: "1d", max: 1 }] } },
    },
    {},
  );
  nodes = clusterPorts.map((port) => new Redis({ host: "127.0.0.1", port, lazyConnect: false }));
});
afterAll(async () => {
  for (const node of nodes) node.disconnect();
  await stack.stop();
});

/** FCALL and FCALL_RO calls run by the cluster's primaries so far (INFO commandstats). */
async function primaryFcalls(): Promise<number> {
  let calls = 0;
  for (const { node } of await primariesOf(nodes)) {
    const info = await node.info("commandstats");
    for (const match of info.matchAll(/^cmdstat_fcall(?:_ro)?:calls=(\d+)/gm)) calls += Number(match[1]);
  }
  return calls;
}

const post = (body: unknown) =>
  signedFetch(`${stack.endpoints.functionUrl}/v1/limit`, { method: "POST", body: JSON.stringify(body) });

describe("one execution environment, several invocations at once", () => {
  it("runs every check API invocation in one environment", () => {
    expect(stack.checkApiEnvironments).toHaveLength(1);
  });

  /** The serial model's answers to `count` checks of `request`, and a comparison that ignores arrival order. */
  function serialAnswers(request: { max: number; windowMs: number; at: number }, count: number) {
    const model = new FixedWindowModel();
    return Array.from({ length: count }, () => fields(checkOne(model, request.at, 1, request))).sort(order);
  }
  const fields = (r: ModelReply) => ({
    allowed: r.allowed,
    limit: r.limit,
    remaining: r.remaining,
    resetAt: r.resetAt,
    retryAfterMs: r.retryAfterMs ?? 0,
  });
  const order = (a: ModelReply, b: ModelReply) => b.remaining - a.remaining || Number(b.allowed) - Number(a.allowed);

  it("200 concurrent signed requests of one key with max 70 over HTTP: exactly 70 allowed, the serial model's answers", async () => {
    const at = Date.now();
    const request = { key: `mi-${at}`, algorithm: "fixed-window", max: 70, windowMs: 86_400_000, at };
    // the environment's connections and library are warm before the count starts
    const warm = await post({ ...request, key: `${request.key}-warm` });
    expect(await warm.text()).toMatch(/"allowed":true/);
    const before = await primaryFcalls();
    const responses = await Promise.all(Array.from({ length: 200 }, () => post(request)));
    const calls = (await primaryFcalls()) - before;
    expect(responses.map((r) => r.status)).toEqual(Array(200).fill(200));
    const replies = (await Promise.all(responses.map((r) => r.json()))) as ModelReply[];
    expect(replies.filter((r) => r.allowed)).toHaveLength(70);
    expect(replies.map(fields).sort(order)).toEqual(serialAnswers(request, 200));
    // how many calls were joined over HTTP depends on how the requests' arrivals interleave with Redis'
    // answers on this host (the next test counts them where arrivals do not depend on the host)
    console.log(`managed-instances emulation over HTTP: 200 requests, ${calls} FCALLs on the primaries`);
  });

  it("the Function URL server's dispatch, 200 invocations into the one environment at once: 70 allowed, far fewer FCALLs than invocations", async () => {
    const [environment] = stack.checkApiEnvironments;
    if (!environment) throw new Error("no check API environment");
    const invoke = dispatcher([environment.handler], PER_ENVIRONMENT);
    const at = Date.now();
    const request = { key: `mi-dispatch-${at}`, algorithm: "fixed-window", max: 70, windowMs: 86_400_000, at };
    const event = () => localPrincipalEvent("/v1/limit", JSON.stringify(request));
    const before = await primaryFcalls();
    const results = await Promise.all(Array.from({ length: 200 }, () => invoke(event(), lambdaContext(30_000))));
    const calls = (await primaryFcalls()) - before;
    expect(results.map((r) => r.statusCode)).toEqual(Array(200).fill(200));
    const replies = results.map((r) => JSON.parse(r.body ?? "{}") as ModelReply);
    expect(replies.filter((r) => r.allowed)).toHaveLength(70);
    expect(replies.map(fields).sort(order)).toEqual(serialAnswers(request, 200));
    // one call per invocation without joining (200); 64 at once, each slot's waiting checks in one call
    expect(calls).toBeLessThan(50);
    console.log(`managed-instances emulation, dispatched: 200 invocations, ${calls} FCALLs on the primaries`);
  });
});
