// The rules the layout keeps (docs/ARCHITECTURE.md), checked on the real import graph; each check is
// also shown to catch a violation, so none of them passes by reading nothing.
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  forbiddenArrows,
  type ImportGraph,
  importLoops,
  importsLeaving,
  importsPastEntries,
  packageImports,
  readImportGraph,
  roomOf,
  undeclaredPackages,
} from "../support/import-graph.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const graph = readImportGraph(root, ["functions", "scripts", "infra", "sdk", "test"]);

const PRODUCTS = ["core/capping", "core/limits", "core/quotas"];
/** The protocol module: what the SDK and the service agree on (wire format, keys, Redis Functions). */
const PROTOCOL = "sdk/protocol";
/** Room -> the rooms it may import (itself always). Read with the picture in docs/ARCHITECTURE.md. */
const ALLOWED_ARROWS: Record<string, readonly string[]> = {
  // the service (functions/): every room but entry may use the protocol
  entry: ["app"],
  app: ["handlers", "adapters", "core/shared", ...PRODUCTS, PROTOCOL],
  handlers: ["core/shared", ...PRODUCTS, PROTOCOL],
  adapters: ["core/shared", ...PRODUCTS, PROTOCOL],
  "core/shared": [PROTOCOL],
  "core/capping": ["core/shared", PROTOCOL],
  "core/limits": ["core/shared", PROTOCOL],
  // Quotas may build on the limit specs; nothing builds on Quotas inside core
  "core/quotas": ["core/shared", "core/limits", PROTOCOL],
  // the SDK (sdk/src/, the @tollgate/quotas package): the engine and its API, the transports that reach
  // the store, the middleware over the API; the protocol imports no other room of either side
  "sdk/core": [PROTOCOL],
  "sdk/transports": ["sdk/core", PROTOCOL],
  "sdk/middleware": ["sdk/core"],
  [PROTOCOL]: [],
};
const SDK_PACKAGE = JSON.parse(readFileSync(new URL("../../sdk/package.json", import.meta.url), "utf8")) as {
  exports: Record<string, { "tollgate-source": string; types: string; default: string }>;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
};
/**
 * The SDK package's public entry points (its "exports"), as repository paths: the "tollgate-source" condition names
 * each entry's source file (the published package carries dist/ under "types" and "default"); the repository
 * imports the sources by path, never the package by name.
 */
const SDK_ENTRIES = Object.values(SDK_PACKAGE.exports).map(
  (entry) => `sdk/${entry["tollgate-source"].replace(/^\.\//, "")}`,
);
/** The one entry the service imports the SDK package through: `@tollgate/quotas/protocol`. */
const PROTOCOL_ENTRY = "sdk/src/protocol/index.ts";
/** What the package may import: its dependencies and peer dependencies (and Node's built-ins). */
const SDK_DECLARED = [
  ...Object.keys(SDK_PACKAGE.dependencies ?? {}),
  ...Object.keys(SDK_PACKAGE.peerDependencies ?? {}),
];
/**
 * Imported for their types only (erased from dist/): the middleware's and the signer's callers bring them.
 * Not dependencies of the package.
 */
const SDK_TYPE_ONLY = ["express", "fastify", "@smithy/types"];
/** The protocol runs in both: no package but zod and ioredis (for its types) besides Node's built-ins. */
const PROTOCOL_PACKAGES = /^(?!node:|zod$|ioredis$)/;
/** What core must not know: Lambda events, middleware, ioredis, the AWS SDK. */
const RUNTIME_PACKAGES = /^(ioredis|aws-lambda|@aws-sdk\/|@smithy\/|@middy\/|@aws-lambda-powertools\/)/;
const ROARING = /^roaring(-wasm)?$/;
const SEGMENT_FILES = ["functions/core/capping/segment-index.ts", "functions/core/capping/segment-builder.ts"];

const homeless = (files: readonly string[]) =>
  files
    .filter((file) => file.startsWith("functions/") || file.startsWith("sdk/src/"))
    .filter((file) => !((roomOf(file) ?? "") in ALLOWED_ARROWS));

const misnamed = (files: readonly string[]) =>
  files.filter((file) => !/^[a-z0-9]+(-[a-z0-9]+)*(\.[a-z0-9]+)+$/.test(basename(file)));

const graphOf = (arrows: Record<string, string[]>, packages: Record<string, string[]> = {}): ImportGraph =>
  new Map(
    [...new Set([...Object.keys(arrows), ...Object.keys(packages)])].map((file) => [
      file,
      { files: arrows[file] ?? [], packages: packages[file] ?? [] },
    ]),
  );

describe("the layout", () => {
  it("names every source file in kebab-case", () => {
    expect(misnamed([...graph.keys()])).toEqual([]);
  });

  it("puts every file under functions/ in a known room", () => {
    expect(homeless([...graph.keys()].filter((file) => file.startsWith("functions/")))).toEqual([]);
  });

  it("puts every file under sdk/src/ in a known room", () => {
    expect(homeless([...graph.keys()].filter((file) => file.startsWith("sdk/src/")))).toEqual([]);
  });

  it("imports only along the allowed arrows: core imports no adapters, handlers or app; limits no capping; shared no product", () => {
    expect(forbiddenArrows(graph, ALLOWED_ARROWS)).toEqual([]);
  });

  it("imports along the SDK's arrows: the protocol imports no other room; middleware no transport; the engine no transport", () => {
    // (the arrows above cover sdk/ rooms too; this names what they forbid there)
    const sdkArrows = forbiddenArrows(graph, ALLOWED_ARROWS).filter(({ from }) => from.startsWith("sdk/"));
    expect(sdkArrows).toEqual([]);
  });

  it("ships everything the SDK imports: sdk/src/ imports no file outside it (nothing of functions/)", () => {
    expect(importsLeaving(graph, "sdk/src")).toEqual([]);
  });

  it("imports into the SDK package only packages it declares (and Node's built-ins)", () => {
    expect(undeclaredPackages(graph, "sdk/src", [...SDK_DECLARED, ...SDK_TYPE_ONLY])).toEqual([]);
    expect(packageImports(graph, "sdk/src/protocol", PROTOCOL_PACKAGES)).toEqual([]);
  });

  it("reaches the SDK package from functions/ only through the protocol entry, @tollgate/quotas/protocol", () => {
    expect(SDK_PACKAGE.exports["./protocol"]?.["tollgate-source"]).toBe("./src/protocol/index.ts");
    expect(importsPastEntries(graph, "functions", "sdk", [PROTOCOL_ENTRY])).toEqual([]);
  });

  it("reaches sdk/src/ from scripts/ and infra/ only through the package's public entries", () => {
    expect(SDK_ENTRIES).toContain(PROTOCOL_ENTRY);
    expect(importsPastEntries(graph, "scripts", "sdk/src", SDK_ENTRIES)).toEqual([]);
    expect(importsPastEntries(graph, "infra", "sdk/src", SDK_ENTRIES)).toEqual([]);
  });

  it("keeps Lambda, ioredis and the AWS SDK out of core", () => {
    expect(packageImports(graph, "functions/core", RUNTIME_PACKAGES)).toEqual([]);
  });

  it("loads roaring only in the segment index and builder (the schemas and the SDK stay native-free)", () => {
    expect(packageImports(graph, "functions", ROARING, SEGMENT_FILES)).toEqual([]);
    expect(packageImports(graph, "sdk", ROARING)).toEqual([]);
  });

  it("has no import loops in functions/, scripts/, infra/, sdk/ or the tests", () => {
    expect(importLoops(graph)).toEqual([]);
  });
});

describe("the structure checks catch what they forbid", () => {
  it("an arrow from limits to capping, from shared to a product, from core to an adapter", () => {
    const bad = graphOf({
      "functions/core/limits/limiter.ts": ["functions/core/capping/capper.ts"],
      "functions/core/shared/keys.ts": ["functions/core/limits/limiter.ts"],
      "functions/core/capping/capper.ts": ["functions/adapters/redis-cluster.ts", "functions/core/shared/keys.ts"],
    });
    expect(forbiddenArrows(bad, ALLOWED_ARROWS)).toEqual([
      { from: "functions/core/limits/limiter.ts", to: "functions/core/capping/capper.ts" },
      { from: "functions/core/shared/keys.ts", to: "functions/core/limits/limiter.ts" },
      { from: "functions/core/capping/capper.ts", to: "functions/adapters/redis-cluster.ts" },
    ]);
  });

  it("a file of functions/ or sdk/src/ outside every room", () => {
    const files = ["functions/core/shared/keys.ts", "functions/util.ts", "sdk/src/utils/x.ts", "sdk/src/quotas.ts"];
    expect(files.map(roomOf)).toEqual(["core/shared", undefined, "sdk/utils", "sdk/core"]);
    expect(homeless(files)).toEqual(["functions/util.ts", "sdk/src/utils/x.ts"]);
  });

  it("an arrow from the protocol to the SDK's engine or transports, from middleware to a transport, from core to the SDK's engine", () => {
    const bad = graphOf({
      "sdk/src/protocol/wire.ts": ["sdk/src/errors.ts", "sdk/src/protocol/keys.ts"],
      "sdk/src/protocol/keys.ts": ["sdk/src/transports/redis.ts"],
      "sdk/src/middleware/express.ts": ["sdk/src/transports/http.ts", "sdk/src/quotas.ts"],
      "sdk/src/quotas.ts": ["sdk/src/transports/redis.ts", "sdk/src/protocol/index.ts"],
      "sdk/src/transports/redis.ts": ["sdk/src/quotas.ts", "sdk/src/protocol/index.ts"],
      "functions/core/quotas/quota-store.ts": ["sdk/src/quotas.ts", "sdk/src/protocol/index.ts"],
    });
    expect(forbiddenArrows(bad, ALLOWED_ARROWS)).toEqual([
      { from: "sdk/src/protocol/wire.ts", to: "sdk/src/errors.ts" },
      { from: "sdk/src/protocol/keys.ts", to: "sdk/src/transports/redis.ts" },
      { from: "sdk/src/middleware/express.ts", to: "sdk/src/transports/http.ts" },
      { from: "sdk/src/quotas.ts", to: "sdk/src/transports/redis.ts" },
      { from: "functions/core/quotas/quota-store.ts", to: "sdk/src/quotas.ts" },
    ]);
  });

  it("an SDK file importing functions/ or a file beside the package, and undeclared packages", () => {
    const bad = graphOf(
      {
        "sdk/src/protocol/keys.ts": ["functions/core/shared/errors.ts"],
        "sdk/src/transports/redis.ts": ["scripts/lua-files.ts", "sdk/src/protocol/index.ts"],
        "sdk/test/redis.test.ts": ["functions/adapters/lua-scripts.ts"],
      },
      {
        "sdk/src/protocol/keys.ts": ["node:crypto", "crypto", "zod/v4", "cluster-key-slot"],
        "sdk/src/protocol/redis-functions.ts": ["ioredis", "@smithy/signature-v4"],
        "sdk/src/transports/http.ts": ["@smithy/signature-v4", "@aws-sdk/client-s3"],
      },
    );
    expect(importsLeaving(bad, "sdk/src")).toEqual([
      { from: "sdk/src/protocol/keys.ts", to: "functions/core/shared/errors.ts" },
      { from: "sdk/src/transports/redis.ts", to: "scripts/lua-files.ts" },
    ]);
    expect(undeclaredPackages(bad, "sdk/src", SDK_DECLARED)).toEqual([
      { from: "sdk/src/protocol/keys.ts", to: "cluster-key-slot" },
      { from: "sdk/src/transports/http.ts", to: "@aws-sdk/client-s3" },
    ]);
    expect(packageImports(bad, "sdk/src/protocol", PROTOCOL_PACKAGES)).toEqual([
      { from: "sdk/src/protocol/keys.ts", to: "crypto" },
      { from: "sdk/src/protocol/keys.ts", to: "zod/v4" },
      { from: "sdk/src/protocol/keys.ts", to: "cluster-key-slot" },
      { from: "sdk/src/protocol/redis-functions.ts", to: "@smithy/signature-v4" },
    ]);
  });

  it("functions/ reaching past the protocol entry, and scripts/ past the package's entries", () => {
    const bad = graphOf({
      "functions/adapters/redis-quota-store.ts": ["sdk/src/protocol/wire.ts", "sdk/src/protocol/index.ts"],
      "functions/adapters/lua-scripts.ts": ["sdk/src/transports/redis.ts"],
      "functions/app/quota-actions.ts": ["sdk/src/index.ts", "functions/core/shared/quota-rules.ts"],
      "scripts/bench/quotas.ts": ["sdk/src/index.ts", "sdk/src/protocol/wire.ts", "sdk/test/support/young-bytes.ts"],
    });
    expect(importsPastEntries(bad, "functions", "sdk", [PROTOCOL_ENTRY])).toEqual([
      { from: "functions/adapters/redis-quota-store.ts", to: "sdk/src/protocol/wire.ts" },
      { from: "functions/adapters/lua-scripts.ts", to: "sdk/src/transports/redis.ts" },
      { from: "functions/app/quota-actions.ts", to: "sdk/src/index.ts" },
    ]);
    expect(importsPastEntries(bad, "scripts", "sdk/src", SDK_ENTRIES)).toEqual([
      { from: "scripts/bench/quotas.ts", to: "sdk/src/protocol/wire.ts" },
    ]);
  });

  it("ioredis in core, and roaring outside the segment files", () => {
    const bad = graphOf(
      {},
      {
        "functions/core/limits/limiter.ts": ["zod", "ioredis"],
        "functions/core/shared/send-fields.ts": ["roaring"],
        "functions/core/capping/segment-index.ts": ["roaring"],
      },
    );
    expect(packageImports(bad, "functions/core", RUNTIME_PACKAGES)).toEqual([
      { from: "functions/core/limits/limiter.ts", to: "ioredis" },
    ]);
    expect(packageImports(bad, "functions", ROARING, SEGMENT_FILES)).toEqual([
      { from: "functions/core/shared/send-fields.ts", to: "roaring" },
    ]);
  });

  it("a file name in camelCase, PascalCase or snake_case", () => {
    const files = ["a/segment-index.ts", "a/segmentIndex.ts", "a/SegmentIndex.ts", "a/segment_index.ts", "a/x.d.ts"];
    expect(misnamed(files)).toEqual(["a/segmentIndex.ts", "a/SegmentIndex.ts", "a/segment_index.ts"]);
  });

  it("a loop of two files, a longer loop and a file importing itself, but not a diamond", () => {
    const loops = importLoops(
      graphOf({
        "a.ts": ["b.ts"],
        "b.ts": ["a.ts"],
        "c.ts": ["d.ts"],
        "d.ts": ["e.ts"],
        "e.ts": ["c.ts"],
        "f.ts": ["f.ts"],
        "g.ts": ["h.ts", "i.ts"],
        "h.ts": ["j.ts"],
        "i.ts": ["j.ts"],
        "j.ts": [],
      }),
    );
    expect(loops.sort()).toEqual([["a.ts", "b.ts"], ["c.ts", "d.ts", "e.ts"], ["f.ts"]]);
  });
});
