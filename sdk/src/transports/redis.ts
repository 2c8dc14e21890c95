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
  joinLua,
  NAME_PATTERN,
  provesNotRun,
  quotaLibraryOf,
  type RedisFunctionLibrary,
  type SyncReply,
  type SyncRequest,
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
  const { redis } = options;
  const quotaSync = quotaSyncLibrary();
  return {
    async sync(request: SyncRequest, now: number): Promise<SyncReply> {
      const { keys, args } = encodeSync(namespace, request, now);
      let raw: unknown;
      try {
        raw = await withTimeout(fcall(redis, quotaSync, "quotaSync", keys, args), timeoutMs);
      } catch (error) {
        throw classify(error, request);
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
