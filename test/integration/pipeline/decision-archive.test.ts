// The decision archive end to end: the local stack's consumer and check API archive every decision to the
// emulator's bucket as gzipped NDJSON under dt=/hour= partitions, DuckDB reads those objects back, and
// `why` / `campaign report` answer from them with the engine's counts. Archiving never fails a decision:
// with an archive that cannot be written, every send is still decided and forwarded, the loss counted.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { policyInService, pushCampaign } from "../../../functions/app/operator-actions.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { DEFAULT_ARCHIVE_PREFIX } from "../../../functions/core/shared/decision-archive.ts";
import { campaignReport, campaignReportText, why, whyText } from "../../../scripts/archive-answers.ts";
import { type OpenArchive, openArchive } from "../../../scripts/archive-query.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import {
  athenaOnDuckDb,
  DIALECT,
  deployedArchiveSql,
  QUERY_USER_ID,
  toDuckDb,
} from "../../support/athena-on-duckdb.ts";
import { cliOutput } from "../../support/cli-output.ts";
import { clientsOf, drainDelivery, testStack, uploadRules } from "../../support/pipeline.ts";
import { signedFetch } from "../../support/signed-fetch.ts";

const T0 = Date.UTC(2026, 10, 30, 9, 30);
const HOUR = 3_600_000;
const policy = {
  version: "archive.1",
  channels: ["email", "push"],
  segments: [{ name: "new", bitmap: "segments/new.roaring", caps: { push: [{ window: "1d", max: 1 }] } }],
  default: { name: "unsegmented", caps: { "*": [{ window: "7d", max: 2 }] } },
};
const users = Array.from({ length: 100 }, (_, i) => i);
const newUsers = users.slice(0, 50);

describe("the decision archive on the local stack", () => {
  let stack: LocalStack;
  const clock = fixedClock(T0);
  const totals = new Map<
    string,
    Record<string, { allowed: number; capped: number; cappedBy: Record<string, number> }>
  >();
  let archive: OpenArchive;

  beforeAll(async () => {
    stack = await testStack({
      clock,
      onOutcome: (outcome) => {
        if (outcome.kind !== "forwarded") return;
        const campaign = totals.get(outcome.campaignId) ?? {};
        for (const [segment, t] of Object.entries(outcome.result.totals)) {
          const into = campaign[segment] ?? { allowed: 0, capped: 0, cappedBy: {} };
          campaign[segment] = into;
          into.allowed += t.allowed;
          into.capped += t.capped;
          for (const [cap, n] of Object.entries(t.cappedBy)) into.cappedBy[cap] = (into.cappedBy[cap] ?? 0) + n;
        }
        totals.set(outcome.campaignId, campaign);
      },
    });
    await uploadRules(stack, policy, { new: newUsers });
    stack.poller.start();
    for (const [i, campaignId] of ["c1", "c2", "c3"].entries()) {
      clock.set(T0 + i * HOUR);
      await pushCampaign(stack.sqs, stack.endpoints.campaignQueueUrl, {
        campaignId,
        channel: "push",
        userIds: users,
        usersPerMessage: 30,
      });
      await stack.poller.drained();
      await drainDelivery(stack);
    }
    await stack.poller.stop();
    // no flush here: each invocation wrote its decisions before it returned
    archive = await openArchive({
      s3: clientsOf(stack).s3,
      bucket: stack.endpoints.bucket,
      prefix: DEFAULT_ARCHIVE_PREFIX,
    });
  });
  afterAll(async () => {
    archive?.close();
    await stack.stop();
  });

  it("holds every campaign decision once, partitioned by the hour it was written", async () => {
    const rows = await archive.query<{ campaignId: string; dt: string; hour: string; n: number }>(
      `SELECT campaignId, dt, hour, CAST(count(*) AS INTEGER) AS n FROM decisions WHERE kind = 'campaign'
       GROUP BY ALL ORDER BY campaignId`,
    );
    expect(rows).toEqual([
      { campaignId: "c1", dt: "2026-11-30", hour: "09", n: 100 },
      { campaignId: "c2", dt: "2026-11-30", hour: "10", n: 100 },
      { campaignId: "c3", dt: "2026-11-30", hour: "11", n: 100 },
    ]);
    const [line] = await archive.query(
      "SELECT * EXCLUDE (dt, hour) FROM decisions WHERE campaignId = 'c2' AND userId = 7",
    );
    expect(line).toMatchObject({
      kind: "campaign",
      campaignId: "c2",
      channel: "push",
      segment: "new",
      decision: "capped",
      reason: "cap",
      cap: "push:1d",
      capChannel: "push",
      capMax: 1,
      capUsed: 1,
      dedupeId: "c2:push:7",
      policyVersion: "archive.1",
    });
  });

  it("reports a campaign by segment and cap with the consumer's own totals", async () => {
    for (const campaignId of ["c1", "c2", "c3"]) {
      const report = await campaignReport(archive, campaignId);
      const expected = totals.get(campaignId) ?? {};
      expect(
        Object.fromEntries(
          report.segments.map((s) => [s.segment, { allowed: s.sent, capped: s.capped, cappedBy: s.cappedBy }]),
        ),
      ).toEqual(expected);
    }
    const c3 = await campaignReport(archive, "c3");
    expect(c3.total).toEqual({
      sent: 0,
      capped: 100,
      displaced: 0,
      duplicate: 0,
      exempt: 0,
      quiet: 0,
      deferred: 0,
      dropped: 0,
    });
  });

  it("explains a capped user with the sends that filled the window, counts equal to the engine's", async () => {
    const inService = await policyInService(clientsOf(stack).s3, stack.endpoints.bucket);
    const newUser = await why(archive, { userId: 7, campaignId: "c3" }, inService);
    expect(newUser?.decision.decision).toBe("capped");
    expect(newUser?.caps).toEqual([
      {
        cap: "push:1d",
        channel: "push",
        windowMs: 86_400_000,
        max: 1,
        before: 1,
        after: 1,
        bit: true,
        sends: [{ campaignId: "c1", channel: "push", at: T0 }],
      },
    ]);
    const other = await why(archive, { userId: 70, campaignId: "c3" }, inService);
    expect(other?.caps.map(({ cap, before, after, bit }) => ({ cap, before, after, bit }))).toEqual([
      { cap: "*:7d", before: 2, after: 2, bit: true },
    ]);
    expect(other?.caps[0]?.sends.map((send) => send.campaignId)).toEqual(["c1", "c2"]);
    // the engine's own figures for the same users now: a peek counts nothing
    for (const [userId, answer] of [
      [7, newUser],
      [70, other],
    ] as const) {
      const response = await signedFetch(`${stack.endpoints.functionUrl}/v1/frequency`, {
        method: "POST",
        body: JSON.stringify({ userId, channel: "push", consume: false }),
      });
      const { windows } = (await response.json()) as { windows: { channel: string; window: string; used: number }[] };
      expect(windows.map((w) => ({ cap: `${w.channel}:${w.window}`, used: w.used }))).toEqual(
        answer?.caps.map((cap) => ({ cap: cap.cap, used: cap.after })),
      );
    }
  });

  it("archives each capped send's used count at the decision, equal to the engine's count then", async () => {
    const capped = await archive.query<{ userId: number; at: number; cap: string; capMax: number; capUsed: number }>(
      `SELECT userId, "at", cap, capMax, capUsed FROM decisions WHERE kind = 'campaign' AND decision = 'capped'
       ORDER BY "at", userId`,
    );
    // c2 caps the 50 new users (push:1d), c3 caps all 100 (the new by push:1d, the rest by *:7d)
    expect(capped).toHaveLength(150);
    const engine: { cap: string; capUsed: number }[] = [];
    for (const row of capped) {
      // a peek at the decision's own send time: nothing the later campaigns did counts there (all capped)
      const response = await signedFetch(`${stack.endpoints.functionUrl}/v1/frequency`, {
        method: "POST",
        body: JSON.stringify({ userId: row.userId, channel: "push", at: row.at, consume: false }),
      });
      const { windows } = (await response.json()) as { windows: { channel: string; window: string; used: number }[] };
      const bit = windows.find((w) => `${w.channel}:${w.window}` === row.cap);
      engine.push({ cap: row.cap, capUsed: bit?.used ?? -1 });
    }
    expect(capped.map(({ cap, capUsed }) => ({ cap, capUsed }))).toEqual(engine);
    expect(capped.every((row) => row.capUsed === row.capMax)).toBe(true);
  });

  it("runs the stack's Athena named queries with DuckDB over the same objects: why and report agree", async () => {
    const deployed = deployedArchiveSql();
    const whySql = deployed.queries["Why was user X capped"] as string;
    const reportSql = deployed.queries["Sent and capped by campaign segment and day"] as string;
    const today = new Date(clock.now()).toISOString().slice(0, 10);
    // the mapping is DIALECT's renames and the two parameters, nothing else: undone, it gives the deployed text
    for (const sql of [whySql, reportSql]) {
      for (const duckdb of Object.values(DIALECT)) expect(sql).not.toMatch(new RegExp(`\\b${duckdb}\\(`));
      let undone = toDuckDb(sql, { userId: 7, today }).replaceAll(`DATE '${today}'`, "current_date");
      undone = undone.replaceAll(/\b7\b/g, String(QUERY_USER_ID));
      for (const [athena, duckdb] of Object.entries(DIALECT))
        undone = undone.replaceAll(new RegExp(`\\b${duckdb}\\(`, "g"), `${athena}(`);
      expect(undone).toBe(sql);
    }
    // docs/archive.md's table of renames is DIALECT, row for row
    const doc = readFileSync(new URL("../../../docs/archive.md", import.meta.url), "utf8");
    const documented = [...doc.matchAll(/^\| `(\w+)` +\| `(\w+)` +\|$/gm)].map(([, athena, duckdb]) => [
      athena,
      duckdb,
    ]);
    expect(documented).toEqual(Object.entries(DIALECT));
    const engine = await athenaOnDuckDb(deployed, archive.files as string);
    try {
      const inService = await policyInService(clientsOf(stack).s3, stack.endpoints.bucket);
      for (const userId of [7, 70]) {
        const rows = await engine.run<{
          sent_at: string;
          campaignid: string;
          decision: string;
          cap: string | null;
          capused: string | null;
        }>(toDuckDb(whySql, { userId, today }));
        const answer = await why(archive, { userId }, inService);
        const [latest] = rows;
        expect({
          at: Date.parse(latest?.sent_at ?? ""),
          campaignId: latest?.campaignid,
          decision: latest?.decision,
          cap: latest?.cap,
          capUsed: latest?.capused === null ? null : Number(latest?.capused),
        }).toEqual({
          at: answer?.decision.at,
          campaignId: answer?.decision.campaignId,
          decision: answer?.decision.decision,
          cap: answer?.decision.cap,
          capUsed: answer?.decision.capMax,
        });
        // the sends that filled the bitten window: the query's allowed rows before the decision
        const bit = answer?.caps.find((cap) => cap.bit);
        const filled = rows
          .filter((row) => row.decision === "allowed")
          .map((row) => ({ campaignId: row.campaignid, at: Date.parse(row.sent_at) }))
          .filter((send) => send.at > (answer?.decision.at ?? 0) - (bit?.windowMs ?? 0))
          .reverse();
        expect(filled).toEqual(bit?.sends.map(({ campaignId, at }) => ({ campaignId, at })));
      }
      const report = await engine.run<{
        campaignid: string;
        segment: string;
        sent: string;
        capped: string;
        repeats: string;
      }>(toDuckDb(reportSql, { userId: QUERY_USER_ID, today }));
      for (const campaignId of ["c1", "c2", "c3"]) {
        const cli = await campaignReport(archive, campaignId);
        expect(
          report
            .filter((row) => row.campaignid === campaignId)
            .map((row) => ({
              segment: row.segment,
              sent: Number(row.sent),
              capped: Number(row.capped),
              duplicate: Number(row.repeats),
            }))
            .sort((a, b) => a.segment.localeCompare(b.segment)),
        ).toEqual(
          cli.segments
            .map(({ segment, sent, capped, duplicate }) => ({ segment, sent, capped, duplicate }))
            .sort((a, b) => a.segment.localeCompare(b.segment)),
        );
      }
      expect(report.map((row) => row.campaignid).sort()).toEqual(["c1", "c1", "c2", "c2", "c3", "c3"]);
    } finally {
      engine.close();
    }
  });

  it("archives check API decisions: a frequency check with the cap and its used count, a rate-limit check", async () => {
    await signedFetch(`${stack.endpoints.functionUrl}/v1/frequency`, {
      method: "POST",
      body: JSON.stringify({ userId: 99, channel: "email" }),
    });
    await signedFetch(`${stack.endpoints.functionUrl}/v1/limit`, {
      method: "POST",
      body: JSON.stringify({ key: "archive:login", algorithm: "fixed-window", max: 5, windowMs: 60_000 }),
    });
    for (const environment of stack.checkApiEnvironments) await environment.archive?.flush();
    const fresh = await openArchive({
      s3: clientsOf(stack).s3,
      bucket: stack.endpoints.bucket,
      prefix: DEFAULT_ARCHIVE_PREFIX,
    });
    try {
      const [check] = await fresh.query("SELECT * FROM decisions WHERE kind = 'frequency' AND userId = 99 AND consume");
      expect(check).toMatchObject({
        channel: "email",
        decision: "capped",
        cap: "*:7d",
        capMax: 2,
        capUsed: 2,
        consume: true,
      });
      const [limit] = await fresh.query("SELECT * FROM decisions WHERE kind = 'limit' AND key = 'archive:login'");
      expect(limit).toMatchObject({ algorithm: "fixed-window", decision: "allowed", limit: 5, remaining: 4 });
    } finally {
      fresh.close();
    }
  });

  it("answers `tollgate why` and `tollgate campaign report` from the CLI", async () => {
    const aws = ["--endpoint", stack.endpoints.awsEndpoint, "--bucket", stack.endpoints.bucket];
    const explained = await cliOutput(["why", ...aws, "--user", "7", "--campaign", "c3"]);
    expect(explained.code).toBe(0);
    expect(explained.text).toContain(
      "user 7, campaign c3, channel push: capped at 2026-11-30T11:30:00.000Z (segment new, policy archive.1)",
    );
    expect(explained.text).toContain("capped by push:1d (max 1): 1 sends in the window before, 1 after");
    expect(explained.text).toContain("2026-11-30T09:30:00.000Z  c1  push");
    const report = await cliOutput(["campaign", "report", ...aws, "c2"]);
    expect(report.code).toBe(0);
    expect(report.text).toMatch(/new\s+0\s+50\s+0\s+░{40}/);
    expect(report.text).toMatch(/unsegmented\s+50\s+0\s+0\s+█{40}/);
    expect(report.text).toContain("capped by push:1d: 50");
    const nobody = await cliOutput(["why", ...aws, "--user", "123456"]);
    expect(nobody.text).toContain("no archived decision for user 123456");
  });
});

describe("an archive that cannot be written", () => {
  let stack: LocalStack;
  beforeAll(async () => {
    stack = await testStack({ environment: { DECISION_ARCHIVE: "s3://no-such-archive-bucket/decisions/" } });
    await uploadRules(stack, policy, { new: newUsers });
  });
  afterAll(async () => {
    await stack.stop();
  });

  it("fails no decision: every send is forwarded, and every lost line counted", async () => {
    stack.poller.start();
    await pushCampaign(stack.sqs, stack.endpoints.campaignQueueUrl, {
      campaignId: "lost",
      channel: "push",
      userIds: users,
    });
    await stack.poller.drained();
    await stack.poller.stop();
    const sends = (await drainDelivery(stack)).flatMap((message) => message.sends);
    expect(sends).toHaveLength(100);
    expect(stack.poller.stats.failedRecords).toBe(0);
    expect(stack.consumer.archive?.stats()).toEqual({ archived: 0, lost: 100, pending: 0 });
  });
});

describe("a campaign held by quiet hours, archived", () => {
  let stack: LocalStack;
  let archive: OpenArchive;
  const quietPolicy = {
    ...policy,
    version: "archive.quiet",
    defaultZone: "Asia/Tokyo",
    quietHours: { push: [{ from: "18:00", to: "08:00" }] },
  };
  beforeAll(async () => {
    // T0 is 18:30 in Tokyo: inside the night until 08:00 there, 23:00 UTC
    stack = await testStack({ clock: fixedClock(T0) });
    await uploadRules(stack, quietPolicy, { new: newUsers });
    stack.poller.start();
    await pushCampaign(stack.sqs, stack.endpoints.campaignQueueUrl, {
      campaignId: "night",
      channel: "push",
      userIds: users,
    });
    await stack.poller.drained();
    await stack.poller.stop();
    archive = await openArchive({
      s3: clientsOf(stack).s3,
      bucket: stack.endpoints.bucket,
      prefix: DEFAULT_ARCHIVE_PREFIX,
    });
  });
  afterAll(async () => {
    archive?.close();
    await stack.stop();
  });

  it("reports the held sends by segment and zone, and why names the quiet hours and when the user is eligible", async () => {
    const report = await campaignReport(archive, "night");
    expect(report.total).toEqual({
      sent: 0,
      capped: 0,
      displaced: 0,
      duplicate: 0,
      exempt: 0,
      quiet: 100,
      deferred: 0,
      dropped: 0,
    });
    expect(
      Object.fromEntries(report.segments.map((s) => [s.segment, { quiet: s.quiet, heldByZone: s.heldByZone }])),
    ).toEqual({
      new: { quiet: 50, heldByZone: { "Asia/Tokyo": { quiet: 50, deferred: 0, dropped: 0 } } },
      unsegmented: { quiet: 50, heldByZone: { "Asia/Tokyo": { quiet: 50, deferred: 0, dropped: 0 } } },
    });
    const answer = await why(archive, { userId: 7, campaignId: "night" });
    expect(answer?.decision).toMatchObject({
      decision: "quiet",
      reason: "quiet_hours",
      zone: "Asia/Tokyo",
      eligibleAt: Date.UTC(2026, 10, 30, 23, 0),
    });
    expect(whyText(answer, { userId: 7 })).toContain(
      "held by quiet hours in Asia/Tokyo: eligible at 2026-11-30T23:00:00.000Z (not sent)",
    );
    expect(campaignReportText(report)).toContain("quiet hours in Asia/Tokyo: 50 not sent, 0 deferred, 0 dropped");
  });
});
