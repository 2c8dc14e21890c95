// The second half of `npm test`: the whole suite again on Node 22, the functions' runtime (`nodejs22.x`)
// and the users' baseline, when the first pass ran on another Node (20). Plain Node: it picks the runtime.
// `npx -p node@22` fetches Node 22 from the npm registry once and caches it; only its path is taken from
// npx, because the environment npx sets for its child (npm_config_*) makes every nested `npx` (CDK's
// esbuild during synth) try to install node@22 again and give up.
import { execFileSync, spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
if (process.versions.node.split(".")[0] === "22") {
  console.error("[node22] the suite already ran on Node 22");
  process.exit(0);
}
console.error(`[node22] the suite ran on Node ${process.versions.node}; now on Node 22`);
const node22 = execFileSync("npx", ["--yes", "-p", "node@22", "node", "-p", "process.execPath"], {
  cwd: root,
  encoding: "utf8",
  stdio: ["ignore", "pipe", "inherit"],
}).trim();
const env = Object.fromEntries(
  Object.entries(process.env).filter(([name]) => !name.startsWith("npm_") && !name.startsWith("NPM_")),
);
env.PATH = `${dirname(node22)}:${join(root, "node_modules", ".bin")}:${process.env.PATH ?? ""}`;
const vitest = join(root, "node_modules", "vitest", "vitest.mjs");
const result = spawnSync(node22, [vitest, "run", ...process.argv.slice(2)], { cwd: root, stdio: "inherit", env });
process.exit(result.status ?? 1);
