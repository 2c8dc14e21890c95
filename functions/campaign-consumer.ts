// Lambda entry of the campaign consumer: reads the environment once and wires the real clients.
import { wireCampaignConsumer } from "./adapters/wiring.ts";

export const handler = wireCampaignConsumer(process.env).handler;
