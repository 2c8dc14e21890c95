// Tollgate's Redis Functions libraries on the cluster's primaries: which are this build's and which are
// left from earlier deploys, and removing those. Each version loads its libraries under new names (a hash
// of their code, so two versions run side by side during a rollout) and nothing removes the old ones: they
// stay compiled in every node's memory. Removing one is safe at any time: a container or an SDK client
// still on that version finds "Function not found", which proves its call did not run, loads its own
// library again and sends the call once more (sdk/src/protocol/redis-functions.ts). What it costs such a
// client is one load per primary.
import type { Cluster, Redis } from "ioredis";
import type { RedisFunctionLibrary } from "../../sdk/src/protocol/index.ts";
import { limitLibrary, quotaLibrary, tollgateLibrary } from "../adapters/lua-scripts.ts";

/** The libraries this build loads (and its Lambda functions' warm-up loads on every primary). */
export const CURRENT_LIBRARIES: readonly RedisFunctionLibrary[] = [tollgateLibrary, limitLibrary, quotaLibrary];

/** Tollgate's library names, `tollgate_` and 8 hex digits: no other library is ever listed or removed. */
const OURS = /^tollgate_[0-9a-f]{8}$/;

export interface NodeLibraries {
  /** host:port of the primary */
  node: string;
  /** Tollgate libraries of this build the node holds */
  current: string[];
  /** Tollgate libraries of other builds (removed, when pruning) */
  stale: string[];
}

/** What each primary holds of Tollgate's libraries. */
export function listLibraries(
  cluster: Cluster,
  keep: readonly RedisFunctionLibrary[] = CURRENT_LIBRARIES,
): Promise<NodeLibraries[]> {
  return onPrimaries(cluster, keep, async () => {});
}

/**
 * Removes from every primary the Tollgate libraries not in `keep` (by default this build's); replicas follow
 * by replication. Returns what each primary held, `stale` being what was removed there.
 */
export function pruneLibraries(
  cluster: Cluster,
  keep: readonly RedisFunctionLibrary[] = CURRENT_LIBRARIES,
): Promise<NodeLibraries[]> {
  return onPrimaries(cluster, keep, async (node, stale) => {
    for (const name of stale) await deleteLibrary(node, name);
  });
}

async function onPrimaries(
  cluster: Cluster,
  keep: readonly RedisFunctionLibrary[],
  act: (node: Redis, stale: string[]) => Promise<void>,
): Promise<NodeLibraries[]> {
  const kept = new Set(keep.map((library) => library.name));
  // a new client knows no primaries before its slot map: a command waits for it (or fails as the cluster does)
  await cluster.ping();
  return Promise.all(
    cluster.nodes("master").map(async (node) => {
      const names = (await libraryNames(node)).filter((name) => OURS.test(name)).sort();
      const stale = names.filter((name) => !kept.has(name));
      await act(node, stale);
      return { node: `${node.options.host}:${node.options.port}`, current: names.filter((n) => kept.has(n)), stale };
    }),
  );
}

/** FUNCTION LIST's library names (RESP2: each library a flat list of field, value pairs). */
async function libraryNames(node: Redis): Promise<string[]> {
  const libraries = (await node.call("FUNCTION", "LIST", "LIBRARYNAME", "tollgate_*")) as unknown[][];
  return libraries.map((fields) => String(fields[fields.indexOf("library_name") + 1]));
}

/** FUNCTION DELETE; a library already gone (another operator, a FUNCTION FLUSH meanwhile) is not an error. */
async function deleteLibrary(node: Redis, name: string): Promise<void> {
  try {
    await node.call("FUNCTION", "DELETE", name);
  } catch (error) {
    if (!(error instanceof Error && /^ERR Library not found/.test(error.message))) throw error;
  }
}
