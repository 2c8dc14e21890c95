// Direct transport, for services inside the VPC: the quota-sync chunk on the Tollgate Redis Cluster as a
// Redis Function (FCALL; the library is loaded on every primary where a call finds it missing: a new
// cluster, a node added empty, FUNCTION FLUSH). The Tollgate service loads the same library, so both share
// it. One call per slot group: every key of a call shares one hash tag.
import type { Cluster, Redis } from "ioredis";
import { QuotasConfigError, StoreUnreachableError, SyncRejectedError } from "../errors.ts";
import {
  DEFAULT_NAMESPACE,
  decodeSync,
  encodeSync,
  fcall,
  findLuaEntry,
  isAuthFailure,
  joinLua,
  NAME_PATTERN,
  passwordOf,
  provesNotRun,
  quotaLibraryOf,
  type RedisFunctionLibrary,
  type SyncReply,
  type SyncRequest,
  setPassword,
  tenantNamespace,
} from "../protocol/index.ts";
import type { QuotaTransport } from "../quotas.ts";

export interface RedisTransportOptions {
  /** The caller's ioredis Cluster (or a single Redis for tests); the SDK never closes it. */
  redis: Cluster | Redis;
  /** Key namespace, as the Tollgate deployment's (default "tg"). */
  namespace?: string;
  /**
   * The tenant whose keys this service syncs (its `namespace` in the policy's tenants): the keys go under
   * `<namespace>:t:<tenant>`, the pattern the tenant's Redis user may reach (docs/tenants.md).
   */
  tenant?: string;
  /** A call without a reply after this long counts as unreachable (default 500 ms). */
  timeoutMs?: number;
  /**
   * The password as it is now, read again from where it lives (the AUTH secret in Secrets Manager):
   * called when Redis refuses the client's password (WRONGPASS, NOAUTH: the call did not run), as after
   * an AUTH token rotation. A new password is set on the client for its next connections and the call is
   * sent once more; the same one leaves the refusal as it is. Without it, an auth failure is a refused sync.
   */
  reauthenticate?: () => Promise<string>;
  /**
   * The quota-sync library to call (default: the one beside the package, the service's own). The repository's
   * tests pass a build whose store clock they set (its time is the store's, within a bound: docs/quotas.md);
   * a service has no reason to.
   */
  library?: RedisFunctionLibrary<"quotaSync" | "quotaRead">;
}

/**
 * The published package carries the joined chunk in its lua/ (prepack); in the repository the script is the
 * entry and parts in lua/quota-sync/ at the root, joined here as the service joins it (protocol/lua-chunks.ts).
 */
const LUA_DIRS = [new URL("../../lua/", import.meta.url), new URL("../../../lua/", import.meta.url)];

let library: RedisFunctionLibrary<"quotaSync" | "quotaRead"> | undefined;
/** The library of the quota-sync.lua beside the package: the service's `quotaLibrary`. */
function quotaSyncLibrary(): RedisFunctionLibrary<"quotaSync" | "quotaRead"> {
  if (library !== undefined) return library;
  const entry = findLuaEntry(LUA_DIRS, "quota-sync");
  if (!entry) throw new QuotasConfigError("redis", `quota-sync.lua not found (in ${LUA_DIRS.map(String).join(", ")})`);
  library = quotaLibraryOf(joinLua(entry).text);
  return library;
}

export function redisTransport(options: RedisTransportOptions): QuotaTransport {
  const base = options.namespace ?? DEFAULT_NAMESPACE;
  if (!NAME_PATTERN.test(base)) throw new QuotasConfigError("namespace", `expected ${NAME_PATTERN}`);
  let namespace = base;
  if (options.tenant !== undefined) {
    try {
      namespace = tenantNamespace(base, options.tenant);
    } catch (error) {
      throw new QuotasConfigError("tenant", (error as Error).message);
    }
  }
  const timeoutMs = options.timeoutMs ?? 500;
  const { redis, reauthenticate } = options;
  const quotaSync = options.library ?? quotaSyncLibrary();
  // one read of the secret for every sync the same rotation refused at once (one per slot group)
  let reading: Promise<string> | undefined;
  /** Whether the password as it is now differs from `used`; a new one is set on the client. */
  async function renewed(renew: () => Promise<string>, used: string | undefined): Promise<boolean> {
    reading ??= renew().finally(() => {
      reading = undefined;
    });
    const password = await reading;
    if (password === used) return false;
    if (password !== passwordOf(redis)) setPassword(redis, password);
    return true;
  }
  /** Whether `error` was an auth failure and the password changed since `used`: then the call goes again. */
  async function reauthenticated(error: unknown, used: string | undefined): Promise<boolean> {
    if (!reauthenticate || !(error instanceof Error) || error.name !== "ReplyError" || !isAuthFailure(error.message))
      return false;
    return renewed(reauthenticate, used);
  }
  if (reauthenticate) {
    // A client whose connections all dropped reconnects by itself, and a refused AUTH then fails its slot
    // map, not a sync, which waits out its timeout: renewed from the client's error events, its next
    // reconnect attempt opens with the new password.
    const onError = (error: unknown) => {
      const cause = (error as { lastNodeError?: unknown }).lastNodeError ?? error;
      if (cause instanceof Error && isAuthFailure(cause.message))
        renewed(reauthenticate, passwordOf(redis)).catch(() => {});
    };
    redis.on("node error", onError);
    redis.on("error", onError);
  }
  return {
    async sync(request: SyncRequest, now: number): Promise<SyncReply> {
      const { keys, args } = encodeSync(namespace, request, now);
      const send = () => withTimeout(fcall(redis, quotaSync, "quotaSync", keys, args), timeoutMs);
      const used = passwordOf(redis);
      let raw: unknown;
      try {
        raw = await send();
      } catch (error) {
        if (!(await reauthenticated(error, used).catch(() => false))) throw classify(error, request);
        try {
          raw = await send();
        } catch (again) {
          throw classify(again, request);
        }
      }
      return decodeSync(raw, request);
    },
  };
}

/**
 * "Redis did not answer" is not "Redis answered with an error": an error reply is a refused call (a bug,
 * a script error, OOM, an ACL without the right) unless it proves the command did not run (MOVED, ASK,
 * TRYAGAIN, ...: redis-replies.ts); everything else (no
 * connection, a timeout) is the store being unreachable for now, and the same request is sent again.
 */
function classify(error: unknown, request: SyncRequest): Error {
  const what = `quota sync of ${request.rule}.${request.group}`;
  if (error instanceof Error && error.name === "ReplyError" && !provesNotRun(error.message)) {
    return new SyncRejectedError(`${what}: ${error.message}`, { cause: error });
  }
  return new StoreUnreachableError(`${what}: ${(error as Error).message}`, { cause: error });
}

/**
 * On a busy event loop the timer can fire before a reply that has already arrived is read: one
 * setImmediate lets pending replies settle first, so a call that ran is not reported as unanswered.
 */
function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => setImmediate(() => reject(new Error(`no reply within ${ms} ms`))), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
