// `npm run console:screenshots`: the console over a local stack seeded with a sample (console-sample.ts),
// each page opened in Chromium as an operator would use it, and a screenshot of each written to
// docs/console/<page>.png. Starts and stops everything it needs (the cluster on REDIS_CLUSTER_BASE_PORT).
import { mkdirSync } from "node:fs";
import type { Page } from "playwright-core";
import { launchChromium } from "./console/chromium.ts";
import { consoleContext } from "./console/console-context.ts";
import { SAMPLE_QUOTA, seedConsoleSample } from "./console/console-sample.ts";
import { startConsoleServer } from "./console/console-server.ts";
import { CONSOLE_PAGES } from "./console/page-registry.ts";
import { isMain } from "./is-main.ts";
import { startLocalStack } from "./local-stack.ts";

const OUT = "docs/console";

/** What an operator does on a page before it is worth a picture. */
const ACTIONS: Record<string, (page: Page) => Promise<void>> = {
  policy: async (page) => {
    await page.getByRole("button", { name: `Edit ${SAMPLE_QUOTA.rule}` }).click();
    await page.getByLabel("lease ms").fill("1e2");
    await page.getByRole("button", { name: "Save rule" }).click();
    await page.locator("#error-leaseMs", { hasText: "expected a decimal integer" }).waitFor();
  },
  usage: async (page) => {
    await page.getByLabel("rule").selectOption(SAMPLE_QUOTA.rule);
    await page.getByLabel("key").fill(SAMPLE_QUOTA.key);
    await page.getByRole("button", { name: "Watch" }).click();
    await page.locator("[data-window]").first().waitFor();
  },
  reports: async (page) => {
    await page.getByRole("button", { name: "flash-sale" }).click();
    await page.getByRole("img", { name: "chart of flash-sale" }).waitFor();
  },
  why: async (page) => {
    await page.getByLabel("user").fill("0");
    await page.getByLabel("campaign").fill("flash-sale");
    await page.getByRole("button", { name: "Why?" }).click();
    await page.locator("[data-decision]").waitFor();
  },
  "what-if": async (page) => {
    await page.getByLabel("campaign").fill("summer-sale");
    await page.getByLabel("channel").fill("push");
    await page.getByLabel("users").fill("0-99");
    await page.getByRole("button", { name: "Predict" }).click();
    await page.locator('[data-eligible="new"]').waitFor();
  },
};

async function main(): Promise<void> {
  const stack = await startLocalStack({ poll: false, writeEndpoints: false, queuePrefix: "console-shots" });
  try {
    await seedConsoleSample(stack);
    const { endpoints } = stack;
    const server = await startConsoleServer(
      consoleContext({
        endpoint: endpoints.awsEndpoint,
        region: endpoints.region,
        bucket: endpoints.bucket,
        queueUrl: endpoints.deadLetterQueueUrl,
        to: endpoints.campaignQueueUrl,
        redis: endpoints.redis,
      }),
      CONSOLE_PAGES,
    );
    const browser = await launchChromium();
    try {
      const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
      mkdirSync(OUT, { recursive: true });
      for (const { id } of CONSOLE_PAGES) {
        await page.goto(`${server.url}#${id}`);
        await page.locator(`[data-page="${id}"][data-ready]`).waitFor();
        await ACTIONS[id]?.(page);
        await page.screenshot({ path: `${OUT}/${id}.png`, fullPage: true });
        console.log(`${OUT}/${id}.png`);
      }
    } finally {
      await browser.close();
      await server.stop();
    }
  } finally {
    await stack.stop();
  }
}

if (isMain(import.meta)) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
