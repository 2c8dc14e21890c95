// The rotation's cache side (core/shared/credential-rotation.ts) on ElastiCache: the replication group's AUTH
// token with ModifyReplicationGroup (`AuthTokenUpdateStrategy` ROTATE: both accepted, then SET: only the new
// one), or an RBAC user's passwords with ModifyUser (up to two at once). ElastiCache applies a change in the
// background: each waits until the group or the user is available again, so the next step starts on it.
import {
  DescribeReplicationGroupsCommand,
  DescribeUsersCommand,
  type ElastiCacheClient,
  ModifyReplicationGroupCommand,
  ModifyUserCommand,
} from "@aws-sdk/client-elasticache";
import type { CacheCredentials, RotationTarget } from "../core/shared/credential-rotation.ts";

export interface ElastiCacheCredentialsOptions {
  client: Pick<ElastiCacheClient, "send">;
  /** A real connection with `password` (and the target's user name), answered or rejected. */
  authenticate: (password: string, userName?: string) => Promise<void>;
  /** Give up waiting for the group or the user after this long (the step is retried). */
  waitMs: number;
  /** Between two looks at the status. */
  pollMs?: number;
  sleep?: (ms: number) => Promise<void>;
}

export function elastiCacheCredentials(
  target: RotationTarget,
  options: ElastiCacheCredentialsOptions,
): CacheCredentials {
  const { client } = options;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const waitUntil = async (what: string, ready: () => Promise<boolean>) => {
    const deadline = Date.now() + options.waitMs;
    while (!(await ready())) {
      if (Date.now() >= deadline) throw new Error(`${what} is not available after ${options.waitMs} ms`);
      await sleep(options.pollMs ?? 5_000);
    }
  };
  if (target.kind === "auth-token") {
    const id = target.replicationGroupId;
    const available = () =>
      waitUntil(`replication group ${id}`, async () => {
        const reply = await client.send(new DescribeReplicationGroupsCommand({ ReplicationGroupId: id }));
        return reply.ReplicationGroups?.[0]?.Status === "available";
      });
    const modify = async (token: string, strategy: "ROTATE" | "SET") => {
      // one modification at a time: a group still modifying refuses another
      await available();
      await client.send(
        new ModifyReplicationGroupCommand({
          ReplicationGroupId: id,
          AuthToken: token,
          AuthTokenUpdateStrategy: strategy,
          ApplyImmediately: true,
        }),
      );
      await available();
    };
    return {
      acceptBoth: (_current, pending) => modify(pending, "ROTATE"),
      acceptOnly: (password) => modify(password, "SET"),
      authenticate: (password) => options.authenticate(password),
    };
  }
  const { userId, userName } = target;
  const active = () =>
    waitUntil(`user ${userId}`, async () => {
      const reply = await client.send(new DescribeUsersCommand({ UserId: userId }));
      return reply.Users?.[0]?.Status === "active";
    });
  const passwords = async (list: string[]) => {
    await active();
    await client.send(
      new ModifyUserCommand({ UserId: userId, AuthenticationMode: { Type: "password", Passwords: list } }),
    );
    await active();
  };
  return {
    acceptBoth: (current, pending) => passwords([current, pending]),
    acceptOnly: (password) => passwords([password]),
    authenticate: (password) => options.authenticate(password, userName),
  };
}
