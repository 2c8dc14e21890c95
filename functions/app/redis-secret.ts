// The Redis AUTH token lives in Secrets Manager, never in the function's configuration: at cold start
// the entry reads it (REDIS_AUTH_SECRET_ARN) and hands it to the wiring in memory as REDIS_PASSWORD; the
// wiring reads it again when Redis refuses the one in use (an AUTH rotation: redisSecretReader).
import { GetSecretValueCommand, SecretsManagerClient } from "@aws-sdk/client-secrets-manager";

export async function withRedisSecret(env: NodeJS.ProcessEnv): Promise<NodeJS.ProcessEnv> {
  const read = redisSecretReader(env);
  return read ? { ...env, REDIS_PASSWORD: await read() } : env;
}

/** Reads the AUTH token's current value each time it is called; undefined without REDIS_AUTH_SECRET_ARN. */
export function redisSecretReader(env: {
  REDIS_AUTH_SECRET_ARN?: string | undefined;
  AWS_REGION?: string | undefined;
}): (() => Promise<string>) | undefined {
  const arn = env.REDIS_AUTH_SECRET_ARN;
  if (!arn) return undefined;
  const client = new SecretsManagerClient({
    region: env.AWS_REGION,
    requestHandler: { connectionTimeout: 2_000, requestTimeout: 5_000 },
  });
  return async () => {
    const { SecretString } = await client.send(new GetSecretValueCommand({ SecretId: arn }));
    if (!SecretString) throw new Error(`REDIS_AUTH_SECRET_ARN: secret ${arn} has no string value`);
    // a generated secret is either the token itself or JSON with a "password" field
    const password = SecretString.startsWith("{")
      ? (JSON.parse(SecretString) as { password?: string }).password
      : SecretString;
    if (!password) throw new Error(`REDIS_AUTH_SECRET_ARN: secret ${arn} has no password`);
    return password;
  };
}
