// One SDK instance of a chaos run, a process of its own: `createQuotas` on the direct or the HTTP transport,
// open-loop load on one key, every decision sent to the harness with its time on the reference clock.
//
//   node --import tsx scripts/chaos/instance-main.ts '<InstanceConfig JSON>'   (forked by instances.ts)
import { Cluster } from "ioredis";
import { createQuotas, type Quotas, type QuotaTransport } from "../../sdk/src/index.ts";
import { httpTransport } from "../../sdk/src/transports/http.ts";
import { redisTransport } from "../../sdk/src/transports/redis.ts";
import { LOCAL_REGION, LOCAL_SIGNING, localTenant } from "../local/local-principals.ts";
import { expressFront } from "./express-front.ts";
import { type InstanceConfig, type InstanceMessage, referenceClock, type StartMessage } from "./messages.ts";
import { arrivals, seededRandom } from "./seeded.ts";

const config = JSON.parse(process.argv[2] ?? "{}") as InstanceConfig;
const now = referenceClock(BigInt(config.origin));
const send = (message: InstanceMessage) => process.send?.(message);

function transportOf(): { transport: QuotaTransport; close(): void } {
  const { tenant } = config;
  if (config.transport.kind === "http") {
    // signed as its tenant's principal: the QuotaSync function puts every key in that tenant's namespace
    const signing = tenant ? { region: LOCAL_REGION, credentials: tenant.credential } : LOCAL_SIGNING;
    return {
      transport: httpTransport({ url: config.transport.url, spendStamps: true, signing }),
      close: () => {},
    };
  }
  const redis = new Cluster(
    config.transport.nodes.map((node) => {
      const [host, port] = node.split(":");
      return { host: host as string, port: Number(port) };
    }),
    // no autopipelining (docs/quotas.md): the direct transport as a service would set it up
    // a tenant instance connects as its tenant's own Redis user, reaching only that tenant's keys
    { redisOptions: { maxRetriesPerRequest: 1, ...(tenant ? tenant.redis : {}) } },
  );
  redis.on("error", () => {});
  // under the namespace of the tenant the harness grants its rules to (scripts/chaos/stack.ts)
  const namespace = tenant?.namespace ?? localTenant([]).namespace;
  return { transport: redisTransport({ redis, tenant: namespace }), close: () => redis.disconnect() };
}

/**
 * `ready()` for the instance's rule, as docs/quotas.md shows it (a `ready()` naming no rule, in a process with
 * no key yet, has nothing to wait for); else the documented wait for a key's first allowance (checkFresh, cost 0).
 */
async function ready(quotas: Quotas): Promise<void> {
  const withReady = quotas as Quotas & { ready?: (options: { rules: string[] }) => Promise<unknown> };
  if (typeof withReady.ready === "function") await withReady.ready({ rules: [config.rule] });
  else await quotas.checkFresh(config.rule, config.key, 0);
}

async function run(start: StartMessage, quotas: Quotas): Promise<void> {
  if (config.front === "express") {
    let at: number[] = [];
    let allowed: number[] = [];
    const flusher = setInterval(() => {
      if (at.length === 0) return;
      send({ type: "decisions", at, allowed });
      at = [];
      allowed = [];
    }, 100);
    const record = (isAllowed: boolean) => {
      at.push(now());
      allowed.push(isAllowed ? 1 : 0);
    };
    await expressFront(quotas, {
      rule: config.rule,
      key: config.key,
      ...start,
      pacing: config.pacing ?? "autocannon",
      origin: config.origin,
      now,
      record,
    });
    clearInterval(flusher);
    if (at.length > 0) send({ type: "decisions", at, allowed });
    return;
  }
  const schedule = arrivals(seededRandom(start.seed), start.perSecond, start.from, start.to, start.gaps);
  let at: number[] = [];
  let allowed: number[] = [];
  let askedAt: number[] = [];
  const flush = () => {
    if (at.length === 0) return;
    send({ type: "decisions", at, allowed, askedAt });
    at = [];
    allowed = [];
    askedAt = [];
  };
  const flusher = setInterval(flush, 100);
  let next = 0;
  const waiting = new Set<Promise<void>>();
  const record = (isAllowed: boolean, asked: number) => {
    at.push(now());
    allowed.push(isAllowed ? 1 : 0);
    askedAt.push(asked);
  };
  await new Promise<void>((done) => {
    const tick = () => {
      const t = now();
      // every arrival due is decided now, however late the timer: the schedule never waits for answers. It is
      // decided as the middleware decides (`decide`: a key with no allowance here waits for one sync of its
      // group), and recorded when decided
      while (next < schedule.length && (schedule[next] as number) <= t) {
        const asked = now();
        const decision = quotas.decide(config.rule, config.key, 1);
        if (decision instanceof Promise) {
          const settled: Promise<void> = decision.then((d) => {
            record(d.allowed, asked);
            waiting.delete(settled);
          });
          waiting.add(settled);
        } else record(decision.allowed, asked);
        next++;
      }
      if (t >= start.to) done();
      else setTimeout(tick, 1);
    };
    tick();
  });
  await Promise.all(waiting);
  clearInterval(flusher);
  flush();
}

async function main(): Promise<void> {
  const { transport, close } = transportOf();
  let latencyMs: number[] = [];
  let errors = 0;
  let lastError: string | undefined;
  const quotas = createQuotas({
    transport,
    syncIntervalMs: config.syncIntervalMs,
    onMetrics: (metrics) => latencyMs.push(...metrics.syncLatencyMs),
    onError: (error) => {
      errors++;
      lastError = error.message.slice(0, 200);
    },
  }).start();
  const reporter = setInterval(() => {
    send({ type: "syncs", at: now(), latencyMs, errors, ...(lastError ? { lastError } : {}) });
    latencyMs = [];
    errors = 0;
  }, 500);
  const start = new Promise<StartMessage>((resolve) =>
    process.on("message", (message: StartMessage) => {
      if (message.type === "start") resolve(message);
    }),
  );
  // the load starts when the harness says, ready or not: decisions before ready() are recorded, not judged.
  // A process joining a run is sent its load once it runs (a balancer sends requests to a process once it
  // listens): the harness waits for this message
  send({ type: "up", at: now() });
  ready(quotas).then(
    () => send({ type: "ready", at: now() }),
    () => {},
  );
  await run(await start, quotas);
  await quotas.stop();
  clearInterval(reporter);
  send({ type: "syncs", at: now(), latencyMs, errors, ...(lastError ? { lastError } : {}) });
  close();
  send({ type: "done" });
  process.disconnect?.();
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
