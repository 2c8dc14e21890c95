// The decision archive on AWS: a Firehose delivery stream the functions put NDJSON chunks on, writing
// gzipped objects to its own bucket under dt=/hour= partitions (the same objects the local stack writes),
// a Glue table over them (partition projection: no crawler, no MSCK REPAIR), and an Athena workgroup with
// the operator's two questions as named queries. A campaign batch is one line (archive-lines.ts): the
// queries expand it to a row per user, as the local DuckDB view does.

import { Duration, RemovalPolicy, Stack } from "aws-cdk-lib";
import * as athena from "aws-cdk-lib/aws-athena";
import * as glue from "aws-cdk-lib/aws-glue";
import * as iam from "aws-cdk-lib/aws-iam";
import * as firehose from "aws-cdk-lib/aws-kinesisfirehose";
import * as s3 from "aws-cdk-lib/aws-s3";
import { Construct } from "constructs";
import { CLASS_CODES } from "../functions/core/capping/archive-lines.ts";
import { DEFAULT_ARCHIVE_PREFIX } from "../functions/core/shared/decision-archive.ts";

/** The archive's columns (docs/archive.md), as the Glue table and the local DuckDB view read them. */
const CLASS_STRUCT =
  "struct<segment:string,decision:string,reason:string,cap:string,capchannel:string,capwindowms:bigint,capmax:bigint,capused:bigint,zone:string,eligibleat:bigint>";
const COLUMNS: [string, string][] = [
  ["kind", "string"],
  ["decidedat", "bigint"],
  ["at", "bigint"],
  ["policyversion", "string"],
  ["campaignid", "string"],
  ["channel", "string"],
  ["userid", "bigint"],
  ["segment", "string"],
  ["zone", "string"],
  ["decision", "string"],
  ["reason", "string"],
  ["cap", "string"],
  ["capchannel", "string"],
  ["capwindowms", "bigint"],
  ["capmax", "bigint"],
  ["capused", "bigint"],
  ["consume", "boolean"],
  ["dedupeid", "string"],
  ["scope", "string"],
  ["key", "string"],
  ["algorithm", "string"],
  ["cost", "double"],
  ["limit", "double"],
  ["remaining", "double"],
  ["retryafterms", "double"],
  ["eligibleat", "bigint"],
  // a campaign batch's line: its users as runs [first, last] in order, a code per user, the codes' classes
  ["records", "bigint"],
  ["users", "array<array<bigint>>"],
  ["classes", "string"],
  ["classtable", `array<${CLASS_STRUCT}>`],
];

/**
 * One row per campaign decision: each batch line's users with the class their code names (as the
 * DuckDB view of scripts/archive-query.ts expands them), for the named queries to read like single lines.
 */
export const campaignRows = (filter: string) => `WITH campaign AS (
  SELECT b.decidedat, b."at", b.policyversion, b.campaignid, b.channel, b.dt, u.userid,
    b.classtable[strpos('${CLASS_CODES}', substr(b.classes, CAST(u.i AS integer), 1))] AS class
  FROM tollgate_archive.decisions b
  CROSS JOIN UNNEST(flatten(transform(b.users, r -> sequence(r[1], r[2])))) WITH ORDINALITY AS u(userid, i)
  WHERE b.kind = 'campaign-batch' ${filter}
), campaign_rows AS (
  SELECT 'campaign' AS kind, decidedat, "at", campaignid, channel, dt, userid, class.segment AS segment,
    class.decision AS decision, class.cap AS cap, class.capmax AS capmax, class.capused AS capused,
    campaignid || ':' || channel || ':' || CAST(userid AS varchar) AS dedupeid
  FROM campaign
)`;

export interface ArchiveProps {
  /** Where the archive bucket's server access logs go. */
  accessLogs: s3.IBucket;
  removalPolicy: RemovalPolicy;
  /** How long decisions are kept. */
  retentionDays: number;
}

export class Archive extends Construct {
  readonly bucket: s3.Bucket;
  readonly deliveryStream: firehose.CfnDeliveryStream;
  /** The stream's name, as DECISION_ARCHIVE names it. */
  readonly streamName: string;
  readonly database: glue.CfnDatabase;
  readonly table: glue.CfnTable;
  readonly workGroup: athena.CfnWorkGroup;
  readonly namedQueries: athena.CfnNamedQuery[];

  constructor(scope: Construct, id: string, props: ArchiveProps) {
    super(scope, id);
    this.bucket = new s3.Bucket(this, "Bucket", {
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      encryption: s3.BucketEncryption.S3_MANAGED,
      enforceSSL: true,
      serverAccessLogsBucket: props.accessLogs,
      serverAccessLogsPrefix: "archive/",
      lifecycleRules: [
        { prefix: DEFAULT_ARCHIVE_PREFIX, expiration: Duration.days(props.retentionDays) },
        { prefix: "athena-results/", expiration: Duration.days(7) },
      ],
      removalPolicy: props.removalPolicy,
      autoDeleteObjects: props.removalPolicy === RemovalPolicy.DESTROY,
    });
    const account = Stack.of(this).account;
    // the stream's own role, with the actions AWS documents for an S3 destination and nothing else (the L2
    // construct grants read/write with wildcard actions)
    const role = new iam.Role(this, "DeliveryRole", {
      assumedBy: new iam.ServicePrincipal("firehose.amazonaws.com", {
        conditions: { StringEquals: { "aws:SourceAccount": account } },
      }),
    });
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: ["s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject"],
        resources: [this.bucket.arnForObjects("*")],
      }),
    );
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: ["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"],
        resources: [this.bucket.bucketArn],
      }),
    );
    this.deliveryStream = new firehose.CfnDeliveryStream(this, "Decisions", {
      deliveryStreamType: "DirectPut",
      deliveryStreamEncryptionConfigurationInput: { keyType: "AWS_OWNED_CMK" },
      extendedS3DestinationConfiguration: {
        bucketArn: this.bucket.bucketArn,
        roleArn: role.roleArn,
        // Firehose's arrival time, in UTC: the partitions the local writer uses for its write time
        prefix: `${DEFAULT_ARCHIVE_PREFIX}dt=!{timestamp:yyyy-MM-dd}/hour=!{timestamp:HH}/`,
        errorOutputPrefix: "archive-errors/!{firehose:error-output-type}/dt=!{timestamp:yyyy-MM-dd}/",
        fileExtension: ".ndjson.gz",
        compressionFormat: "GZIP",
        // a decision is queryable within a minute of its function's flush
        bufferingHints: { intervalInSeconds: 30, sizeInMBs: 64 },
      },
    });
    // the role's policy must exist before Firehose first delivers
    this.deliveryStream.node.addDependency(role);
    this.streamName = this.deliveryStream.ref;

    this.database = new glue.CfnDatabase(this, "Database", {
      catalogId: account,
      databaseInput: { name: "tollgate_archive", description: "Tollgate's decision archive" },
    });
    const location = `s3://${this.bucket.bucketName}/${DEFAULT_ARCHIVE_PREFIX}`;
    this.table = new glue.CfnTable(this, "Table", {
      catalogId: account,
      databaseName: "tollgate_archive",
      tableInput: {
        name: "decisions",
        tableType: "EXTERNAL_TABLE",
        parameters: {
          classification: "json",
          "projection.enabled": "true",
          "projection.dt.type": "date",
          "projection.dt.format": "yyyy-MM-dd",
          "projection.dt.range": "2026-01-01,NOW",
          "projection.dt.interval": "1",
          "projection.dt.interval.unit": "DAYS",
          "projection.hour.type": "integer",
          "projection.hour.range": "0,23",
          "projection.hour.digits": "2",
          "storage.location.template": `${location}dt=\${dt}/hour=\${hour}/`,
        },
        partitionKeys: [
          { name: "dt", type: "string" },
          { name: "hour", type: "string" },
        ],
        storageDescriptor: {
          location,
          inputFormat: "org.apache.hadoop.mapred.TextInputFormat",
          outputFormat: "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat",
          compressed: true,
          // field names are camelCase in the lines: the SerDe matches them without regard to case
          serdeInfo: {
            serializationLibrary: "org.openx.data.jsonserde.JsonSerDe",
            parameters: { "case.insensitive": "true" },
          },
          columns: COLUMNS.map(([name, type]) => ({ name, type })),
        },
      },
    });
    this.table.addResourceDependency(this.database);

    this.workGroup = new athena.CfnWorkGroup(this, "WorkGroup", {
      name: `${Stack.of(this).stackName}-archive`,
      description: "Tollgate's decision archive queries",
      recursiveDeleteOption: true,
      workGroupConfiguration: {
        enforceWorkGroupConfiguration: true,
        publishCloudWatchMetricsEnabled: true,
        resultConfiguration: {
          outputLocation: `s3://${this.bucket.bucketName}/athena-results/`,
          encryptionConfiguration: { encryptionOption: "SSE_S3" },
        },
      },
    });
    const query = (name: string, description: string, queryString: string) => {
      const named = new athena.CfnNamedQuery(this, name.replaceAll(" ", ""), {
        name,
        description,
        database: "tollgate_archive",
        workGroup: this.workGroup.name,
        queryString,
      });
      named.addResourceDependency(this.workGroup);
      return named;
    };
    this.namedQueries = [
      query(
        "Why was user X capped",
        "A user's campaign and frequency decisions of the last 8 days, newest first, with the cap that bit; set the user ID",
        `${campaignRows(
          // only the lines whose runs hold the user are expanded
          `AND cardinality(filter(b.users, r -> 17 BETWEEN r[1] AND r[2])) > 0
    AND b.dt >= date_format(current_date - INTERVAL '8' DAY, '%Y-%m-%d')`,
        )}
SELECT from_unixtime("at" / 1e3) AS sent_at, campaignid, channel, segment, decision, cap, capmax, capused, dedupeid
FROM (
  SELECT "at", campaignid, channel, segment, decision, cap, capmax, capused, dedupeid FROM campaign_rows WHERE userid = 17
  UNION ALL
  SELECT "at", campaignid, channel, segment, decision, cap, capmax, capused, dedupeid
  FROM tollgate_archive.decisions
  WHERE userid = 17 AND kind = 'frequency' AND dt >= date_format(current_date - INTERVAL '8' DAY, '%Y-%m-%d')
)
ORDER BY "at" DESC`,
      ),
      query(
        "Sent and capped by campaign segment and day",
        "Each campaign's sends by segment and day: sent (allowed or exempt), capped, and repeats, one per send identity",
        `${campaignRows("")}
SELECT campaignid, segment, dt AS day,
  count(DISTINCT CASE WHEN decision IN ('allowed', 'exempt') THEN dedupeid END) AS sent,
  count(DISTINCT CASE WHEN decision = 'capped' THEN dedupeid END) AS capped,
  count(DISTINCT CASE WHEN decision = 'duplicate' THEN dedupeid END) AS repeats
FROM campaign_rows
GROUP BY campaignid, segment, dt
ORDER BY day DESC, campaignid, segment`,
      ),
    ];
  }

  /** The functions' right to put records on the stream (firehose:PutRecord, PutRecordBatch). */
  grantPut(grantee: iam.IGrantable): iam.Grant {
    return iam.Grant.addToPrincipal({
      grantee,
      actions: ["firehose:PutRecord", "firehose:PutRecordBatch"],
      resourceArns: [this.deliveryStream.attrArn],
    });
  }
}
