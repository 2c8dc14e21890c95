// AUTH rotation in the service: when Redis refuses the password a call went out with (WRONGPASS, NOAUTH),
// the AUTH secret is read again and a new value set on the cluster client for its next connections. The
// refused call did not run, so RedisCalls sends it again (redis-calls.ts).
import type { Cluster } from "ioredis";
import { isAuthFailure, passwordOf, setPassword } from "../../sdk/src/protocol/index.ts";

/** A value read within this long is used again instead of reading the secret once more. */
const REREAD_AFTER_MS = 1_000;

export class PasswordRenewal {
  private reading: Promise<string> | undefined;
  private last: { value: string; at: number } | undefined;

  constructor(
    private readonly cluster: Cluster,
    /** The password as it is now (the secret read again); a failure counts as "no other password". */
    private readonly readPassword: () => Promise<string>,
  ) {
    // When every connection was dropped (a failover, a node replaced) the client reconnects on its own, and
    // a refused AUTH then fails its slot map, not a command: no call ever sees the refusal. Renewed from
    // here, the client's next reconnect attempt opens with the new password. The read is the one calls
    // share (awaited by the next refused call); it settles by the Secrets Manager client's own timeouts.
    const onError = (error: unknown) => {
      const cause = (error as { lastNodeError?: unknown }).lastNodeError ?? error;
      if (cause instanceof Error && isAuthFailure(cause.message)) this.renewed(this.current).catch(() => {});
    };
    cluster.on("node error", onError);
    cluster.on("error", onError);
  }

  /** The password new connections use now. */
  get current(): string | undefined {
    return passwordOf(this.cluster);
  }

  /**
   * After Redis refused `used`: whether the client now has another password to send the call again with.
   * Every call refused by one rotation shares one read; a secret that still holds `used` (the password is
   * wrong, not rotated) is read at most once a second, so a misconfiguration does not flood Secrets Manager.
   */
  async renewed(used: string | undefined): Promise<boolean> {
    const last = this.last;
    const fresh = last !== undefined && performance.now() - last.at < REREAD_AFTER_MS;
    let password: string | undefined;
    if (fresh && last.value !== used) password = last.value;
    else if (fresh) return false;
    else {
      this.reading ??= this.readPassword().finally(() => {
        this.reading = undefined;
      });
      password = await this.reading.catch(() => undefined);
      if (password === undefined) return false;
      this.last = { value: password, at: performance.now() };
    }
    if (password === used) return false;
    if (password !== this.current) setPassword(this.cluster, password);
    return true;
  }
}
