// Lambda entry of the check API (behind a Function URL): reads the environment once and wires the real clients.
import { wireCheckApi } from "./adapters/wiring.ts";

export const handler = wireCheckApi(process.env).handler;
