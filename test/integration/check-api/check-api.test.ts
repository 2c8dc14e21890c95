// The check API over HTTP: the local Function URL server, payload 2.0 events, the real handler, the real
// cluster. Every error path answers with the documented status and body.
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { wireCheckApi } from "../../../functions/app/wiring.ts";
import { runCli } from "../../../scripts/cli.ts";
import { startFunctionUrlServer } from "../../../scripts/local/function-url-server.ts";
import { LOCAL_CREDENTIAL } from "../../../scripts/local/local-principals.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { testStack, uploadRules } from "../../support/pipeline.ts";
import { signedFetch } from "../../support/signed-fetch.ts";

let stack: LocalStack;
let url: string;
beforeAll(async () => {
  stack = await testStack();
  url = stack.endpoints.functionUrl;
  await uploadRules(
    stack,
    {
      version: "check.1",
      channels: ["push", "email"],
      segments: [{ name: "new", bitmap: "segments/new.roaring", caps: { push: [{ window: "1d", max: 1 }] } }],
      default: { name: "rest", caps: { "*": [{ window: "7d", max: 2 }] } },
    },
    { new: [1, 2, 3] },
  );
});
afterAll(async () => {
  await stack.stop();
});

const post = (path: string, body: unknown, base = url) =>
  signedFetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });

describe("POST /v1/limit", () => {
  it("answers with the decision and RateLimit headers, then from the negative cache", async () => {
    const limit = { key: `http-${Date.now()}`, algorithm: "fixed-window", max: 2, windowMs: 3_600_000 };
    const first = await post("/v1/limit", limit);
    expect(first.status).toBe(200);
    expect(await first.json()).toMatchObject({ allowed: true, limit: 2, remaining: 1 });
    expect(first.headers.get("ratelimit-limit")).toBe("2");
    expect(first.headers.get("ratelimit-remaining")).toBe("1");
    expect(Number(first.headers.get("ratelimit-reset"))).toBeGreaterThan(0);
    expect(first.headers.get("retry-after")).toBeNull();
    await post("/v1/limit", limit);
    const denied = await post("/v1/limit", limit);
    const body = (await denied.json()) as {
      allowed: boolean;
      remaining: number;
      retryAfterMs: number;
      reason?: string;
    };
    expect(body).toMatchObject({ allowed: false, remaining: 0 });
    expect(body.reason).toBeUndefined();
    expect(body.retryAfterMs).toBeGreaterThan(0);
    expect(Number(denied.headers.get("retry-after"))).toBe(Math.ceil(body.retryAfterMs / 1000));
    const cached = await post("/v1/limit", limit);
    // answered from the negative cache: the same reply as the fresh denial, and the same headers
    const again = (await cached.json()) as typeof body;
    expect(Object.keys(again)).toEqual(Object.keys(body));
    expect({ ...again, retryAfterMs: 0 }).toEqual({ ...body, retryAfterMs: 0 });
    expect(again.retryAfterMs).toBeLessThanOrEqual(body.retryAfterMs);
    expect([...cached.headers.keys()].sort()).toEqual([...denied.headers.keys()].sort());
  });

  it("answers every bad request with the documented status, code and path", async () => {
    const cases: [string, string | object, number, string | undefined][] = [
      ["/v1/limit", "{ not json", 400, "body"],
      ["/v1/limit", { key: "k", algorithm: "leaky-bucket", max: 1, windowMs: 1000 }, 400, "algorithm"],
      ["/v1/limit", { key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000, cost: -1 }, 400, "cost"],
      ["/v1/limit", { key: "k", algorithm: "fixed-window", max: 1 }, 400, "windowMs"],
      ["/v1/limit", { key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000, cost: 2 }, 400, "cost"],
      [
        "/v1/limit",
        { key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000, onStoreError: "maybe" },
        400,
        "onStoreError",
      ],
      ["/v1/limits", { scope: "s", limits: [] }, 400, "limits"],
      // strict bodies: an unknown field (a typo) is named, never dropped; `at` has a lower bound
      ["/v1/limit", { key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000, strcit: true }, 400, "strcit"],
      ["/v1/limit", { key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000, at: 0 }, 400, "at"],
      [
        "/v1/limits",
        { scope: "s", limits: [{ key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000 }], strcit: 1 },
        400,
        "strcit",
      ],
      // JSON.parse would keep the last "max" silently
      ["/v1/limit", '{"key":"k","algorithm":"fixed-window","max":1,"windowMs":1000,"max":1000}', 400, "max"],
      [
        "/v1/limits",
        '{"scope":"s","limits":[{"key":"a","algorithm":"gcra","burst":1,"count":1,"periodMs":1000,"key":"b"}]}',
        400,
        "limits[0].key",
      ],
      ["/v1/limit", { key: "k", pad: "x".repeat(70_000) }, 413, undefined],
      ["/v2/limit", {}, 404, undefined],
    ];
    for (const [path, body, status, field] of cases) {
      const response = await post(path, body);
      expect(response.status, `${path} ${JSON.stringify(body).slice(0, 80)}`).toBe(status);
      const error = ((await response.json()) as { error: { code: string; path?: string } }).error;
      expect(error.code).toBe({ 400: "invalid_request", 413: "payload_too_large", 404: "not_found" }[status]);
      expect(error.path).toBe(field);
    }
    const wrongMethod = await signedFetch(`${url}/v1/limit`);
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get("allow")).toBe("POST");
  });
});

describe("RateLimit headers", () => {
  // an hour before now, on the hour: a replay the API accepts on any date, its windows aligned
  const T = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3_600_000;

  it("count from the request's `at`, state the policy, and give a denial one moment in Reset and Retry-After", async () => {
    const limit = { key: `headers-${Date.now()}`, algorithm: "sliding-window", max: 2, windowMs: 60_000 };
    const first = await post("/v1/limit", { ...limit, at: T + 30_000 });
    expect(first.status).toBe(200);
    expect(first.headers.get("ratelimit-policy")).toBe("2;w=60");
    // a replayed request: its reset is counted from its `at`, not from the server's clock
    const { resetAt } = (await first.json()) as { resetAt: number };
    expect(first.headers.get("ratelimit-reset")).toBe(String(Math.ceil((resetAt - (T + 30_000)) / 1000)));
    await post("/v1/limit", { ...limit, at: T + 30_001 });
    // the next window: the previous one still weighs, so the request waits past the current window's reset
    const denied = await post("/v1/limit", { ...limit, at: T + 60_000 });
    const body = (await denied.json()) as { allowed: boolean; retryAfterMs: number };
    expect(body.allowed).toBe(false);
    expect(denied.headers.get("retry-after")).toBe(String(Math.ceil(body.retryAfterMs / 1000)));
    expect(denied.headers.get("ratelimit-reset")).toBe(denied.headers.get("retry-after"));
  });

  it("list every limit's policy on /v1/limits", async () => {
    const response = await post("/v1/limits", {
      scope: `policy-${Date.now()}`,
      limits: [
        { key: "global", algorithm: "token-bucket", max: 10, refillAmount: 1, refillEveryMs: 6_000 },
        { key: "burst", algorithm: "gcra", burst: 4, count: 1, periodMs: 1_000 },
      ],
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("ratelimit-policy")).toBe("10;w=60, 5;w=5");
  });
});

describe("methods (RFC 9110)", () => {
  it("answers HEAD as GET without the content, and names the allowed methods on a 405", async () => {
    const get = await signedFetch(`${url}/v1/health`);
    const head = await signedFetch(`${url}/v1/health`, { method: "HEAD" });
    expect(head.status).toBe(get.status);
    expect(head.headers.get("content-type")).toBe(get.headers.get("content-type"));
    expect(await head.text()).toBe("");
    const postHealth = await post("/v1/health", {});
    expect(postHealth.status).toBe(405);
    expect(postHealth.headers.get("allow")).toBe("GET, HEAD");
    const headLimit = await signedFetch(`${url}/v1/limit`, { method: "HEAD" });
    expect(headLimit.status).toBe(405);
    expect(headLimit.headers.get("allow")).toBe("POST");
  });
});

describe("POST /v1/limits", () => {
  it("charges every level or none and names the level that denied", async () => {
    const body = (category: string) => ({
      scope: `u-${Date.now()}`,
      limits: [
        { key: "global", algorithm: "fixed-window", max: 10, windowMs: 3_600_000 },
        { key: `category:${category}`, algorithm: "fixed-window", max: 1, windowMs: 3_600_000 },
      ],
    });
    const request = body("promo");
    expect(((await (await post("/v1/limits", request)).json()) as { allowed: boolean }).allowed).toBe(true);
    const denied = (await (await post("/v1/limits", request)).json()) as {
      allowed: boolean;
      results: { key: string; allowed: boolean; remaining: number }[];
    };
    expect(denied.allowed).toBe(false);
    expect(denied.results.map((r) => [r.key, r.allowed, r.remaining])).toEqual([
      ["global", true, 9],
      ["category:promo", false, 0],
    ]);
  });
});

describe("GET /v1/health", () => {
  it("reports Redis, the policy in service, the segment sizes and the store epoch", async () => {
    const response = await signedFetch(`${url}/v1/health`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({
      ok: true,
      redis: "ok",
      policyVersion: "check.1",
      segments: { new: 3 },
      store: { epoch: expect.any(Number), initialisedAt: expect.any(String), lostSlots: [], slotsLostSinceStart: 0 },
    });
  });
});

describe("when Redis does not answer", () => {
  it("fails closed with 503, or allows with a reason when the request asks", async () => {
    const api = wireCheckApi({
      ...process.env,
      REDIS_NODES: "127.0.0.1:1",
      CONFIG_BUCKET: stack.endpoints.bucket,
      AWS_ENDPOINT_URL: stack.endpoints.awsEndpoint,
      CHECK_TIMEOUT_MS: "50",
    });
    const server = await startFunctionUrlServer(api.handler, 0, "tollgate-check-api", {
      credentials: [LOCAL_CREDENTIAL],
    });
    try {
      const limit = { key: "k", algorithm: "fixed-window", max: 1, windowMs: 1000 };
      const closed = await post("/v1/limit", limit, server.url);
      expect(closed.status).toBe(503);
      expect(await closed.json()).toEqual({
        error: {
          code: "store_unavailable",
          message: "the counter store did not answer in time; nothing was counted",
          // no connection was ever ready: the command was never sent
          maybeCounted: false,
        },
      });
      const open = await post("/v1/limit", { ...limit, onStoreError: "allow" }, server.url);
      expect(open.status).toBe(200);
      expect(await open.json()).toEqual({ allowed: true, reason: "store_unavailable", maybeCounted: false });
      const health = await signedFetch(`${server.url}/v1/health`);
      expect(health.status).toBe(503);
      expect(await health.json()).toMatchObject({ ok: false, redis: "unavailable" });
    } finally {
      await server.stop();
      api.cluster.disconnect();
    }
  });
});

describe("POST /v1/frequency", () => {
  // a send time two days back: within the policy's 7-day backfill, and A + 1 day is still not ahead of the clock
  const A = Math.floor(Date.now() / 1000) * 1000 - 2 * 24 * 3_600_000;
  const HOUR = 3_600_000;
  const DAY = 24 * HOUR;
  const check = async (body: object) => {
    const response = await post("/v1/frequency", body);
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };

  it("counts a check, reports every window, and says when a capped user may hear again", async () => {
    expect((await check({ userId: 1, channel: "push", at: A })).body).toEqual({
      allowed: true,
      decision: "allowed",
      segment: "new",
      windows: [{ channel: "push", window: "1d", max: 1, used: 1, remaining: 0, resetAt: A + DAY }],
    });
    const capped = { userId: 1, channel: "push", at: A + HOUR };
    expect((await check(capped)).body).toMatchObject({ allowed: false, decision: "capped", retryAfterMs: 23 * HOUR });
    // a peek changes nothing
    for (let i = 0; i < 2; i++) {
      expect((await check({ ...capped, consume: false, at: A + DAY })).body).toMatchObject({
        allowed: true,
        windows: [{ used: 0, remaining: 1, resetAt: A + DAY }],
      });
    }
  });

  it("treats a campaign ID as the send's identity, and counts every channel in '*' caps", async () => {
    const base = { userId: 50, at: A };
    expect((await check({ ...base, channel: "email", campaignId: "c1" })).body).toMatchObject({
      decision: "allowed",
      segment: "rest",
    });
    expect((await check({ ...base, channel: "email", campaignId: "c1" })).body).toMatchObject({
      allowed: true,
      decision: "duplicate",
    });
    expect((await check({ ...base, channel: "push", at: A + 1 })).body).toMatchObject({
      decision: "allowed",
      windows: [{ channel: "*", window: "7d", max: 2, used: 2, remaining: 0, resetAt: A + 7 * DAY }],
    });
    expect((await check({ ...base, channel: "email", at: A + 2 })).body).toMatchObject({
      decision: "capped",
      retryAfterMs: 7 * DAY - 2,
    });
  });

  it("refuses an unknown field, naming it, and still takes onStoreError", async () => {
    const typo = await check({ userId: 1, channel: "push", comsume: false });
    expect(typo.status).toBe(400);
    expect(typo.body.error).toMatchObject({ path: "comsume" });
    expect((await check({ userId: 2, channel: "push", at: A, onStoreError: "allow" })).status).toBe(200);
  });

  it("names the field of a bad request", async () => {
    for (const [body, path] of [
      [{ userId: -1, channel: "push" }, "userId"],
      [{ userId: 1, channel: "fax" }, "channel"],
      [{ userId: 1, channel: "push", campaignId: "" }, "campaignId"],
      [{ userId: 1, channel: "push", consume: "yes" }, "consume"],
      [{ userId: 1, channel: "push", at: 0 }, "at"],
    ] as const) {
      const { status, body: reply } = await check(body);
      expect(status).toBe(400);
      expect((reply.error as { path: string }).path).toBe(path);
    }
  });
});

describe("tollgate check", () => {
  it("exits 0 when allowed, 3 when denied, 1 on an error reply", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const limit = JSON.stringify({
        key: `cli-${Date.now()}`,
        algorithm: "fixed-window",
        max: 1,
        windowMs: 3_600_000,
      });
      expect(await runCli(["check", "--url", url, "/v1/limit", limit])).toBe(0);
      expect(JSON.parse(String(log.mock.calls.at(-1)?.[0]))).toMatchObject({ allowed: true, remaining: 0 });
      expect(await runCli(["check", "--url", url, "/v1/limit", limit])).toBe(3);
      expect(await runCli(["check", "--url", url, "/v1/limit", '{"key":"k"}'])).toBe(1);
      expect(await runCli(["check", "--url", url, "/v1/health"])).toBe(0);
      expect(await runCli(["check", "--url", url, "/v1/limit", "{ not json"])).toBe(1);
      expect(error.mock.calls.flat().join(" ")).toContain("json: not valid JSON");
    } finally {
      log.mockRestore();
      error.mockRestore();
    }
  });
});
