// The cache password rotation's four steps through its ports: a model of Secrets Manager's versions and
// stages, and the cache's credentials as the set of passwords it accepts. A client on either password always
// connects until the new one is current; a retried step does nothing twice; a failure midway leaves the old
// password current and accepted.
import { describe, expect, it } from "vitest";
import {
  type CacheCredentials,
  ROTATION_STEPS,
  type RotationStep,
  rotate,
} from "../../../functions/core/shared/credential-rotation.ts";
import { SecretsModel } from "../../support/secret-versions.ts";

const SECRET = "arn:aws:secretsmanager:eu-west-1:111122223333:secret:tollgate-redis";
/** The cache: the passwords it accepts now, and every change in order. */
class CacheModel implements CacheCredentials {
  accepted = new Set(["old-password"]);
  readonly log: string[] = [];
  failNext: "acceptBoth" | "acceptOnly" | "authenticate" | undefined;

  private fail(what: CacheModel["failNext"]) {
    if (this.failNext !== what) return;
    this.failNext = undefined;
    throw new Error(`${what} failed`);
  }
  async acceptBoth(current: string, pending: string) {
    this.fail("acceptBoth");
    this.accepted = new Set([current, pending]);
    this.log.push(`both ${current} ${pending}`);
  }
  async acceptOnly(password: string) {
    this.fail("acceptOnly");
    this.accepted = new Set([password]);
    this.log.push(`only ${password}`);
  }
  async authenticate(password: string) {
    this.fail("authenticate");
    if (!this.accepted.has(password)) throw new Error("WRONGPASS");
    this.log.push(`auth ${password}`);
  }
}

function rotation() {
  const secrets = new SecretsModel();
  const cache = new CacheModel();
  const step = (s: RotationStep, token = "v2") =>
    rotate({ secretId: SECRET, token, step: s }, { secrets, credentialsOf: () => cache });
  /** Whether a client that read the secret now (the current value) connects. */
  const clientConnects = () => cache.accepted.has(secrets.current() as string);
  return { secrets, cache, step, clientConnects };
}

describe("cache password rotation", () => {
  it("runs the four steps: both passwords accepted, tested, the new one current, then the old one dropped", async () => {
    const { secrets, cache, step, clientConnects } = rotation();
    secrets.startRotation("v2");
    for (const s of ROTATION_STEPS) {
      await step(s);
      // a client reading the secret at any point between the steps connects
      expect(clientConnects(), s).toBe(true);
    }
    expect(secrets.current()).toBe("new-password-1-0123456789");
    expect(secrets.stages.get("v1")).toEqual(["AWSPREVIOUS"]);
    expect(cache.accepted).toEqual(new Set(["new-password-1-0123456789"]));
    expect(cache.log).toEqual([
      "both old-password new-password-1-0123456789",
      "auth new-password-1-0123456789",
      "auth old-password",
      "only new-password-1-0123456789",
    ]);
  });

  it("keeps the old password accepted until the new one is current (the order of finishSecret)", async () => {
    const { secrets, cache, step } = rotation();
    secrets.startRotation("v2");
    for (const s of ["createSecret", "setSecret", "testSecret"] as const) await step(s);
    expect(cache.accepted.has("old-password")).toBe(true);
    cache.failNext = "acceptOnly";
    await expect(step("finishSecret")).rejects.toThrow(/acceptOnly failed/);
    // made current before the drop: clients reading the secret get the new password, the old one still works
    expect(secrets.current()).toBe("new-password-1-0123456789");
    expect(cache.accepted).toEqual(new Set(["old-password", "new-password-1-0123456789"]));
    // Secrets Manager retries finishSecret: the token is current now, and the drop is made
    await step("finishSecret");
    expect(cache.accepted).toEqual(new Set(["new-password-1-0123456789"]));
  });

  it("does nothing twice when a step is retried (createSecret makes one password, setSecret is the same change)", async () => {
    const { secrets, cache, step } = rotation();
    secrets.startRotation("v2");
    await step("createSecret");
    await step("createSecret");
    expect(secrets.generated).toBe(1);
    await step("setSecret");
    await step("setSecret");
    expect(cache.accepted).toEqual(new Set(["old-password", "new-password-1-0123456789"]));
  });

  it("leaves the old password current and accepted when testSecret fails midway, and finishes on the retry", async () => {
    const { secrets, cache, step, clientConnects } = rotation();
    secrets.startRotation("v2");
    await step("createSecret");
    await step("setSecret");
    cache.failNext = "authenticate";
    await expect(step("testSecret")).rejects.toThrow(/authenticate failed/);
    expect(secrets.current()).toBe("old-password");
    expect(clientConnects()).toBe(true);
    expect(cache.log.some((line) => line.startsWith("only"))).toBe(false);
    await step("testSecret");
    await step("finishSecret");
    expect(secrets.current()).toBe("new-password-1-0123456789");
    expect(cache.accepted).toEqual(new Set(["new-password-1-0123456789"]));
  });

  it("fails testSecret when the cache does not take the new password (setSecret failed silently), nothing current changes", async () => {
    const { secrets, cache, step } = rotation();
    secrets.startRotation("v2");
    await step("createSecret");
    cache.failNext = "acceptBoth";
    await expect(step("setSecret")).rejects.toThrow(/acceptBoth failed/);
    await expect(step("testSecret")).rejects.toThrow(/WRONGPASS/);
    expect(secrets.current()).toBe("old-password");
    expect(cache.accepted).toEqual(new Set(["old-password"]));
  });

  it("refuses a secret without rotation, a version it does not have and one not pending", async () => {
    const { secrets, step } = rotation();
    await expect(step("createSecret", "v9")).rejects.toThrow(/v9 is not a version/);
    secrets.stages.set("v3", ["AWSPREVIOUS"]);
    await expect(step("setSecret", "v3")).rejects.toThrow(/not pending rotation/);
    secrets.rotationEnabled = false;
    secrets.startRotation("v2");
    await expect(step("createSecret")).rejects.toThrow(/does not have rotation enabled/);
  });

  it("does nothing for a version already current, but finishSecret still drops the other password", async () => {
    const { secrets, cache, step } = rotation();
    cache.accepted = new Set(["old-password", "stale"]);
    for (const s of ["createSecret", "setSecret", "testSecret"] as const) await step(s, "v1");
    expect(cache.log).toEqual([]);
    await step("finishSecret", "v1");
    expect(cache.accepted).toEqual(new Set(["old-password"]));
    expect(secrets.current()).toBe("old-password");
  });
});
