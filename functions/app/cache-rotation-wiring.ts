// The cache rotation function from its environment: Secrets Manager's versions, ElastiCache for each secret's
// target (CACHE_ROTATION_TARGETS), and a real connection to the cache to test each password.

import { Logger } from "@aws-lambda-powertools/logger";
import { ElastiCacheClient } from "@aws-sdk/client-elasticache";
import { SecretsManagerClient } from "@aws-sdk/client-secrets-manager";
import { elastiCacheCredentials } from "../adapters/elasticache-credentials.ts";
import { redisAuthenticator } from "../adapters/redis-authentication.ts";
import { SecretsManagerVersions } from "../adapters/secrets-manager-versions.ts";
import { type RotationDeps, RotationError, rotate } from "../core/shared/credential-rotation.ts";
import { makeCacheRotationHandler } from "../handlers/cache-rotation-handler.ts";
import { parseRotationEnvironment } from "./environment.ts";

export function wireCacheRotation(env: NodeJS.ProcessEnv) {
  const config = parseRotationEnvironment(env);
  const logger = new Logger({ serviceName: "tollgate-cache-rotation" });
  const endpoint = config.AWS_ENDPOINT_URL ? { endpoint: config.AWS_ENDPOINT_URL } : {};
  const secrets = new SecretsManagerVersions(new SecretsManagerClient({ region: config.AWS_REGION, ...endpoint }));
  const elasticache = new ElastiCacheClient({ region: config.AWS_REGION, ...endpoint });
  const authenticate = redisAuthenticator({
    node: config.REDIS_NODES[0] as { host: string; port: number },
    tls: config.REDIS_TLS,
  });
  const deps: RotationDeps = {
    secrets,
    credentialsOf: (secretId) => {
      const target = config.CACHE_ROTATION_TARGETS[secretId];
      if (!target)
        throw new RotationError(`secret ${secretId} is not one this function rotates (CACHE_ROTATION_TARGETS)`);
      return elastiCacheCredentials(target, {
        client: elasticache,
        authenticate,
        waitMs: config.ROTATION_WAIT_SECONDS * 1000,
      });
    },
    onStep: (step, secretId, outcome) => logger.info("rotation step", { step, secretId, outcome }),
  };
  return makeCacheRotationHandler({ rotate: (request) => rotate(request, deps), logger });
}
