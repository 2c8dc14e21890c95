// Lambda entry of the check API (behind a Function URL): reads the environment (and the Redis secret) once.
import { withRedisSecret } from "./adapters/redis-secret.ts";
import { wireCheckApi } from "./adapters/wiring.ts";

export const handler = wireCheckApi(await withRedisSecret(process.env)).handler;
