// A hostile instance of tenant A in the tenant scenarios: all through the run it names B's state every way a
// caller can spell it, on both transports, as A (its signature, its Redis user). Each attempt is counted as
// refused (403/400, NOPERM), accepted (it ran: within A's namespace, as the harness checks in Redis after)
// or unanswered (a fault). The checker (isolation.ts) judges the counts and what B's namespace holds.
import { Cluster } from "ioredis";
import { type QuotaTransport, StoreUnreachableError, SyncRejectedError } from "../../sdk/src/index.ts";
import { type SyncRequest, slotGroupKeys, tenantNamespace } from "../../sdk/src/protocol/index.ts";
import { httpTransport } from "../../sdk/src/transports/http.ts";
import { redisTransport } from "../../sdk/src/transports/redis.ts";
import { LOCAL_REGION } from "../local/local-principals.ts";
import { CHAOS_NAMESPACE, type ChaosTenant } from "./tenants.ts";

export interface HostileOutcome {
  attempt: string;
  /** A refusal is the only right answer (true), or the attempt may run inside A's namespace (false). */
  mustRefuse: boolean;
  refused: number;
  accepted: number;
  unanswered: number;
  /** The key text an accepted sync charged in A's namespace, when it names one. */
  key?: string;
  lastError?: string;
}

interface Attempt {
  name: string;
  mustRefuse: boolean;
  key?: string;
  run(): Promise<unknown>;
}

/** The spellings of B's state a request can carry, for rule `rule` and B's key `key`. */
export function hostileSpellings(rule: string, key: string, victim: ChaosTenant) {
  const victimPrefix = tenantNamespace(CHAOS_NAMESPACE, victim.namespace);
  return {
    /** B's key in full, as Redis stores it. */
    fullKey: `${victimPrefix}:q:{${rule}.0}:k:${key}`,
    /** A hash tag of B's rule inside the key text, closing the one the server opens first. */
    braces: `}:k:${key}{${rule}.0}`,
    /** The same, percent-encoded. */
    encoded: `%7D:k:${key}%7B${rule}.0%7D`,
    /** B's namespace as the rule's name, hash tag and all. */
    ruleWithTag: `${victimPrefix}:q:{${rule}.0}`,
    /** B's namespace before the rule's name (a name the policy never granted A). */
    rulePrefixed: `t:${victim.namespace}:${rule}`,
  };
}

export class Hostile {
  readonly outcomes: HostileOutcome[];
  private readonly attempts: Attempt[];
  private readonly redis: Cluster;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(options: {
    self: ChaosTenant;
    victim: ChaosTenant;
    rule: string;
    key: string;
    url: string;
    nodes: string[];
  }) {
    const { self, victim, rule, key } = options;
    this.redis = new Cluster(
      options.nodes.slice(0, 3).map((node) => {
        const [host, port] = node.split(":");
        return { host: host as string, port: Number(port) };
      }),
      { redisOptions: { maxRetriesPerRequest: 1, ...self.redis } },
    );
    this.redis.on("error", () => {});
    const http = httpTransport({ url: options.url, signing: { region: LOCAL_REGION, credentials: self.credential } });
    const own = redisTransport({ redis: this.redis, tenant: self.namespace });
    const intoVictim = redisTransport({ redis: this.redis, tenant: victim.namespace });
    const spelled = hostileSpellings(rule, key, victim);
    const victimConfig = slotGroupKeys(tenantNamespace(CHAOS_NAMESPACE, victim.namespace), rule, 0).config;
    const victimKey = spelled.fullKey;
    const syncer = (transport: QuotaTransport, id: string, syncRule: string, syncKey: string, extra = {}) => {
      let seq = 0;
      let configVersion = "";
      return async () => {
        seq++;
        const request: SyncRequest = {
          instanceId: `hostile-${id.replace(/[^A-Za-z0-9_.:-]+/g, "-")}`.slice(0, 64),
          rule: syncRule,
          group: 0,
          seq,
          configVersion,
          // as much demand as the whole limit, every time: were it counted in B's key, B would starve
          entries: [{ key: syncKey, usage: [[Date.now(), 20]], refunds: [], offered: 100, want: 100 }],
        };
        const reply = await transport.sync({ ...request, ...extra } as SyncRequest, Date.now());
        configVersion = reply.configVersion;
        return reply;
      };
    };
    const http403 = (name: string, syncRule: string) => ({
      name,
      mustRefuse: true,
      run: syncer(http, name, syncRule, key),
    });
    const inA = (name: string, transport: QuotaTransport, syncKey: string, extra = {}) => ({
      name,
      mustRefuse: false,
      key: syncKey,
      run: syncer(transport, name, rule, syncKey, extra),
    });
    const command = (name: string, ...args: string[]) => ({
      name,
      mustRefuse: true,
      run: () => this.redis.call(args[0] as string, ...args.slice(1)),
    });
    this.attempts = [
      inA("http: B's full key as the key", http, spelled.fullKey),
      inA("http: braces in the key", http, spelled.braces),
      inA("http: percent-encoded braces", http, spelled.encoded),
      inA("http: a tenant field in the body", http, key, { tenant: victim.name, namespace: victim.namespace }),
      http403("http: B's namespace and hash tag as the rule", spelled.ruleWithTag),
      http403("http: B's namespace before the rule", spelled.rulePrefixed),
      inA("redis: B's full key as the key", own, spelled.fullKey),
      inA("redis: braces in the key", own, spelled.braces),
      { name: "redis: sync in B's namespace", mustRefuse: true, run: syncer(intoVictim, "into-b", rule, key) },
      command("redis: HSET of B's rule configuration", "HSET", victimConfig, "r", "strict|1000|share|1|1000:1000000"),
      command("redis: HGETALL of B's key", "HGETALL", victimKey),
      command("redis: DEL of B's key", "DEL", victimKey),
      command("redis: FLUSHALL", "FLUSHALL"),
      command("redis: CONFIG SET", "CONFIG", "SET", "maxmemory", "1"),
      command("redis: KEYS", "KEYS", "*"),
    ];
    this.outcomes = this.attempts.map((a) => ({
      attempt: a.name,
      mustRefuse: a.mustRefuse,
      refused: 0,
      accepted: 0,
      unanswered: 0,
      ...(a.key === undefined ? {} : { key: a.key }),
    }));
  }

  /** Every attempt once per `everyMs` until stop(). */
  start(everyMs = 100): void {
    this.running = (async () => {
      while (!this.stopped) {
        await Promise.all(this.attempts.map((attempt, i) => this.tryOnce(attempt, this.outcomes[i] as HostileOutcome)));
        await new Promise((resolve) => setTimeout(resolve, everyMs));
      }
    })();
  }

  async stop(): Promise<HostileOutcome[]> {
    this.stopped = true;
    await this.running;
    this.redis.disconnect();
    return this.outcomes;
  }

  private async tryOnce(attempt: Attempt, outcome: HostileOutcome): Promise<void> {
    try {
      await attempt.run();
      outcome.accepted++;
    } catch (error) {
      const message = (error as Error).message ?? String(error);
      outcome.lastError = message.slice(0, 160);
      if (isRefusal(error)) outcome.refused++;
      else outcome.unanswered++;
    }
  }
}

/** A refusal the store or the route meant: 400/403 over HTTP, NOPERM from Redis (not a fault's error). */
export function isRefusal(error: unknown): boolean {
  if (error instanceof StoreUnreachableError) return false;
  const message = error instanceof Error ? error.message : String(error);
  if (/NOPERM/.test(message)) return true;
  return error instanceof SyncRejectedError && (error.status === 400 || error.status === 403);
}
