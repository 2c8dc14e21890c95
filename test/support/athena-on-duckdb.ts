// The stack's Athena named queries run by DuckDB: the Glue table `tollgate_archive.decisions` as the stack
// deploys it (its columns, types and partition keys, from the synthesized template) becomes a DuckDB view
// over the local archive's objects, and each query's text runs with only the renames of DIALECT (the
// functions Athena's engine and DuckDB name differently, same arguments, same meaning) and its two
// parameters set: the user ID the query names (17) and the day `current_date` reads (the test's clock).
// docs/archive.md lists the same renames.

import { DuckDBInstance } from "@duckdb/node-api";
import { App, RemovalPolicy, Stack } from "aws-cdk-lib";
import { Template } from "aws-cdk-lib/assertions";
import * as s3 from "aws-cdk-lib/aws-s3";
import { Archive } from "../../infra/archive.ts";
import { LINE_KEYS } from "../../scripts/archive-query.ts";

/** Athena's function → DuckDB's, where only the name differs. */
export const DIALECT: Readonly<Record<string, string>> = {
  transform: "list_transform",
  sequence: "generate_series",
  cardinality: "len",
  date_format: "strftime",
  from_unixtime: "to_timestamp",
};

/** The user ID the "Why was user X capped" query names, for the operator to set. */
export const QUERY_USER_ID = 17;

export interface DeployedArchiveSql {
  /** Named query name → its QueryString. */
  queries: Record<string, string>;
  /** The Glue table's columns then its partition keys, with their Glue types. */
  columns: { name: string; type: string }[];
}

/** The named queries and the Glue table, as the stack's template holds them. */
export function deployedArchiveSql(): DeployedArchiveSql {
  const stack = new Stack(new App(), "ArchiveSql");
  new Archive(stack, "Archive", {
    accessLogs: new s3.Bucket(stack, "Logs"),
    removalPolicy: RemovalPolicy.DESTROY,
    retentionDays: 400,
  });
  const template = Template.fromStack(stack);
  const queries: Record<string, string> = {};
  for (const { Properties } of Object.values(template.findResources("AWS::Athena::NamedQuery")))
    queries[Properties.Name as string] = Properties.QueryString as string;
  const [table] = Object.values(template.findResources("AWS::Glue::Table"));
  const input = table?.Properties.TableInput as {
    StorageDescriptor: { Columns: { Name: string; Type: string }[] };
    PartitionKeys: { Name: string; Type: string }[];
  };
  const columns = [...input.StorageDescriptor.Columns, ...input.PartitionKeys].map(({ Name, Type }) => ({
    name: Name,
    type: Type,
  }));
  return { queries, columns };
}

/** A query's text for DuckDB: DIALECT's renames, the user ID and the day set; nothing else changes. */
export function toDuckDb(sql: string, parameters: { userId: number; today: string }): string {
  let out = sql.replaceAll(/\bcurrent_date\b/g, `DATE '${parameters.today}'`);
  out = out.replaceAll(new RegExp(`\\b${QUERY_USER_ID}\\b`, "g"), String(parameters.userId));
  for (const [athena, duckdb] of Object.entries(DIALECT))
    out = out.replaceAll(new RegExp(`\\b${athena}\\(`, "g"), `${duckdb}(`);
  return out;
}

/**
 * A Glue column's or struct field's key in the lines: the JSON SerDe matches keys without case, DuckDB's
 * read_json by their spelling, so the view names each column as the lines spell it.
 */
const keyOf = (name: string) => LINE_KEYS.find((key) => key.toLowerCase() === name) ?? name;

/** A Glue (Hive) type as DuckDB's: string, bigint, double, boolean, array<…>, struct<name:type,…>. */
export function duckDbType(glue: string): string {
  const scalar: Record<string, string> = { string: "VARCHAR", bigint: "BIGINT", double: "DOUBLE", boolean: "BOOLEAN" };
  if (scalar[glue]) return scalar[glue];
  if (glue.startsWith("array<") && glue.endsWith(">")) return `${duckDbType(glue.slice(6, -1))}[]`;
  if (glue.startsWith("struct<") && glue.endsWith(">")) {
    const fields: string[] = [];
    let depth = 0;
    let start = 0;
    const body = glue.slice(7, -1);
    for (let i = 0; i <= body.length; i++) {
      const c = body[i];
      if (c === "<") depth++;
      else if (c === ">") depth--;
      else if ((c === "," && depth === 0) || i === body.length) {
        const field = body.slice(start, i);
        const colon = field.indexOf(":");
        fields.push(`"${keyOf(field.slice(0, colon))}" ${duckDbType(field.slice(colon + 1))}`);
        start = i + 1;
      }
    }
    return `STRUCT(${fields.join(", ")})`;
  }
  throw new Error(`no DuckDB type for the Glue type ${glue}`);
}

/**
 * Runs named queries over the archive objects `files` (a glob) as Athena would over the Glue table: the
 * table's non-partition columns read from each line by their keys (keyOf), `dt` and `hour` from the
 * object's path.
 */
export async function athenaOnDuckDb(deployed: DeployedArchiveSql, files: string) {
  const instance = await DuckDBInstance.create(":memory:");
  const connection = await instance.connect();
  const partitions = new Set(["dt", "hour"]);
  const columns = deployed.columns
    .filter(({ name }) => !partitions.has(name))
    .map(({ name, type }) => `"${keyOf(name)}": '${duckDbType(type)}'`)
    .join(", ");
  await connection.run("CREATE SCHEMA tollgate_archive");
  await connection.run(
    `CREATE VIEW tollgate_archive.decisions AS SELECT * FROM read_json('${files.replaceAll("'", "''")}',
      format = 'newline_delimited', hive_partitioning = true, hive_types = {'dt': 'VARCHAR', 'hour': 'VARCHAR'},
      columns = {${columns}})`,
  );
  return {
    /** The rows, their columns named in lower case as Athena names them. */
    run: async <Row = Record<string, unknown>>(sql: string) =>
      (await connection.runAndReadAll(sql))
        .getRowObjectsJson()
        .map((row) =>
          Object.fromEntries(Object.entries(row).map(([name, value]) => [name.toLowerCase(), value])),
        ) as Row[],
    close: () => {
      connection.closeSync();
      instance.closeSync();
    },
  };
}
