// AUTH rotation, client side, for the SDK's direct transport and the Tollgate service alike: what an auth
// failure looks like, and the password a client opens its next connections with, changed in place.
import type { Cluster, Redis, RedisOptions } from "ioredis";

/**
 * Whether an error reply is an auth failure: the connection's AUTH was refused (WRONGPASS) or never sent
 * (NOAUTH), so the command behind it did not run. During a rotation it means the password in use is no
 * longer accepted: read the secret again.
 */
export function isAuthFailure(replyMessage: string): boolean {
  const kind = replyMessage.split(" ", 1)[0];
  return kind === "WRONGPASS" || kind === "NOAUTH";
}

function isCluster(redis: Cluster | Redis): redis is Cluster {
  return (redis as { isCluster?: boolean }).isCluster === true;
}

/** The password `redis` opens its connections with. */
export function passwordOf(redis: Cluster | Redis): string | undefined {
  return isCluster(redis) ? redis.options.redisOptions?.password : redis.options.password;
}

/**
 * Makes `redis` open its next connections with `password`: each node's reconnection, and the nodes a new
 * slot map adds; connections already open stay as they are. ioredis reads the password when a connection
 * opens, from the node's own options, and copies a cluster's options into a connection pool for nodes it
 * adds later: all of them are set. The pool's copy is internal to ioredis (6.0.0, the version
 * package-lock.json pins); the rotation tests on the local cluster fail if it moves.
 */
export function setPassword(redis: Cluster | Redis, password: string): void {
  if (!isCluster(redis)) {
    redis.options.password = password;
    return;
  }
  redis.options.redisOptions = { ...redis.options.redisOptions, password };
  const pool = (redis as unknown as { connectionPool?: { redisOptions?: RedisOptions } }).connectionPool;
  if (pool?.redisOptions) pool.redisOptions.password = password;
  for (const node of redis.nodes("all")) node.options.password = password;
}
