// The import graph of the source tree, read with TypeScript's own pre-processor (static, type-only and
// dynamic imports alike), and the structure rules of docs/ARCHITECTURE.md as small pure checks: rooms of
// functions/ and of the SDK package (sdk/src/), and the arrows between them.
import { readdirSync, readFileSync } from "node:fs";
import { isBuiltin } from "node:module";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";

/** File (repository-relative) -> what it imports: other files (repository-relative) and packages. */
export type ImportGraph = Map<string, { files: string[]; packages: string[] }>;

export function readImportGraph(root: string, folders: readonly string[]): ImportGraph {
  const graph: ImportGraph = new Map();
  const walk = (folder: string): string[] =>
    readdirSync(join(root, folder), { withFileTypes: true }).flatMap((entry) => {
      const path = join(folder, entry.name);
      if (entry.isDirectory()) return entry.name === "node_modules" ? [] : walk(path);
      return /\.(ts|mts)$/.test(entry.name) && !entry.name.endsWith(".d.ts") ? [path] : [];
    });
  for (const file of folders.flatMap(walk)) {
    const { importedFiles } = ts.preProcessFile(readFileSync(join(root, file), "utf8"), true, true);
    const files: string[] = [];
    const packages: string[] = [];
    for (const { fileName } of importedFiles) {
      if (fileName.startsWith(".")) files.push(relative(root, resolve(root, dirname(file), fileName)));
      else packages.push(fileName);
    }
    graph.set(file, { files, packages });
  }
  return graph;
}

/**
 * The room of a file: under functions/, "entry", "app", "handlers", "adapters" or "core/<product>"; under
 * sdk/src/ (the @tollgate/quotas package), "sdk/core" for its top-level files, else "sdk/<folder>"
 * ("sdk/protocol", "sdk/transports", "sdk/middleware").
 */
export function roomOf(file: string): string | undefined {
  const service = /^functions\/(core\/[^/]+|[^/]+)\//.exec(file);
  if (service) return service[1];
  const sdk = /^sdk\/src\/(?:([^/]+)\/.*|[^/]+)$/.exec(file);
  return sdk ? `sdk/${sdk[1] ?? "core"}` : undefined;
}

export interface Arrow {
  from: string;
  to: string;
}

/** Arrows between rooms that `allowed` does not list (a room may always import itself). */
export function forbiddenArrows(graph: ImportGraph, allowed: Record<string, readonly string[]>): Arrow[] {
  const arrows: Arrow[] = [];
  for (const [from, { files }] of graph) {
    const room = roomOf(from);
    if (room === undefined) continue;
    for (const to of files) {
      const target = roomOf(to);
      if (target === undefined || target === room) continue;
      if (!(allowed[room] ?? []).includes(target)) arrows.push({ from, to });
    }
  }
  return arrows;
}

/** Files under `folder` that import a package matching `pattern`, except the `allowedFiles`. */
export function packageImports(
  graph: ImportGraph,
  folder: string,
  pattern: RegExp,
  allowedFiles: readonly string[] = [],
): Arrow[] {
  const arrows: Arrow[] = [];
  for (const [from, { packages }] of graph) {
    if (!from.startsWith(`${folder}/`) || allowedFiles.includes(from)) continue;
    for (const to of packages) if (pattern.test(to)) arrows.push({ from, to });
  }
  return arrows;
}

/** Imports from files under `folder` of files outside it (what a package under `folder` would not ship). */
export function importsLeaving(graph: ImportGraph, folder: string): Arrow[] {
  const arrows: Arrow[] = [];
  for (const [from, { files }] of graph) {
    if (!from.startsWith(`${folder}/`)) continue;
    for (const to of files) if (!to.startsWith(`${folder}/`)) arrows.push({ from, to });
  }
  return arrows;
}

/** Imports from files under `folder` of files under `into` other than its `entries` (its public entry points). */
export function importsPastEntries(
  graph: ImportGraph,
  folder: string,
  into: string,
  entries: readonly string[],
): Arrow[] {
  const arrows: Arrow[] = [];
  for (const [from, { files }] of graph) {
    if (!from.startsWith(`${folder}/`)) continue;
    for (const to of files) if (to.startsWith(`${into}/`) && !entries.includes(to)) arrows.push({ from, to });
  }
  return arrows;
}

/** The package a specifier names: `@scope/name` or `name`, without a subpath ("zod/v4" is "zod"). */
const packageNameOf = (specifier: string): string =>
  specifier
    .split("/")
    .slice(0, specifier.startsWith("@") ? 2 : 1)
    .join("/");

/** Files under `folder` importing a package that is neither in `declared` nor a Node built-in. */
export function undeclaredPackages(graph: ImportGraph, folder: string, declared: readonly string[]): Arrow[] {
  const arrows: Arrow[] = [];
  for (const [from, { packages }] of graph) {
    if (!from.startsWith(`${folder}/`)) continue;
    for (const to of packages) if (!isBuiltin(to) && !declared.includes(packageNameOf(to))) arrows.push({ from, to });
  }
  return arrows;
}

/** Every import loop, each as the files around it (Tarjan's strongly connected components). */
export function importLoops(graph: ImportGraph): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const loops: string[][] = [];
  const visit = (file: string) => {
    index.set(file, next);
    low.set(file, next);
    next++;
    stack.push(file);
    onStack.add(file);
    for (const to of graph.get(file)?.files ?? []) {
      if (!graph.has(to)) continue;
      if (!index.has(to)) {
        visit(to);
        low.set(file, Math.min(low.get(file) as number, low.get(to) as number));
      } else if (onStack.has(to)) {
        low.set(file, Math.min(low.get(file) as number, index.get(to) as number));
      }
    }
    if (low.get(file) === index.get(file)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop() as string;
        onStack.delete(member);
        component.push(member);
      } while (member !== file);
      const selfImport = graph.get(file)?.files.includes(file) ?? false;
      if (component.length > 1 || selfImport) loops.push(component.sort());
    }
  };
  for (const file of graph.keys()) if (!index.has(file)) visit(file);
  return loops;
}
