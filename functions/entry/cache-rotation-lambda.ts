// Lambda entry of the cache passwords' rotation (Secrets Manager invokes it for each step): the environment
// read once at init.
import { wireCacheRotation } from "../app/cache-rotation-wiring.ts";

export const handler = wireCacheRotation(process.env);
