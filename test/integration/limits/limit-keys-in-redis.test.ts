// Limit keys in Redis: key text cannot collide with another key (lone surrogates included).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisLimitStore, type TollgateCluster } from "../../../functions/adapters/redis-cluster.ts";
import { Limiter } from "../../../functions/core/limits/limiter.ts";
import { connectCluster, uniqueNamespace } from "../../support/cluster.ts";

let cluster: TollgateCluster;
beforeAll(() => {
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
});

describe("review4: limit keys in Redis (DESIGN.md: key text cannot collide with another key)", () => {
  it("POST /v1/limit: keys that differ only in lone surrogates (valid JSON escapes, e.g. \\ud800 and \\udc00) are separate counters (review4 defect, fixed)", async () => {
    const limiter = new Limiter({
      store: new RedisLimitStore(cluster, { deadlineMs: 2_000 }),
      namespace: uniqueNamespace(),
    });
    const spec = { algorithm: "fixed-window", max: 1, windowMs: 60_000 };
    // what the JSON escapes "\\ud800", "\\udc00", "\\udbff" and "\\ufffd" parse to: four different valid keys
    const keys = [0xd800, 0xdc00, 0xdbff, 0xfffd].map((unit) => String.fromCharCode(unit));
    expect(new Set(keys).size).toBe(4);
    const allowed = [];
    for (const key of keys) allowed.push((await limiter.check({ key, ...spec })).allowed);
    expect(allowed).toEqual([true, true, true, true]);
    // and /v1/limits scopes likewise: one scope's limit spent, the other's untouched
    const scoped = (scope: string) =>
      limiter.checkAll({ scope, limits: [{ key: "k", algorithm: "fixed-window", max: 1, windowMs: 60_000 }] });
    expect((await scoped("\ud800")).allowed).toBe(true);
    expect((await scoped("\udc00")).allowed).toBe(true);
    expect((await scoped("\ud800")).allowed).toBe(false);
  });
});
