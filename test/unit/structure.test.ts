// The rules the layout keeps (docs/ARCHITECTURE.md), checked on the real import graph; each check is
// also shown to catch a violation, so none of them passes by reading nothing.
import { basename } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  forbiddenArrows,
  type ImportGraph,
  importLoops,
  packageImports,
  readImportGraph,
  roomOf,
} from "../support/import-graph.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const graph = readImportGraph(root, ["functions", "scripts", "infra", "sdk", "test"]);

const PRODUCTS = ["core/capping", "core/limits", "core/quotas"];
/** Room -> the rooms it may import (itself always). Read with the picture in docs/ARCHITECTURE.md. */
const ALLOWED_ARROWS: Record<string, readonly string[]> = {
  entry: ["app"],
  app: ["handlers", "adapters", "core/shared", ...PRODUCTS],
  handlers: ["core/shared", ...PRODUCTS],
  adapters: ["core/shared", ...PRODUCTS],
  "core/shared": [],
  "core/capping": ["core/shared"],
  "core/limits": ["core/shared"],
  // Quotas may build on the limit specs; nothing builds on Quotas inside core
  "core/quotas": ["core/shared", "core/limits"],
};
/** What core must not know: Lambda events, middleware, ioredis, the AWS SDK. */
const RUNTIME_PACKAGES = /^(ioredis|aws-lambda|@aws-sdk\/|@smithy\/|@middy\/|@aws-lambda-powertools\/)/;
const ROARING = /^roaring(-wasm)?$/;
const SEGMENT_FILES = ["functions/core/capping/segment-index.ts", "functions/core/capping/segment-builder.ts"];

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
    const homeless = [...graph.keys()]
      .filter((file) => file.startsWith("functions/"))
      .filter((file) => !(roomOf(file)! in ALLOWED_ARROWS));
    expect(homeless).toEqual([]);
  });

  it("imports only along the allowed arrows: core imports no adapters, handlers or app; limits no capping; shared no product", () => {
    expect(forbiddenArrows(graph, ALLOWED_ARROWS)).toEqual([]);
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
