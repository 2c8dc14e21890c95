// Lambda entry of the check API (behind a Function URL): reads the environment (and the Redis secret) once.
import { withRedisSecret } from "../app/redis-secret.ts";
import { wireCheckApi } from "../app/wiring.ts";

export const handler = wireCheckApi(await withRedisSecret(process.env)).handler;
