// Three test tiers, all run by `npm test` (`npx vitest run --project unit` runs one):
// - unit: pure code and files on disk, the Quotas SDK's included; starts nothing;
// - integration: the real local Redis Cluster (started by test/global-setup.ts) and the S3/SQS emulator
//   (SDK tests that need them go in sdk/test/integration/);
// - compat: the previous releases' scripts (test/compat/<tag>/, listed in test/compat/manifest.json) beside the
//   current ones on the same cluster: what a rollout or a rollback runs on the same data;
// - infra: `cdk synth` and the template, and the bundles synth built invoked against the same cluster.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    reporters: ["default", "./test/summary-reporter.ts"],
    // Failover and SCRIPT FLUSH tests change the shared cluster: files run one at a time.
    fileParallelism: false,
    // the handlers' structured logs and EMF metrics are asserted through behaviour, not read from stdout
    env: { POWERTOOLS_LOG_LEVEL: "SILENT", POWERTOOLS_METRICS_DISABLED: "true" },
    testTimeout: 60_000,
    hookTimeout: 90_000,
    projects: [
      // tiers run one after another (groupOrder), so no two files ever share the cluster at once
      {
        extends: true,
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts", "sdk/test/**/*.test.ts"],
          exclude: ["sdk/test/integration/**"],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: "integration",
          include: ["test/integration/**/*.test.ts", "sdk/test/integration/**/*.test.ts"],
          globalSetup: ["test/global-setup.ts"],
          sequence: { groupOrder: 1 },
        },
      },
      {
        extends: true,
        test: {
          name: "compat",
          include: ["test/compat/**/*.test.ts"],
          globalSetup: ["test/global-setup.ts"],
          sequence: { groupOrder: 2 },
        },
      },
      {
        extends: true,
        test: {
          name: "infra",
          include: ["test/infra/**/*.test.ts"],
          globalSetup: ["test/global-setup.ts"],
          sequence: { groupOrder: 3 },
        },
      },
    ],
  },
});
