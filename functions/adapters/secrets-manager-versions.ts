// The rotation's secret versions (core/shared/credential-rotation.ts) in Secrets Manager: the stages of each
// version, a version's value, the pending version written, a new password, and AWSCURRENT moved.
import {
  DescribeSecretCommand,
  GetRandomPasswordCommand,
  GetSecretValueCommand,
  PutSecretValueCommand,
  ResourceNotFoundException,
  type SecretsManagerClient,
  UpdateSecretVersionStageCommand,
} from "@aws-sdk/client-secrets-manager";
import type { SecretVersions } from "../core/shared/credential-rotation.ts";

/** ElastiCache AUTH tokens and user passwords: 16-128 printable characters; no punctuation keeps them safe. */
const PASSWORD_LENGTH = 64;

export class SecretsManagerVersions implements SecretVersions {
  constructor(private readonly client: Pick<SecretsManagerClient, "send">) {}

  async describe(secretId: string) {
    const reply = await this.client.send(new DescribeSecretCommand({ SecretId: secretId }));
    return { rotationEnabled: reply.RotationEnabled === true, stages: reply.VersionIdsToStages ?? {} };
  }

  async value(secretId: string, stage: "AWSCURRENT" | "AWSPENDING", versionId?: string) {
    try {
      const reply = await this.client.send(
        new GetSecretValueCommand({
          SecretId: secretId,
          VersionStage: stage,
          ...(versionId ? { VersionId: versionId } : {}),
        }),
      );
      return reply.SecretString;
    } catch (error) {
      if (error instanceof ResourceNotFoundException) return undefined;
      throw error;
    }
  }

  async putPending(secretId: string, versionId: string, value: string) {
    await this.client.send(
      new PutSecretValueCommand({
        SecretId: secretId,
        ClientRequestToken: versionId,
        SecretString: value,
        VersionStages: ["AWSPENDING"],
      }),
    );
  }

  async newPassword() {
    const reply = await this.client.send(
      new GetRandomPasswordCommand({ PasswordLength: PASSWORD_LENGTH, ExcludePunctuation: true }),
    );
    if (!reply.RandomPassword) throw new Error("GetRandomPassword returned no password");
    return reply.RandomPassword;
  }

  async makeCurrent(secretId: string, versionId: string, fromVersionId: string) {
    await this.client.send(
      new UpdateSecretVersionStageCommand({
        SecretId: secretId,
        VersionStage: "AWSCURRENT",
        MoveToVersionId: versionId,
        RemoveFromVersionId: fromVersionId,
      }),
    );
  }
}
