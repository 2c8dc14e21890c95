// The second half of `npm test`: the whole suite again on Node 22, the functions' runtime (`nodejs22.x`)
// and the users' baseline, when the first pass ran on another Node (20). Plain Node: it picks the runtime.
// `npx -p node@22` fetches Node 22 from the npm registry once and caches it. Extra vitest arguments pass on.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
if (process.versions.node.split(".")[0] === "22") {
  console.error("[node22] the suite already ran on Node 22");
  process.exit(0);
}
console.error(`[node22] the suite ran on Node ${process.versions.node}; now on Node 22`);
const vitest = join(root, "node_modules", "vitest", "vitest.mjs");
const result = spawnSync("npx", ["--yes", "-p", "node@22", "node", vitest, "run", ...process.argv.slice(2)], {
  cwd: root,
  stdio: "inherit",
});
process.exit(result.status ?? 1);
