// A cache password rotated without downtime, one Secrets Manager rotation step at a time (docs/deploy.md,
// "Rotating the Redis passwords"). The new password is accepted beside the current one before any client can
// read it, tested with a real connection, made current, and only then is the old one dropped: a client on
// either password always connects, and one refused after the drop reads the secret again (WRONGPASS/NOAUTH).
// Every step may run again (Secrets Manager retries a failed step): each is idempotent.

export const ROTATION_STEPS = ["createSecret", "setSecret", "testSecret", "finishSecret"] as const;
export type RotationStep = (typeof ROTATION_STEPS)[number];

export interface RotationRequest {
  secretId: string;
  /** The version being rotated in (Secrets Manager's ClientRequestToken). */
  token: string;
  step: RotationStep;
}

/** The secret's versions in Secrets Manager: what the rotation reads and moves. */
export interface SecretVersions {
  /** Whether rotation is on, and each version's stages. */
  describe(secretId: string): Promise<{ rotationEnabled: boolean; stages: Record<string, readonly string[]> }>;
  /** The value of the version with `stage` (and `versionId`, when given); undefined when there is none. */
  value(secretId: string, stage: "AWSCURRENT" | "AWSPENDING", versionId?: string): Promise<string | undefined>;
  /** Stores `value` as version `versionId`, staged AWSPENDING. */
  putPending(secretId: string, versionId: string, value: string): Promise<void>;
  /** A new password the cache accepts (ElastiCache: 16-128 printable characters, here no punctuation). */
  newPassword(): Promise<string>;
  /** Moves AWSCURRENT to `versionId` from `fromVersionId` (which becomes AWSPREVIOUS). */
  makeCurrent(secretId: string, versionId: string, fromVersionId: string): Promise<void>;
}

/** What one rotated secret is on the cache: the replication group's AUTH token, or an RBAC user's password. */
export type RotationTarget =
  | { kind: "auth-token"; replicationGroupId: string }
  | { kind: "user"; userId: string; userName: string };

/** The cache's side of one secret: the AUTH token of the replication group, or an RBAC user's password. */
export interface CacheCredentials {
  /** Both passwords accepted (ElastiCache: `AuthTokenUpdateStrategy: ROTATE`, or a user with two passwords). */
  acceptBoth(current: string, pending: string): Promise<void>;
  /** Only `password` accepted (`SET`, or the user's one password). */
  acceptOnly(password: string): Promise<void>;
  /** A client authenticates with `password` and is answered (rejects otherwise). */
  authenticate(password: string): Promise<void>;
}

export class RotationError extends Error {
  override readonly name = "RotationError";
}

export interface RotationDeps {
  secrets: SecretVersions;
  /** The cache credentials a secret stands for; throws for a secret this rotation does not serve. */
  credentialsOf(secretId: string): CacheCredentials;
  /** Told what each step did (a log line). */
  onStep?: (step: RotationStep, secretId: string, outcome: string) => void;
}

/** Runs one rotation step. Resolves when the step is done (or was done already); rejects to have it retried. */
export async function rotate(request: RotationRequest, deps: RotationDeps): Promise<void> {
  const { secretId, token, step } = request;
  const { secrets } = deps;
  const credentials = deps.credentialsOf(secretId);
  const told = (outcome: string) => deps.onStep?.(step, secretId, outcome);
  const { rotationEnabled, stages } = await secrets.describe(secretId);
  if (!rotationEnabled) throw new RotationError(`secret ${secretId} does not have rotation enabled`);
  const ofToken = stages[token];
  if (!ofToken) throw new RotationError(`version ${token} is not a version of secret ${secretId}`);
  const isCurrent = ofToken.includes("AWSCURRENT");
  // a finished rotation asked again: the old password may still be accepted if the drop failed last time
  if (isCurrent && step !== "finishSecret") return told("already current");
  if (!isCurrent && !ofToken.includes("AWSPENDING"))
    throw new RotationError(`version ${token} of secret ${secretId} is not pending rotation`);

  const current = await required(secrets.value(secretId, "AWSCURRENT"), secretId, "AWSCURRENT");
  switch (step) {
    case "createSecret": {
      if ((await secrets.value(secretId, "AWSPENDING", token)) !== undefined) return told("pending exists");
      await secrets.putPending(secretId, token, await secrets.newPassword());
      return told("pending created");
    }
    case "setSecret": {
      const pending = await required(secrets.value(secretId, "AWSPENDING", token), secretId, "AWSPENDING");
      await credentials.acceptBoth(current, pending);
      return told("both passwords accepted");
    }
    case "testSecret": {
      const pending = await required(secrets.value(secretId, "AWSPENDING", token), secretId, "AWSPENDING");
      // the clients that have not read the new one yet keep connecting with the current one
      await credentials.authenticate(pending);
      await credentials.authenticate(current);
      return told("both passwords authenticate");
    }
    case "finishSecret": {
      // asked again after the drop failed: the token is current already, and its value is the new password
      const next = isCurrent
        ? current
        : await required(secrets.value(secretId, "AWSPENDING", token), secretId, "AWSPENDING");
      if (!isCurrent) {
        const from = Object.entries(stages).find(([, s]) => s.includes("AWSCURRENT"))?.[0];
        if (!from) throw new RotationError(`secret ${secretId} has no AWSCURRENT version`);
        // current first: a client refused once the old password is dropped reads the new one
        await secrets.makeCurrent(secretId, token, from);
      }
      await credentials.acceptOnly(next);
      return told("new password current, old one dropped");
    }
  }
}

async function required(value: Promise<string | undefined>, secretId: string, stage: string): Promise<string> {
  const found = await value;
  if (found === undefined) throw new RotationError(`secret ${secretId} has no ${stage} value`);
  return found;
}
