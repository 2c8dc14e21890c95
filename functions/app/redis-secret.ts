// The Redis AUTH token lives in Secrets Manager, never in the function's configuration: at cold start
// the entry reads it (REDIS_AUTH_SECRET_ARN) and hands it to the wiring in memory as REDIS_PASSWORD.
import { GetSecretValueCommand, SecretsManagerClient } from "@aws-sdk/client-secrets-manager";

export async function withRedisSecret(env: NodeJS.ProcessEnv): Promise<NodeJS.ProcessEnv> {
  const arn = env.REDIS_AUTH_SECRET_ARN;
  if (!arn) return env;
  const client = new SecretsManagerClient({
    region: env.AWS_REGION,
    requestHandler: { connectionTimeout: 2_000, requestTimeout: 5_000 },
  });
  const { SecretString } = await client.send(new GetSecretValueCommand({ SecretId: arn }));
  if (!SecretString) throw new Error(`REDIS_AUTH_SECRET_ARN: secret ${arn} has no string value`);
  // a generated secret is either the token itself or JSON with a "password" field
  const password = SecretString.startsWith("{")
    ? (JSON.parse(SecretString) as { password?: string }).password
    : SecretString;
  if (!password) throw new Error(`REDIS_AUTH_SECRET_ARN: secret ${arn} has no password`);
  return { ...env, REDIS_PASSWORD: password };
}
