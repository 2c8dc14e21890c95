// Lambda entry of the campaign consumer: reads the environment (and the Redis secret) once, at cold start.
import { withRedisSecret } from "../app/redis-secret.ts";
import { wireCampaignConsumer } from "../app/wiring.ts";

export const handler = wireCampaignConsumer(await withRedisSecret(process.env)).handler;
