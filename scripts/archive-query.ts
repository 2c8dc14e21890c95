// The decision archive, queried with DuckDB: the archive's objects (gzipped NDJSON under dt=/hour=
// partitions, as Firehose writes them on AWS and the local stack writes them to the emulator) copied to a
// temporary folder and read by DuckDB's read_json. The `decisions` view has one row per decision: a
// campaign batch's line (archive-lines.ts) is expanded into a `campaign` row per user. `tollgate why`, `tollgate campaign report` and the tests
// use it; on AWS the same questions are the Athena named queries of infra/archive.ts.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { GetObjectCommand, ListObjectsV2Command, type S3Client } from "@aws-sdk/client-s3";
import { type DuckDBConnection, DuckDBInstance, type DuckDBValue } from "@duckdb/node-api";
import { CLASS_CODES } from "../functions/core/capping/archive-lines.ts";

/** Every field of a decision (docs/archive.md); a row lacks the fields of other kinds (null here). */
const COLUMNS: Record<string, string> = {
  kind: "VARCHAR",
  decidedAt: "DOUBLE",
  at: "DOUBLE",
  policyVersion: "VARCHAR",
  campaignId: "VARCHAR",
  channel: "VARCHAR",
  userId: "DOUBLE",
  segment: "VARCHAR",
  zone: "VARCHAR",
  decision: "VARCHAR",
  reason: "VARCHAR",
  cap: "VARCHAR",
  capChannel: "VARCHAR",
  capWindowMs: "DOUBLE",
  capMax: "DOUBLE",
  capUsed: "DOUBLE",
  consume: "BOOLEAN",
  dedupeId: "VARCHAR",
  scope: "VARCHAR",
  key: "VARCHAR",
  algorithm: "VARCHAR",
  cost: "DOUBLE",
  limit: "DOUBLE",
  remaining: "DOUBLE",
  retryAfterMs: "DOUBLE",
  eligibleAt: "DOUBLE",
};

/** A campaign batch line's own fields: its users' runs, their class codes and the classes. */
const CLASS_FIELDS = [
  "segment",
  "decision",
  "reason",
  "cap",
  "capChannel",
  "capWindowMs",
  "capMax",
  "capUsed",
  "zone",
  "eligibleAt",
];
const BATCH_COLUMNS: Record<string, string> = {
  records: "DOUBLE",
  users: "BIGINT[][]",
  classes: "VARCHAR",
  classTable: `STRUCT(${CLASS_FIELDS.map((name) => `"${name}" ${COLUMNS[name]}`).join(", ")})[]`,
};

/** Every key a line or a batch line's class may hold, as the lines spell them (docs/archive.md). */
export const LINE_KEYS: readonly string[] = [...Object.keys(COLUMNS), ...Object.keys(BATCH_COLUMNS)];

/**
 * One row per decision: the lines of one decision as they are, and each batch line's users (their runs in
 * order) with the class their code names; `dedupeId` is the send's identity as the delivery queue has it.
 */
function decisionsView(files: string): string {
  const columns = Object.entries({ ...COLUMNS, ...BATCH_COLUMNS })
    .map(([name, type]) => `"${name}": '${type}'`)
    .join(", ");
  const lines = `read_json('${files.replaceAll("'", "''")}', format = 'newline_delimited', hive_partitioning = true, columns = {${columns}})`;
  const single = Object.keys(COLUMNS).map((name) => `"${name}"`);
  const fromBatch = ["decidedAt", "at", "policyVersion", "campaignId", "channel"].map((name) => `"${name}"`);
  return `SELECT ${single.join(", ")}, dt, hour FROM ${lines} WHERE kind <> 'campaign-batch'
UNION ALL BY NAME
SELECT 'campaign' AS kind, ${fromBatch.join(", ")}, CAST(userId AS DOUBLE) AS userId,
  ${CLASS_FIELDS.map((name) => `class."${name}" AS "${name}"`).join(", ")},
  campaignId || ':' || channel || ':' || CAST(userId AS VARCHAR) AS dedupeId, dt, hour
FROM (
  SELECT ${fromBatch.join(", ")}, dt, hour, userId, classTable[strpos('${CLASS_CODES}', substring(classes, i, 1))] AS class
  FROM (
    SELECT ${fromBatch.join(", ")}, dt, hour, classes, classTable, unnest(ids) AS userId, generate_subscripts(ids, 1) AS i
    FROM (
      SELECT ${fromBatch.join(", ")}, dt, hour, classes, classTable, flatten(list_transform(users, r -> range(r[1], r[2] + 1))) AS ids
      FROM ${lines} WHERE kind = 'campaign-batch'
    )
  )
)`;
}

export interface ArchiveLocation {
  s3: S3Client;
  bucket: string;
  /** Ends in "/". */
  prefix: string;
}

/** The archive opened for queries: the `decisions` view over every line copied; `close()` removes the copy. */
export interface OpenArchive {
  query<Row = Record<string, unknown>>(sql: string, values?: DuckDBValue[]): Promise<Row[]>;
  /** Objects and bytes read. */
  objects: number;
  /** The copied objects as a glob DuckDB reads (null when there were none); gone after `close()`. */
  files: string | null;
  close(): void;
}

/** Copies the archive's objects (only partitions from `sinceMs` on, when given) and opens them in DuckDB. */
export async function openArchive(location: ArchiveLocation, options: { sinceMs?: number } = {}): Promise<OpenArchive> {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-archive-"));
  const since = options.sinceMs === undefined ? "" : `dt=${new Date(options.sinceMs).toISOString().slice(0, 10)}`;
  let objects = 0;
  let token: string | undefined;
  do {
    const page = await location.s3.send(
      new ListObjectsV2Command({ Bucket: location.bucket, Prefix: location.prefix, ContinuationToken: token }),
    );
    for (const { Key } of page.Contents ?? []) {
      if (!Key?.endsWith(".gz")) continue;
      const relative = Key.slice(location.prefix.length);
      // partitions sort by name: dt=YYYY-MM-DD before `since` is older than asked for
      if (since && relative.slice(0, since.length) < since) continue;
      const object = await location.s3.send(new GetObjectCommand({ Bucket: location.bucket, Key }));
      const path = join(dir, relative);
      mkdirSync(dirname(path), { recursive: true });
      // binary: the gzip bytes as they are, never decoded as text
      writeFileSync(
        path,
        await (object.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray(),
      );
      objects++;
    }
    token = page.NextContinuationToken;
  } while (token);
  const instance = await DuckDBInstance.create(":memory:");
  const connection: DuckDBConnection = await instance.connect();
  const files = join(dir, "**", "*.ndjson.gz");
  const source =
    objects === 0
      ? // no object yet: the same columns, no rows
        `SELECT ${Object.entries(COLUMNS)
          .map(([name, type]) => `CAST(NULL AS ${type}) AS "${name}"`)
          .join(", ")}, NULL AS dt, NULL AS hour WHERE false`
      : decisionsView(files);
  await connection.run(`CREATE VIEW decisions AS ${source}`);
  return {
    objects,
    files: objects === 0 ? null : files,
    query: async <Row>(sql: string, values?: DuckDBValue[]) =>
      (await connection.runAndReadAll(sql, values)).getRowObjectsJson() as Row[],
    close: () => {
      connection.closeSync();
      instance.closeSync();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
