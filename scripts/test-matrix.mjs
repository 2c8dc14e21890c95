// The second half of `npm test`: the whole suite again on Node 24 and Valkey 8.0, the functions' runtime
// (`nodejs24.x`) and the engine the stack deploys, after the first pass ran on the machine's Node (20) and
// Redis 7.0 (the engine and version the `redis` setting deploys). Two passes cover both engines and both Nodes
// with the whole suite, in the time of two. Plain Node: it picks the runtime.
// `npx -p node@24` fetches Node 24 from the npm registry once and caches it; only its path is taken from
// npx, because the environment npx sets for its child (npm_config_*) makes every nested `npx` (CDK's
// esbuild during synth) try to install node@24 again and give up.
import { execFileSync, spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const onNode24 = process.versions.node.split(".")[0] === "24";
const node24 = onNode24
  ? process.execPath
  : execFileSync("npx", ["--yes", "-p", "node@24", "node", "-p", "process.execPath"], {
      cwd: root,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
    }).trim();
console.error(`[matrix] the suite ran on Node ${process.versions.node} and Redis; now on Node 24 and Valkey`);
const env = Object.fromEntries(
  Object.entries(process.env).filter(([name]) => !name.startsWith("npm_") && !name.startsWith("NPM_")),
);
env.PATH = `${dirname(node24)}:${join(root, "node_modules", ".bin")}:${process.env.PATH ?? ""}`;
env.TOLLGATE_ENGINE = "valkey";
env.TOLLGATE_NODE24 = node24;
// its own ports: a Redis cluster left on the first pass's (a local stack the developer runs) is not in the way
env.REDIS_CLUSTER_BASE_PORT = process.env.VALKEY_CLUSTER_BASE_PORT ?? "7050";
const vitest = join(root, "node_modules", "vitest", "vitest.mjs");
const result = spawnSync(node24, [vitest, "run", ...process.argv.slice(2)], { cwd: root, stdio: "inherit", env });
process.exit(result.status ?? 1);
