// Runs a synthesized Lambda bundle on Node 24, the runtime the functions declare (`nodejs24.x`), whatever
// Node runs the tests: this Node when it is 24, the binary TOLLGATE_NODE24 names (the test runners that
// already fetched one), or else `npx -p node@24`, which fetches it from the npm registry once and caches it.
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const runtime = join(import.meta.dirname, "lambda-runtime.mjs");
const node24 = process.env.TOLLGATE_NODE24 ?? (process.versions.node.startsWith("24.") ? process.execPath : undefined);
const launch = node24 ? { file: node24, args: [] } : { file: "npx", args: ["--yes", "-p", "node@24", "node"] };

export interface BundleOutcome {
  /** process.version and process.arch of the Node that ran the bundle. */
  node: string;
  arch: string;
  replies: unknown[];
  /** Set when the bundle failed to import or a handler threw. */
  error?: string;
}

/** Imports `bundle` on Node 24 and invokes its handler with each event in turn (one warm container). */
export async function invokeOnNode24(
  bundle: string,
  events: unknown[],
  options: { env: Record<string, string>; timeoutMs?: number },
): Promise<BundleOutcome> {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-node24-"));
  const replyFile = join(dir, "outcome.json");
  try {
    await new Promise<void>((resolve, reject) => {
      const child = execFile(
        launch.file,
        [...launch.args, runtime, bundle, replyFile, String(options.timeoutMs ?? 10_000)],
        { env: { ...process.env, ...options.env }, timeout: 180_000, maxBuffer: 16 * 1024 * 1024 },
        (error, _stdout, stderr) =>
          error ? reject(new Error(`node@24 failed: ${error.message}\n${stderr}`)) : resolve(),
      );
      child.stdin?.end(JSON.stringify(events));
    });
    return JSON.parse(readFileSync(replyFile, "utf8")) as BundleOutcome;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
