import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "sdk/test/**/*.test.ts"],
    reporters: ["default", "./test/summary-reporter.ts"],
    globalSetup: ["test/global-setup.ts"],
    // Failover and SCRIPT FLUSH tests change the shared cluster: files run one at a time.
    fileParallelism: false,
    // the handlers' structured logs and EMF metrics are asserted through behaviour, not read from stdout
    env: { POWERTOOLS_LOG_LEVEL: "SILENT", POWERTOOLS_METRICS_DISABLED: "true" },
    testTimeout: 60_000,
    hookTimeout: 90_000,
  },
});
