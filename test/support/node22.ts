// Runs a synthesized Lambda bundle on Node 22, the runtime the functions declare (`nodejs22.x`), whatever
// Node runs the tests: this Node when it is 22, the binary TOLLGATE_NODE22 names (the test runners that
// already fetched one), or else `npx -p node@22`, which fetches it from the npm registry once and caches it.
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const runtime = join(import.meta.dirname, "lambda-runtime.mjs");
const node22 = process.env.TOLLGATE_NODE22 ?? (process.versions.node.startsWith("22.") ? process.execPath : undefined);
const launch = node22 ? { file: node22, args: [] } : { file: "npx", args: ["--yes", "-p", "node@22", "node"] };

export interface BundleOutcome {
  /** process.version and process.arch of the Node that ran the bundle. */
  node: string;
  arch: string;
  replies: unknown[];
  /** Set when the bundle failed to import or a handler threw. */
  error?: string;
}

/** Imports `bundle` on Node 22 and invokes its handler with each event in turn (one warm container). */
export async function invokeOnNode22(
  bundle: string,
  events: unknown[],
  options: { env: Record<string, string>; timeoutMs?: number },
): Promise<BundleOutcome> {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-node22-"));
  const replyFile = join(dir, "outcome.json");
  try {
    await new Promise<void>((resolve, reject) => {
      const child = execFile(
        launch.file,
        [...launch.args, runtime, bundle, replyFile, String(options.timeoutMs ?? 10_000)],
        { env: { ...process.env, ...options.env }, timeout: 180_000, maxBuffer: 16 * 1024 * 1024 },
        (error, _stdout, stderr) =>
          error ? reject(new Error(`node@22 failed: ${error.message}\n${stderr}`)) : resolve(),
      );
      child.stdin?.end(JSON.stringify(events));
    });
    return JSON.parse(readFileSync(replyFile, "utf8")) as BundleOutcome;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
