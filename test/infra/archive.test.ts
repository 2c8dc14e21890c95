// The decision archive on AWS, in the synthesized template (bundling skipped): Firehose writes gzipped
// NDJSON to the archive bucket under the partitions the local writer uses, the Glue table reads them by
// partition projection, Athena has the two named queries, and every function may put records on the
// stream, and nothing more on it.
import { Match, Template } from "aws-cdk-lib/assertions";
import { beforeAll, describe, expect, it } from "vitest";
import { CLASS_CODES } from "../../functions/core/capping/archive-lines.ts";
import { DEFAULT_ARCHIVE_PREFIX } from "../../functions/core/shared/decision-archive.ts";
import { buildApp } from "../../infra/app.ts";

type Resources = Record<string, { Type: string; Properties: Record<string, unknown> }>;
let template: Template;
let resources: Resources;
beforeAll(() => {
  const { stack } = buildApp({ "aws:cdk:bundling-stacks": [] });
  template = Template.fromStack(stack);
  resources = template.toJSON().Resources as Resources;
}, 120_000);
const ofType = (type: string) => Object.entries(resources).filter(([, r]) => r.Type === type);

describe("the decision archive's stack resources", () => {
  it("delivers gzipped .ndjson.gz objects under dt=/hour= partitions, encrypted, within a minute", () => {
    template.hasResourceProperties("AWS::KinesisFirehose::DeliveryStream", {
      DeliveryStreamType: "DirectPut",
      DeliveryStreamEncryptionConfigurationInput: { KeyType: "AWS_OWNED_CMK" },
      ExtendedS3DestinationConfiguration: Match.objectLike({
        Prefix: `${DEFAULT_ARCHIVE_PREFIX}dt=!{timestamp:yyyy-MM-dd}/hour=!{timestamp:HH}/`,
        CompressionFormat: "GZIP",
        FileExtension: ".ndjson.gz",
        BufferingHints: { IntervalInSeconds: 30, SizeInMBs: 64 },
      }),
    });
  });

  it("keeps the archive bucket private, SSL-only, logged, and expiring", () => {
    const [, bucket] = ofType("AWS::S3::Bucket").find(([id]) => id.startsWith("ArchiveBucket")) ?? [];
    expect(bucket?.Properties).toMatchObject({
      PublicAccessBlockConfiguration: { BlockPublicAcls: true, RestrictPublicBuckets: true },
      LoggingConfiguration: { LogFilePrefix: "archive/" },
      LifecycleConfiguration: {
        Rules: expect.arrayContaining([
          expect.objectContaining({ Prefix: DEFAULT_ARCHIVE_PREFIX, ExpirationInDays: 400 }),
        ]),
      },
    });
  });

  it("has a Glue table over the partitions by projection, with the JSON SerDe", () => {
    template.hasResourceProperties("AWS::Glue::Table", {
      DatabaseName: "tollgate_archive",
      TableInput: Match.objectLike({
        Name: "decisions",
        PartitionKeys: [
          { Name: "dt", Type: "string" },
          { Name: "hour", Type: "string" },
        ],
        Parameters: Match.objectLike({ "projection.enabled": "true", "projection.hour.digits": "2" }),
        StorageDescriptor: Match.objectLike({
          SerdeInfo: Match.objectLike({ SerializationLibrary: "org.openx.data.jsonserde.JsonSerDe" }),
        }),
      }),
    });
  });

  it("reads a campaign batch's line: its user runs, class codes and class table, typed for the SerDe", () => {
    const [, table] = ofType("AWS::Glue::Table")[0] as [string, Resources[string]];
    const columns = (
      table.Properties.TableInput as { StorageDescriptor: { Columns: { Name: string; Type: string }[] } }
    ).StorageDescriptor.Columns;
    const typeOf = (name: string) => columns.find((column) => column.Name === name)?.Type;
    expect(typeOf("users")).toBe("array<array<bigint>>");
    expect(typeOf("classes")).toBe("string");
    expect(typeOf("records")).toBe("bigint");
    expect(typeOf("classtable")).toBe(
      "array<struct<segment:string,decision:string,reason:string,cap:string,capchannel:string,capwindowms:bigint,capmax:bigint,capused:bigint,zone:string,eligibleat:bigint>>",
    );
    // every name a line writes is a column (lower case: the SerDe matches without regard to case)
    expect(columns.every((column) => column.Name === column.Name.toLowerCase())).toBe(true);
  });

  it("names the two Athena queries: why was a user capped, and sent/capped by campaign, segment and day", () => {
    const queries = ofType("AWS::Athena::NamedQuery").map(([, r]) => r.Properties);
    expect(queries.map((q) => q.Name).sort()).toEqual([
      "Sent and capped by campaign segment and day",
      "Why was user X capped",
    ]);
    for (const query of queries) expect(query.Database).toBe("tollgate_archive");
  });

  it("expands batch lines into a row per user in both queries, the why query only the lines holding the user", () => {
    const queries = Object.fromEntries(
      ofType("AWS::Athena::NamedQuery").map(([, r]) => [
        r.Properties.Name as string,
        r.Properties.QueryString as string,
      ]),
    );
    for (const sql of Object.values(queries)) {
      expect(sql).toContain("kind = 'campaign-batch'");
      expect(sql).toContain(
        "CROSS JOIN UNNEST(flatten(transform(b.users, r -> sequence(r[1], r[2])))) WITH ORDINALITY",
      );
      expect(sql).toContain(`strpos('${CLASS_CODES}', substr(b.classes`);
    }
    const why = queries["Why was user X capped"] as string;
    expect(why).toContain("cardinality(filter(b.users, r -> 17 BETWEEN r[1] AND r[2])) > 0");
    expect(why).toContain("kind = 'frequency'");
    expect(queries["Sent and capped by campaign segment and day"]).toContain(
      "count(DISTINCT CASE WHEN decision = 'capped' THEN dedupeid END)",
    );
  });

  it("tells every function the stream and lets each put records on it, nothing else", () => {
    // the functions that decide (the policy's readers); the cache rotation decides nothing
    const functions = ofType("AWS::Lambda::Function").filter(
      ([, f]) =>
        (f.Properties.Environment as { Variables?: Record<string, unknown> } | undefined)?.Variables?.CONFIG_BUCKET,
    );
    expect(functions).toHaveLength(3);
    for (const [, fn] of functions) {
      const variables = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
      expect(JSON.stringify(variables.DECISION_ARCHIVE)).toContain("firehose:");
    }
    const puts = ofType("AWS::IAM::Policy").flatMap(([, policy]) =>
      (policy.Properties.PolicyDocument as { Statement: { Action: string | string[] }[] }).Statement.filter((s) =>
        ([] as string[]).concat(s.Action).some((action) => action.startsWith("firehose:")),
      ),
    );
    expect(puts.length).toBeGreaterThanOrEqual(1);
    for (const statement of puts)
      expect(([] as string[]).concat(statement.Action).sort()).toEqual([
        "firehose:PutRecord",
        "firehose:PutRecordBatch",
      ]);
  });

  it("reaches Firehose from the functions' subnets through a VPC endpoint", () => {
    const endpoints = ofType("AWS::EC2::VPCEndpoint").map(([, r]) => JSON.stringify(r.Properties.ServiceName));
    expect(endpoints.some((name) => name.includes("kinesis-firehose"))).toBe(true);
  });
});
