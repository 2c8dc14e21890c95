// The SDK as a service installs it: `npm pack` of sdk/ (its prepack builds dist/ and joins the Lua chunk), the
// tarball installed into a fresh TypeScript project (`module: nodenext`, `strict`) that depends only on it and
// what a user adds (typescript, ioredis, @types/node), type-checked without skipLibCheck, and run with node
// against the local cluster. The pack runs in a copy of sdk/ (beside the repository's lua/ and tsconfig.json,
// node_modules linked), so the build never writes dist/ or lua/ into the working tree. The npm cache holds
// every package after the repository's `npm ci`, so the install needs no network (--prefer-offline).
import { execFile } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clusterPorts, connectCluster, uniqueNamespace } from "../../../test/support/cluster.ts";
import { approximateRule } from "../../../test/support/quota-sync-calls.ts";
import { publishRule } from "../support/quota-cluster.ts";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const versionOf = (name: string) =>
  (JSON.parse(readFileSync(join(ROOT, "node_modules", name, "package.json"), "utf8")) as { version: string }).version;

/** The user's file: the three entries' types, and a check after a sync on the direct transport. */
const MAIN = `import { createQuotas, type Decision } from "@tollgate/quotas";
import { type HttpTransportOptions, httpTransport } from "@tollgate/quotas/http";
import { redisTransport } from "@tollgate/quotas/redis";
import { Cluster } from "ioredis";

const ports: number[] = JSON.parse(process.env.CLUSTER_PORTS ?? "[]");
// a Cluster without enableAutoPipelining, as the README builds it
const redis = new Cluster(ports.map((port) => ({ host: "127.0.0.1", port })));
const signed: HttpTransportOptions = {
  url: "https://example.lambda-url.eu-west-1.on.aws/",
  signing: { region: "eu-west-1", credentials: async () => ({ accessKeyId: "id", secretAccessKey: "secret" }) },
};
httpTransport(signed); // types only: built, never called
const quotas = createQuotas({ transport: redisTransport({ redis, namespace: process.env.NAMESPACE ?? "tg" }) });
// the first check names the key; the next sync brings its allowance (until quotas.ready() covers a fresh key)
await quotas.sync();
quotas.check("api", "user-1");
await quotas.sync();
const decision: Readonly<Decision> = quotas.check("api", "user-1");
console.log(JSON.stringify({ allowed: decision.allowed, limit: decision.limit }));
await quotas.stop();
redis.disconnect();
`;

let work: string;
let cluster: Cluster;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "tollgate-sdk-pack-"));
  cluster = connectCluster();
});
afterAll(async () => {
  await cluster.quit();
  rmSync(work, { recursive: true, force: true });
});

describe("the installable SDK package", () => {
  it("packs, installs into a fresh nodenext strict project, type-checks and admits a check after a sync", async () => {
    // the copy that packs: sdk/ without its node_modules, the root tsconfig.json and lua/ beside it
    const repo = join(work, "repo");
    cpSync(join(ROOT, "sdk"), join(repo, "sdk"), {
      recursive: true,
      filter: (source) => !/[\\/]sdk[\\/](node_modules|dist|lua)$/.test(source),
    });
    cpSync(join(ROOT, "lua"), join(repo, "lua"), { recursive: true });
    cpSync(join(ROOT, "tsconfig.json"), join(repo, "tsconfig.json"));
    symlinkSync(join(ROOT, "node_modules"), join(repo, "node_modules"), "dir");
    const packs = join(work, "packs");
    mkdirSync(packs);
    await run("npm", ["pack", "--pack-destination", packs, "--silent"], { cwd: join(repo, "sdk") });
    const [tarball] = readdirSync(packs).filter((name) => name.endsWith(".tgz"));
    expect(tarball).toMatch(/^tollgate-quotas-.*\.tgz$/);

    const app = join(work, "app");
    const manifest = {
      name: "quotas-user",
      private: true,
      type: "module",
      dependencies: {
        "@tollgate/quotas": `file:${join(packs, tarball as string)}`,
        ioredis: versionOf("ioredis"),
      },
      devDependencies: { typescript: versionOf("typescript"), "@types/node": versionOf("@types/node") },
    };
    const tsconfig = {
      compilerOptions: {
        target: "ES2022",
        module: "nodenext",
        moduleResolution: "nodenext",
        strict: true,
        skipLibCheck: false,
        types: ["node"],
        outDir: "out",
      },
      include: ["main.ts"],
    };
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify(manifest, null, 2));
    writeFileSync(join(app, "tsconfig.json"), JSON.stringify(tsconfig, null, 2));
    writeFileSync(join(app, "main.ts"), MAIN);
    await run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--silent"], { cwd: app });

    // the package's files: built JS and declarations, no sources
    const installed = join(app, "node_modules", "@tollgate", "quotas");
    expect(
      readdirSync(installed)
        .filter((name) => name !== "README.md" && name !== "LICENSE")
        .sort(),
    ).toEqual(["dist", "lua", "package.json"]);
    await run(join(app, "node_modules", ".bin", "tsc"), ["-p", "."], { cwd: app });

    const namespace = uniqueNamespace();
    await publishRule(cluster, namespace, "api", approximateRule([{ windowMs: 1_000, max: 100 }]), "v1");
    const { stdout } = await run("node", [join(app, "out", "main.js")], {
      cwd: app,
      env: { ...process.env, CLUSTER_PORTS: JSON.stringify(clusterPorts.slice(0, 3)), NAMESPACE: namespace },
    });
    expect(JSON.parse(stdout.trim())).toEqual({ allowed: true, limit: 100 });
  }, 300_000);
});
