// `tollgate segments build|upload`: segment bitmaps (CRoaring portable format) from files of user IDs, and
// their upload to the config bucket.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import type { Command } from "commander";
import { publishSegments } from "../../functions/app/operator-actions.ts";
import { buildSegments, parseUserIdList } from "../../functions/core/capping/segment-builder.ts";
import { type AwsOptions, aws, required, withAws } from "./aws-options.ts";
import { segmentFiles } from "./option-values.ts";

export function addSegmentsCommands(program: Command): void {
  const segments = program.command("segments").description("segment bitmaps (CRoaring portable format)");
  segments
    .command("build")
    .description("build one bitmap per segment from files of user IDs (one per line, or comma/space separated)")
    .requiredOption("--out <dir>", "directory for <name>.roaring files")
    .argument("<segment=file...>", "segment name and the file of its user IDs")
    .action((pairs: string[], options: { out: string }) => {
      // checked before any file is read: a duplicate would overwrite the first, `../x` write outside --out
      const members = segmentFiles(pairs).map(({ name, file }) => ({
        name,
        userIds: parseUserIdList(readFileSync(file, "utf8"), file),
      }));
      const built = buildSegments(members);
      mkdirSync(options.out, { recursive: true });
      for (const { name, userIds } of members) {
        const path = join(options.out, `${name}.roaring`);
        const bytes = built.get(name) as Uint8Array;
        writeFileSync(path, bytes);
        console.log(`${path}: ${new Set(userIds).size} users, ${bytes.length} bytes`);
      }
    });

  withAws(
    segments
      .command("upload")
      .description("check and upload bitmaps to s3://BUCKET/segments/<file name>")
      .option("--bucket <name>", "the config bucket")
      .option(
        "--allow-shrink",
        "accept these uploads even when they shrink a segment by more than SEGMENT_MAX_SHRINK_PERCENT (writes a force marker)",
      )
      .argument("<file...>", "portable roaring bitmap files"),
  ).action(async (files: string[], options: AwsOptions & { bucket?: string; allowShrink?: boolean }) => {
    const { s3, local } = aws(options);
    const bucket = required(options.bucket, local?.bucket, "--bucket");
    // every file is checked before the first upload: a bad one uploads nothing
    const segments = files.map((file) => ({ name: basename(file), bytes: readFileSync(file), source: file }));
    for (const { key, bytes } of await publishSegments(s3, bucket, segments, {
      allowShrink: options.allowShrink === true,
    })) {
      console.log(`uploaded s3://${bucket}/${key} (${bytes} bytes)${options.allowShrink ? ", shrink allowed" : ""}`);
    }
  });
}
