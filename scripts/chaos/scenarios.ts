// The chaos grid: every nemesis × mode × transport it applies to, the short run's list (one constant), and
// the scenarios known to fail at this commit (marked in the grid, never hidden).
import { NEMESES, type Nemesis } from "./nemeses.ts";
import { MODES, type Mode, TRANSPORTS, type Transport } from "./scenario-types.ts";

export interface Scenario {
  /** `<nemesis>/<mode>/<transport>` (`two-tenants/...` for the tenant ones), what `--scenario` matches. */
  id: string;
  nemesis: Nemesis;
  mode: Mode;
  /** "mixed": each tenant has instances on both transports (the tenant scenarios). */
  transport: Transport | "mixed";
  /** Two tenants, A and B, with the same rule name and key, and a hostile instance of A (docs/chaos.md). */
  tenants?: boolean;
}

/** The nemeses the tenant scenarios run under (each tenant's instances on both transports). */
export const TENANT_NEMESES: readonly string[] = ["none", "kill-9-primary", "flushall-restored", "rule-revoked-for-a"];

export const SCENARIOS: readonly Scenario[] = [
  ...NEMESES.filter((nemesis) => !nemesis.tenantsOnly).flatMap((nemesis) =>
    MODES.flatMap((mode) =>
      (nemesis.transports ?? TRANSPORTS).map((transport) => ({
        id: `${nemesis.name}/${mode}/${transport}`,
        nemesis,
        mode,
        transport,
      })),
    ),
  ),
  ...NEMESES.filter((nemesis) => TENANT_NEMESES.includes(nemesis.name)).flatMap((nemesis) =>
    MODES.map((mode) => ({
      id: `two-tenants/${nemesis.name}/${mode}/mixed`,
      nemesis,
      mode,
      transport: "mixed" as const,
      tenants: true,
    })),
  ),
];

/**
 * The seeded short run in `npm test` (test/integration/chaos/quotas-short-run.test.ts): scenarios the product
 * holds today, each asserted to pass. Add a scenario here once the fault it names is fixed.
 */
export const SHORT_RUN: readonly string[] = [
  "kill-9-primary/strict/redis",
  "kill-9-primary/approximate/redis",
  "client-pause-3s/strict/http",
  "cluster-stopped-10s-loaded/strict/redis",
  "proxy-500/strict/http",
  "two-tenants/flushall-restored/strict/mixed",
];

/**
 * Scenarios that fail at this commit, with what failed in the grid run of seed 1 (the grid prints "FAIL
 * (known)"), the campaign pipeline's and the check API's (`pipeline/...`, `check-api/...`) included. Remove an entry once its fault is fixed; a listed scenario that passes prints as such.
 */
export const KNOWN_FAILING: Readonly<Record<string, string>> = {
  "none/strict/http": "utilisation 91 % (the sync route on a loaded host)",
  "none/approximate/http": "utilisation 91 %",
  "none-express/strict/redis": "utilisation 71 % (autocannon's per-second bursts meet the window's margin)",
  "none-express/strict/http": "utilisation 69 %",
  "none-express/approximate/redis": "utilisation 82 %",
  "none-express/approximate/http": "utilisation 82 %",
  "none-express-poisson/strict/redis": "utilisation 83 %",
  "none-express-poisson/strict/http": "utilisation 91 %",
  "none-express-poisson/approximate/redis": "utilisation 83 %",
  "none-express-poisson/approximate/http": "utilisation 92 %",
  "steady-97pct/strict/redis": "14 of 530 denied under the limit (the store's 10 ms stamp margin and buckets)",
  "steady-97pct/strict/http": "24 of 571 denied under the limit",
  "steady-97pct/approximate/redis": "34 of 589 denied under the limit (50 ms buckets and reservations)",
  "steady-97pct/approximate/http": "24 of 545 denied under the limit",
};

/** The scenarios whose id contains one of `filters` (all when none), in grid order. */
export function selectScenarios(filters: readonly string[]): Scenario[] {
  if (filters.length === 0) return [...SCENARIOS];
  const chosen = SCENARIOS.filter((s) => filters.some((f) => s.id === f || s.id.includes(f)));
  if (chosen.length === 0) throw new Error(`--scenario: no scenario matches ${filters.join(", ")}`);
  return chosen;
}
