// The Quotas SDK's own cost in the Quotas section: `check` on 10,000 resolved keys and on string keys, against
// a transport that grants everything (no Redis), and what 6M checks allocate.
import { createQuotas, type QuotaRule } from "../../sdk/src/index.ts";
import { youngBytesDuring } from "../../sdk/test/support/young-bytes.ts";
import { ruleOf, W } from "./quotas-run.ts";

/** check() overhead, p50 of 10,000-call batches, and what 6M checks allocate (bytes, GCs). */
export async function checkOverhead(): Promise<{ resolvedNs: number; stringNs: number; bytes: number; gcs: number }> {
  const rule: QuotaRule = { ...ruleOf("approximate"), limits: [{ windowMs: W, max: 1e12 }] };
  const quotas = createQuotas({
    rules: { api: rule },
    transport: {
      async sync(request, now) {
        return {
          status: "applied",
          serverTime: now,
          configVersion: "v1",
          instances: 1,
          entries: request.entries.map((e) => ({
            mode: "approximate" as const,
            key: e.key,
            allowance: 1e12,
            validUntil: now + 3_600_000,
            denyUntil: 0,
            resetAt: now + 1_000,
            used: [0],
          })),
        };
      },
    },
  });
  const keys = Array.from({ length: 10_000 }, (_, i) => `tenant-${i}`);
  const handles = keys.map((k) => quotas.resolve("api", k));
  while (
    quotas.engine.rule("api")!.groups.some((g) => g.handles.size > 0 && [...g.handles].some((h) => h.assignedAt < 0))
  ) {
    await quotas.sync();
  }
  // performance.now() and a preallocated array: the timing itself allocates little, but some (a boxed
  // number per performance.now() outside optimised code, the sort's copy): allocations are counted below
  const samples = new Float64Array(300);
  const batch = (fn: (i: number) => void) => {
    for (let round = 0; round < samples.length; round++) {
      const t0 = performance.now();
      for (let i = 0; i < 10_000; i++) fn(i);
      samples[round] = ((performance.now() - t0) * 1e6) / 10_000;
    }
    return samples.slice().sort()[samples.length >> 1] as number;
  };
  // warm the JIT, then measure
  batch((i) => quotas.checkHandle(handles[i]!));
  batch((i) => quotas.check("api", keys[i]!));
  const resolvedNs = batch((i) => quotas.checkHandle(handles[i]!));
  const stringNs = batch((i) => quotas.check("api", keys[i]!));
  // the same 6M checks untimed, their allocations counted in the young generation's bytes (as in
  // sdk/test/check-allocation.test.ts); a GC meanwhile would be one the checks caused. The loop runs once
  // before it is measured, as in the test: a new function's first run allocates V8's own feedback and
  // on-stack-replacement code once (up to a few hundred bytes), which is not the checks'
  const checks = () => {
    for (let round = 0; round < samples.length; round++) {
      for (let i = 0; i < 10_000; i++) {
        quotas.checkHandle(handles[i]!);
        quotas.check("api", keys[i]!);
      }
    }
  };
  checks();
  const { bytes, gcs } = youngBytesDuring(checks);
  return { resolvedNs, stringNs, bytes, gcs };
}
