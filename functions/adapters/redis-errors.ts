// Translates what ioredis rejects a command with into the core's two store faults, in one place: Redis
// did not answer (StoreUnavailableError) or Redis answered with an error (StoreReplyError).
import { ReplyError } from "ioredis";
import { hashSlotOf, provesNotRun, STORE_LOST_REPLY } from "../../sdk/src/protocol/index.ts";
import { StoreLostError, StoreReplyError, StoreUnavailableError } from "../core/shared/errors.ts";

/** ioredis re-exports redis-errors' ReplyError without typings: every error reply Redis sent is one. */
const RedisReplyError = ReplyError as abstract new (...args: never[]) => Error;

/**
 * What `error` (from a command sent to Redis about `what`) means for Tollgate:
 * - the reply of a script that found its slot's epoch key gone (STORE_LOST_REPLY): StoreLostError;
 * - an error reply that proves the command did not run: StoreUnavailableError, `mayHaveRun: false`;
 * - any other error reply (a script error, CROSSSLOT, WRONGTYPE, an out-of-range TTL, OOM): StoreReplyError;
 * - a fault of this process (TypeError and the like): unchanged, it is a bug here, not the store's;
 * - anything else ioredis rejects with (a timeout, a closed or refused connection, no reachable node):
 *   StoreUnavailableError, `mayHaveRun: true`, since the command may have reached Redis before the
 *   connection failed.
 * Errors already classified pass through.
 */
export function classifyRedisError(error: unknown, what: string): Error {
  if (error instanceof StoreUnavailableError || error instanceof StoreReplyError || error instanceof StoreLostError)
    return error;
  if (error instanceof RedisReplyError) {
    if (error.message.startsWith(STORE_LOST_REPLY)) {
      const epochKey = error.message.slice(STORE_LOST_REPLY.length + 1);
      return new StoreLostError(epochKey, hashSlotOf(epochKey), { cause: error });
    }
    if (provesNotRun(error.message)) {
      return new StoreUnavailableError(`${what}: not run: ${error.message}`, { cause: error, mayHaveRun: false });
    }
    return new StoreReplyError(what, error.message, { cause: error });
  }
  if (
    error instanceof TypeError ||
    error instanceof RangeError ||
    error instanceof ReferenceError ||
    error instanceof SyntaxError
  ) {
    return error;
  }
  const message = error instanceof Error ? error.message : String(error);
  return new StoreUnavailableError(`${what}: no answer: ${message}`, { cause: error, mayHaveRun: true });
}
