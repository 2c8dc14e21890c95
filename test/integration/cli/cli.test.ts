// The operator CLI: outputs and exit codes a script can rely on.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import { CreateQueueCommand } from "@aws-sdk/client-sqs";
import { afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { parseBitmap } from "../../../functions/core/capping/segment-index.ts";
import { runCli } from "../../../scripts/cli.ts";
import { useAwsEmulator } from "../../support/aws-emulator.ts";

let dir: string;
let out: string[];
let err: string[];
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "tollgate-cli-"));
  out = [];
  err = [];
  vi.spyOn(console, "log").mockImplementation((...args) => void out.push(args.join(" ")));
  vi.spyOn(console, "error").mockImplementation((...args) => void err.push(args.join(" ")));
  vi.spyOn(process.stderr, "write").mockImplementation((text) => {
    err.push(String(text));
    return true;
  });
});
afterEach(() => vi.restoreAllMocks());

const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

describe("tollgate CLI", () => {
  it("builds portable bitmaps from ID files", async () => {
    const code = await runCli([
      "segments",
      "build",
      "--out",
      join(dir, "out"),
      `new=${file("new.txt", "1\n2\n3\n")}`,
      `active=${file("a.txt", "10, 11")}`,
    ]);
    expect(code).toBe(0);
    expect(parseBitmap(readFileSync(join(dir, "out", "new.roaring")), "new").toArray()).toEqual([1, 2, 3]);
    expect(out.join("\n")).toContain("active.roaring: 2 users");
  });

  it("refuses overlapping segments with exit code 1 and the overlap count", async () => {
    const code = await runCli([
      "segments",
      "build",
      "--out",
      dir,
      `a=${file("a.txt", "1 2 3")}`,
      `b=${file("b.txt", "3 2")}`,
    ]);
    expect(code).toBe(1);
    expect(err.join("")).toContain('2 user IDs in both "a" and "b"');
  });

  it("names the file and token of a bad user ID", async () => {
    const path = file("bad.txt", "1\nabc\n");
    expect(await runCli(["segments", "build", "--out", dir, `a=${path}`])).toBe(1);
    expect(err.join("")).toContain(`${path}: "abc" is not a user ID`);
  });

  it("validates a policy: 0 when valid, 1 with every problem by field", async () => {
    const good = {
      version: "1",
      channels: ["push"],
      segments: [],
      default: { name: "rest", caps: { push: [{ window: "1d", max: 1 }] } },
    };
    expect(await runCli(["policy", "validate", file("good.json", JSON.stringify(good))])).toBe(0);
    expect(out.join("")).toContain("valid (version 1; channels push; segments rest)");
    const bad = { ...good, default: { name: "rest", caps: { push: [{ window: "1w", max: -1 }] } } };
    expect(await runCli(["policy", "validate", file("bad.json", JSON.stringify(bad))])).toBe(1);
    expect(err.join("")).toContain('default.caps.push[0].window: expected e.g. "7d"');
    expect(err.join("")).toContain("default.caps.push[0].max:");
  });

  it("exits 1 for a missing file and 2 for a usage error", async () => {
    expect(await runCli(["policy", "validate", join(dir, "missing.json")])).toBe(1);
    expect(await runCli(["policy", "frobnicate"])).toBe(2);
    expect(await runCli(["segments", "build", "a=b.txt"])).toBe(2);
  });
});

describe("tollgate CLI against S3 and SQS (fauxqs)", () => {
  const emulator = useAwsEmulator();
  let aws: string[];
  let queueUrl: string;
  beforeAll(async () => {
    aws = ["--endpoint", emulator.endpoint, "--region", "us-east-1"];
    await emulator.s3.send(new CreateBucketCommand({ Bucket: "cli" }));
    queueUrl = (await emulator.sqs.send(new CreateQueueCommand({ QueueName: "cli-campaign" }))).QueueUrl as string;
  });

  it("uploads checked bitmaps and a valid policy, and refuses bad ones without uploading", async () => {
    await runCli(["segments", "build", "--out", dir, `new=${file("n.txt", "1 2 3")}`]);
    expect(await runCli(["segments", "upload", ...aws, "--bucket", "cli", join(dir, "new.roaring")])).toBe(0);
    expect(out.join("\n")).toContain("uploaded s3://cli/segments/new.roaring");
    expect(await runCli(["segments", "upload", ...aws, "--bucket", "cli", file("bad.roaring", "junk")])).toBe(1);
    expect(err.join("")).toContain("bad.roaring: not a valid portable roaring bitmap");

    const good = {
      version: "cli.1",
      channels: ["push"],
      segments: [{ name: "new", bitmap: "segments/new.roaring", caps: {} }],
      default: { name: "rest", caps: {} },
    };
    expect(await runCli(["policy", "upload", ...aws, "--bucket", "cli", file("p.json", JSON.stringify(good))])).toBe(0);
    expect(
      await runCli([
        "policy",
        "upload",
        ...aws,
        "--bucket",
        "cli",
        file("q.json", JSON.stringify({ ...good, version: "" })),
      ]),
    ).toBe(1);
    expect(err.join("")).toContain("version:");
    expect(
      await runCli(["policy", "upload", ...aws, "--bucket", "no-such-bucket", file("r.json", JSON.stringify(good))]),
    ).toBe(1);
    expect(await runCli(["policy", "upload", ...aws, file("s.json", JSON.stringify(good))])).toBe(1);
    expect(err.join("")).toContain("--bucket: required (or --local)");
  });

  it("pushes a campaign as batch messages and tails what arrives", async () => {
    const code = await runCli([
      "campaign",
      "push",
      ...aws,
      "--queue-url",
      queueUrl,
      "--bucket",
      "cli",
      "--campaign",
      "cli-1",
      "--channel",
      "push",
      "--range",
      "10-2509",
      "--per-message",
      "1000",
      "--payload",
      '{"t":1}',
    ]);
    expect(err.join("")).toBe("");
    expect(code).toBe(0);
    expect(out.join("\n")).toContain("pushed campaign cli-1: 2500 users in 3 messages");
    out.length = 0;
    expect(await runCli(["delivery", "tail", ...aws, "--queue-url", queueUrl, "--max", "10", "--remove"])).toBe(0);
    const lines = out.map((line) => JSON.parse(line) as { campaignId: string; userIds: number[]; payload: unknown });
    expect(lines.map((m) => m.userIds.length).sort()).toEqual([1000, 1000, 500]);
    expect(lines.every((m) => m.campaignId === "cli-1")).toBe(true);

    expect(
      await runCli([
        "campaign",
        "push",
        ...aws,
        "--queue-url",
        queueUrl,
        "--bucket",
        "cli",
        "--campaign",
        "bad id",
        "--channel",
        "push",
        "--range",
        "1-2",
      ]),
    ).toBe(1);
    expect(err.join("")).toContain("campaignId: expected printable ASCII without spaces");
    expect(
      await runCli([
        "campaign",
        "push",
        ...aws,
        "--queue-url",
        queueUrl,
        "--bucket",
        "cli",
        "--campaign",
        "x",
        "--channel",
        "push",
        "--range",
        "5-1",
      ]),
    ).toBe(1);
    expect(err.join("")).toContain("--range: expected FROM-TO");
    expect(
      await runCli(["campaign", "push", ...aws, "--queue-url", queueUrl, "--campaign", "x", "--channel", "push"]),
    ).toBe(1);
    expect(await runCli(["campaign", "push", ...aws, "--campaign", "x", "--channel", "push", "--range", "1-2"])).toBe(
      1,
    );
  });
});
