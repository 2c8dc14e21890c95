// A real connection that proves a password: AUTH (with the user name, for an RBAC or ACL user) and PING on one
// node of the cluster, then closed. The rotation's testSecret runs it with both passwords.
import { Redis } from "ioredis";

export interface RedisAuthenticationOptions {
  node: { host: string; port: number };
  tls: boolean;
  timeoutMs?: number;
}

export function redisAuthenticator(options: RedisAuthenticationOptions) {
  return async (password: string, username?: string): Promise<void> => {
    const client = new Redis({
      ...options.node,
      ...(username ? { username } : {}),
      password,
      // ElastiCache with TLS: the certificate's hostname is the endpoint's (never disable the check)
      ...(options.tls ? { tls: { servername: options.node.host } } : {}),
      lazyConnect: true,
      connectTimeout: options.timeoutMs ?? 5_000,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    client.on("error", () => {});
    try {
      await client.connect();
      const reply = await client.ping();
      if (reply !== "PONG") throw new Error(`PING answered ${reply}`);
    } finally {
      client.disconnect();
    }
  };
}
