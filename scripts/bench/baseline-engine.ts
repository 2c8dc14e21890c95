// The engine as it was at an earlier commit, for a section to run beside today's in the same process and on
// the same cluster: the commit's tree is written to a temporary directory outside the repository (git
// archive, so the repository gains no worktree), its node_modules linked to today's (the commits between
// changed no dependency the engine loads), and its Capper imported from there. Its Redis Function library is
// named by its code's hash, so it loads beside today's and neither replaces the other.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { TollgateCluster } from "../../functions/adapters/redis-cluster.ts";
import type { Clock } from "../../functions/core/shared/clock.ts";

/**
 * The last commit before the quiet hours issue's first change (1c0a7be, "Quiet hours in the user's zone"):
 * no zones, quiet hours, calendar caps, deferral or priority in the engine.
 */
export const BEFORE_QUIET_HOURS = "2134ee5";

/** What a section needs of the earlier engine: a capper over its policy parser and segment index. */
export interface BaselineEngine {
  commit: string;
  /** A capper of the earlier build over `cluster`, for the policy document and segment bitmaps given. */
  capper(options: {
    cluster: TollgateCluster;
    document: unknown;
    bitmaps: readonly unknown[];
    clock: Clock;
    namespace: string;
  }): { capBatch(batch: { campaignId: string; channel: string; userIds: number[] }): Promise<unknown> };
  /** Deletes the temporary tree. */
  close(): void;
}

/** The earlier engine, or why it cannot be had (a shallow clone without the commit, no git). */
export async function baselineEngine(commit = BEFORE_QUIET_HOURS): Promise<BaselineEngine | { missing: string }> {
  const root = new URL("../../", import.meta.url);
  const git = (...args: string[]) =>
    execFileSync("git", args, { cwd: root, stdio: ["ignore", "pipe", "pipe"], maxBuffer: 1 << 30 });
  let full: string;
  try {
    full = git("rev-parse", "--verify", "--quiet", `${commit}^{commit}`).toString().trim();
  } catch {
    const shallow = (() => {
      try {
        return git("rev-parse", "--is-shallow-repository").toString().trim() === "true";
      } catch {
        return false;
      }
    })();
    return {
      missing: `commit ${commit} is not in this clone${shallow ? " (a shallow clone)" : " (or git is missing)"}`,
    };
  }
  const dir = mkdtempSync(join(tmpdir(), `tollgate-${commit}-`));
  try {
    execFileSync("tar", ["-x", "-C", dir], { input: git("archive", full, "functions", "sdk", "lua", "package.json") });
    symlinkSync(fileURLToPath(new URL("node_modules", root)), join(dir, "node_modules"));
    const from = (path: string) => import(pathToFileURL(join(dir, path)).href);
    const [capping, policy, segments, adapter] = await Promise.all([
      from("functions/core/capping/capper.ts"),
      from("functions/core/capping/policy.ts"),
      from("functions/core/capping/segment-index.ts"),
      from("functions/adapters/redis-cluster.ts"),
    ]);
    return {
      commit,
      capper({ cluster, document, bitmaps, clock, namespace }) {
        const rules = { policy: policy.parsePolicy(document), segments: new segments.SegmentIndex(bitmaps) };
        return new capping.Capper({ store: new adapter.RedisCapStore(cluster), rules: () => rules, clock, namespace });
      },
      close: () => rmSync(dir, { recursive: true, force: true }),
    };
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}
