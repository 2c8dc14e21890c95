// What the CLI's Redis commands share: --redis (nodes of the cluster; --local: the local stack's), --tls and
// --auth-secret-arn for ElastiCache (in-transit encryption and the AUTH token of the stack's output
// RedisAuthSecretArn, read from Secrets Manager: never a password on the command line), --namespace, and a
// cluster client that is closed when the command is done.
import { type Command, Option } from "commander";
import { createRedisCluster } from "../../functions/adapters/redis-cluster.ts";
import { withRedisSecret } from "../../functions/app/redis-secret.ts";
import { DEFAULT_NAMESPACE } from "../../sdk/src/protocol/index.ts";

export interface RedisNodeOptions {
  redis?: string[];
  tls?: boolean;
  authSecretArn?: string;
  region?: string;
}

export interface RedisOptions extends RedisNodeOptions {
  namespace: string;
}

/** --redis, --tls and --auth-secret-arn. */
export function withRedisNodes(command: Command): Command {
  return command
    .option("--redis <host:port...>", "Redis Cluster nodes (--local: the local stack's)")
    .option("--tls", "connect with TLS (ElastiCache in-transit encryption)")
    .addOption(
      new Option("--auth-secret-arn <arn>", "the secret holding the AUTH token (output RedisAuthSecretArn)").env(
        "REDIS_AUTH_SECRET_ARN",
      ),
    );
}

/** --redis, --tls, --auth-secret-arn and --namespace. */
export function withRedis(command: Command): Command {
  return withRedisNodes(command).option("--namespace <ns>", "key namespace (KEY_NAMESPACE)", DEFAULT_NAMESPACE);
}

/** Runs `run` on a cluster client of `nodes` (host:port), closed afterwards whatever `run` did. */
export async function withCluster<T>(
  nodes: string[],
  options: RedisNodeOptions,
  run: (cluster: ReturnType<typeof createRedisCluster>) => Promise<T>,
): Promise<T> {
  const { REDIS_PASSWORD: password } = await withRedisSecret({
    REDIS_AUTH_SECRET_ARN: options.authSecretArn,
    AWS_REGION: options.region ?? process.env.AWS_REGION,
  });
  const cluster = createRedisCluster({
    nodes: nodes.map((node) => {
      const [host, port] = node.split(":");
      return { host: host ?? "127.0.0.1", port: Number(port) };
    }),
    tls: options.tls,
    password,
  });
  try {
    return await run(cluster);
  } finally {
    await cluster.quit().catch(() => {});
  }
}
