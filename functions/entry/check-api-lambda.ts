// Lambda entry of the check API (behind a Function URL): reads the environment (and the Redis secret) once,
// and opens the Redis connections during init, outside every request's budget.
import { withRedisSecret } from "../app/redis-secret.ts";
import { wireCheckApi } from "../app/wiring.ts";

const api = wireCheckApi(await withRedisSecret(process.env));
await api.warm();
export const { handler } = api;
