// The console in a real browser (Debian's chromium, driven by playwright-core) over the local stack seeded
// with console-sample.ts: every page of the registry loads; the rule form names the field of a bad value
// beside it; a save lands in the policy and in Redis; a second editor's save is refused, never lost; a
// redrive moves the dead letter to the campaign queue; why answers the engine's decision; the what-if
// predicts against the live caps and writes nothing.
import { spawn } from "node:child_process";
import { get as httpGet } from "node:http";
import { ReceiveMessageCommand } from "@aws-sdk/client-sqs";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readPolicy } from "../../../functions/app/quota-actions.ts";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { launchChromium } from "../../../scripts/console/chromium.ts";
import { consoleContext } from "../../../scripts/console/console-context.ts";
import {
  SAMPLE_CAMPAIGNS,
  SAMPLE_DEAD_LETTER,
  SAMPLE_NEW_USERS,
  SAMPLE_QUOTA,
  SAMPLE_USERS,
  seedConsoleSample,
} from "../../../scripts/console/console-sample.ts";
import { type ConsoleServer, startConsoleServer } from "../../../scripts/console/console-server.ts";
import { CONSOLE_PAGES } from "../../../scripts/console/page-registry.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { serverClockNow, uniqueNamespace } from "../../support/cluster.ts";
import { clientsOf, testStack } from "../../support/pipeline.ts";
import { signedFetch } from "../../support/signed-fetch.ts";
import { namespaceSnapshot } from "../../support/store-snapshot.ts";

const HOUR = 3_600_000;
// the second campaign and the sample's quota sync at the cluster's now: the usage it reported is in the
// rule's 60 s window when the console reads it
const T0 = serverClockNow() - HOUR;
const namespace = uniqueNamespace();
const clock = fixedClock(T0);
let stack: LocalStack;
let server: ConsoleServer;
let browser: Browser;
/** What the engine decided for each campaign's "new" users: capped sends by the cap that bit. */
const cappedNew = new Map<string, Record<string, number>>();

beforeAll(async () => {
  stack = await testStack({
    clock,
    // the check API containers keep the policy they loaded: a rule reaches them only through Redis
    environment: { KEY_NAMESPACE: namespace, REFRESH_SECONDS: "3600" },
    onOutcome: (outcome) => {
      if (outcome.kind !== "forwarded") return;
      const into = cappedNew.get(outcome.campaignId) ?? {};
      for (const [cap, n] of Object.entries(outcome.result.totals.new?.cappedBy ?? {}))
        into[cap] = (into[cap] ?? 0) + n;
      cappedNew.set(outcome.campaignId, into);
    },
  });
  await seedConsoleSample(stack, { beforeCampaign: (i) => clock.set(T0 + i * HOUR) });
  const { endpoints } = stack;
  server = await startConsoleServer(
    consoleContext({
      endpoint: endpoints.awsEndpoint,
      region: endpoints.region,
      bucket: endpoints.bucket,
      queueUrl: endpoints.deadLetterQueueUrl,
      to: endpoints.campaignQueueUrl,
      redis: endpoints.redis.slice(0, 1),
      namespace,
    }),
    CONSOLE_PAGES,
  );
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await server?.stop();
  await stack?.stop();
});

async function open(id: string): Promise<Page> {
  const page = await browser.newPage();
  await page.goto(`${server.url}#${id}`);
  await page.locator(`[data-page="${id}"][data-ready]`).waitFor();
  return page;
}

const policyNow = () => readPolicy(clientsOf(stack).s3, stack.endpoints.bucket);

describe("the console in Chromium", () => {
  it("loads every page of the registry with its data and no error", async () => {
    const expected: Record<string, string> = {
      policy: "Policy console.1",
      usage: SAMPLE_QUOTA.rule,
      reports: "Campaign flash-sale",
      why: "Why?",
      "what-if": "Predict",
      dlq: 'channel: unknown channel "fax"',
    };
    expect(CONSOLE_PAGES.map((p) => p.id).sort()).toEqual(Object.keys(expected).sort());
    for (const { id, title } of CONSOLE_PAGES) {
      const page = await open(id);
      await expect(page.locator("h1").textContent()).resolves.toBe(title);
      expect(await page.getByRole("alert").count(), id).toBe(0);
      expect(await page.locator("main").textContent(), id).toContain(expected[id]);
      await page.close();
    }
  });

  it("shows a key's live usage as the store holds it", async () => {
    const page = await open("usage");
    await page.getByLabel("rule").selectOption(SAMPLE_QUOTA.rule);
    await page.getByLabel("key").fill(SAMPLE_QUOTA.key);
    await page.getByRole("button", { name: "Watch" }).click();
    const used = Number(await page.locator("[data-window] td").nth(1).textContent());
    // the sample's client reported 120 and holds the allowance its sync reserved
    expect(used).toBeGreaterThanOrEqual(SAMPLE_QUOTA.used);
    expect(used).toBeLessThanOrEqual(500);
    await page.close();
  });

  it("names the field of a bad value beside it, and saves nothing", async () => {
    const before = (await policyNow()).text;
    const page = await open("policy");
    await page.getByRole("button", { name: `Edit ${SAMPLE_QUOTA.rule}` }).click();
    await page.getByLabel("limits").fill("60s=0");
    await page.getByLabel("lease ms").fill("1e2");
    await page.getByRole("button", { name: "Save rule" }).click();
    await page.locator("#error-leaseMs", { hasText: 'leaseMs: expected a decimal integer, got "1e2"' }).waitFor();
    await page.getByLabel("lease ms").fill("1000");
    await page.getByRole("button", { name: "Save rule" }).click();
    // the schema's problem, the CLI's `quotas[0].limits[0].max`, beside the limits field
    await page.locator("#error-limits", { hasText: "limits[0].max" }).waitFor();
    expect(await page.locator("#field-limits").getAttribute("aria-invalid")).toBe("true");
    expect(await page.locator("#error-leaseMs").textContent()).toBe("");
    // and the document editor names the field of an invalid policy
    const document = JSON.parse(before);
    document.default.caps.email[0].window = "1w";
    await page.getByLabel("policy JSON").fill(JSON.stringify(document, null, 2));
    await page.getByRole("button", { name: "Save policy" }).click();
    await page.getByLabel("policy problems").getByText("default.caps.email[0].window").waitFor();
    expect((await policyNow()).text).toBe(before);
    await page.close();
  });

  it("saves a rule into the policy and into Redis: a client's next sync gets it without a policy reload", async () => {
    const page = await open("policy");
    await page.getByRole("button", { name: `Edit ${SAMPLE_QUOTA.rule}` }).click();
    await page.getByLabel("limits").fill("60s=800");
    await page.getByRole("button", { name: "Save rule" }).click();
    await page.getByText("written to Redis").waitFor();
    expect((await policyNow()).policy.quotas.get(SAMPLE_QUOTA.rule)?.rule.limits[0]?.max).toBe(800);
    const sync = await signedFetch(`${stack.endpoints.functionUrl}/v1/quotas/sync`, {
      method: "POST",
      body: JSON.stringify({
        instanceId: "browser-test",
        rule: SAMPLE_QUOTA.rule,
        group: 0,
        seq: 1,
        configVersion: "",
        entries: [{ key: "someone-else", usage: [], refunds: [], offered: 0, want: 0 }],
      }),
    });
    expect(await sync.json()).toMatchObject({ status: "applied", rule: { limits: [{ windowMs: 60_000, max: 800 }] } });
    await page.close();
  });

  it("refuses a second editor's save after the first's as changed since opened, and keeps the first's", async () => {
    const [first, second] = [await open("policy"), await open("policy")];
    for (const page of [first, second]) await page.getByRole("button", { name: `Edit ${SAMPLE_QUOTA.rule}` }).click();
    await first.getByLabel("limits").fill("60s=900");
    await first.getByRole("button", { name: "Save rule" }).click();
    await first.getByText("saved as policy").waitFor();
    await second.getByLabel("limits").fill("60s=100");
    await second.getByRole("button", { name: "Save rule" }).click();
    await second.getByText("changed since you opened it").waitFor();
    expect((await policyNow()).policy.quotas.get(SAMPLE_QUOTA.rule)?.rule.limits[0]?.max).toBe(900);
    // the whole document too: the second editor's page still holds the text from before the first's save
    await second.getByLabel("policy JSON").fill((await policyNow()).text.replace('"console.1', '"console.9'));
    await first.reload();
    await first.getByRole("button", { name: "Save policy" }).click();
    await first.getByText("saved as policy").waitFor();
    const kept = (await policyNow()).text;
    await second.getByRole("button", { name: "Save policy" }).click();
    await second.locator(".document").getByText("changed since you opened it").waitFor();
    expect((await policyNow()).text).toBe(kept);
    await first.close();
    await second.close();
  });

  it("answers why for the engine's decision: user 0 capped in flash-sale by push:1d, filled by spring-sale", async () => {
    // the engine capped every new user in the second campaign by push:1d, none in the first
    expect(cappedNew.get(SAMPLE_CAMPAIGNS[1])).toEqual({ "push:1d": SAMPLE_NEW_USERS.length });
    expect(cappedNew.get(SAMPLE_CAMPAIGNS[0])).toEqual({});
    const page = await open("why");
    await page.getByLabel("user").fill("0");
    await page.getByLabel("campaign").fill("flash-sale");
    await page.getByRole("button", { name: "Why?" }).click();
    const heading = page.locator("[data-decision]");
    await heading.waitFor();
    expect(await heading.getAttribute("data-decision")).toBe("capped");
    expect(await heading.textContent()).toContain(new Date(T0 + HOUR).toISOString());
    const cap = page.locator('[data-cap="push:1d"]');
    expect(await cap.textContent()).toContain("capped by push:1d (max 1): 1 sends in the window before, 1 after");
    expect(await cap.locator("td").allTextContents()).toEqual([new Date(T0).toISOString(), "spring-sale", "push"]);
    await page.getByLabel("user").fill("-1");
    await page.getByRole("button", { name: "Why?" }).click();
    await page.locator("#error-user", { hasText: "user: expected a decimal integer" }).waitFor();
    await page.close();
  });

  it("predicts a campaign against the live caps, as the engine decided the last one, and writes nothing", async () => {
    const before = await namespaceSnapshot(stack.consumer.cluster, namespace);
    const page = await open("what-if");
    await page.getByLabel("users").fill("9-1");
    await page.getByLabel("campaign").fill("summer-sale");
    await page.getByLabel("channel").fill("push");
    await page.getByRole("button", { name: "Predict" }).click();
    await page.locator("#error-range", { hasText: "range: expected 0 <= FROM <= TO" }).waitFor();
    await page.getByLabel("users").fill(`0-${SAMPLE_USERS.length - 1}`);
    await page.getByRole("button", { name: "Predict" }).click();
    const row = (segment: string) => page.locator(`[data-segment="${segment}"] td`).allTextContents();
    await page.locator('[data-segment="new"]').waitFor();
    // spring-sale's send (T0) still fills every new user's push:1d window, as it did for flash-sale
    expect(cappedNew.get(SAMPLE_CAMPAIGNS[1])).toEqual({ "push:1d": SAMPLE_NEW_USERS.length });
    const newUsers = String(SAMPLE_NEW_USERS.length);
    expect(await row("new")).toEqual(["new", newUsers, "0", newUsers, `push:1d: ${newUsers}`, "0", "0", "0"]);
    const rest = String(SAMPLE_USERS.length - SAMPLE_NEW_USERS.length);
    expect(await row("unsegmented")).toEqual(["unsegmented", rest, rest, "0", "", "0", "0", "0"]);
    // eligible when spring-sale's send (T0) leaves the 1 d window: 23 h from now
    expect(await page.locator('[data-eligible="new"] td').allTextContents()).toEqual([
      ...["0", "0", newUsers, "0", "0", "0"],
      ...["0", "0"],
    ]);
    expect(await page.locator("main").textContent()).toContain(`policy ${(await policyNow()).policy.version}`);
    expect(await namespaceSnapshot(stack.consumer.cluster, namespace)).toEqual(before);
    await page.close();
  });

  it("redrives a chosen dead letter: it leaves the DLQ and is on the campaign queue as it came", async () => {
    const page = await open("dlq");
    const row = page.locator("[data-message-id]");
    expect(await row.count()).toBe(1);
    const messageId = await row.getAttribute("data-message-id");
    await page.getByLabel(`choose ${messageId}`).check();
    await page.getByRole("button", { name: "Redrive chosen" }).click();
    await page.getByText("1 redriven to the campaign queue").waitFor();
    await page.getByText("0 dead letters").waitFor();
    const { Messages = [] } = await stack.sqs.send(
      new ReceiveMessageCommand({ QueueUrl: stack.endpoints.campaignQueueUrl, MaxNumberOfMessages: 10 }),
    );
    expect(Messages.map((m) => m.Body)).toEqual([SAMPLE_DEAD_LETTER]);
    await page.close();
  });
});

/** A GET of /api/pages with the Host header given (fetch does not let a caller set Host). */
function statusWithHost(host: string, headers: Record<string, string>): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const { port } = new URL(server.origin);
    const request = httpGet(
      { host: "127.0.0.1", port, path: "/api/pages", headers: { ...headers, host } },
      (response) => {
        response.resume();
        resolve(response.statusCode);
      },
    );
    request.on("error", reject);
  });
}

describe("the console's guard", () => {
  const api = (path: string, init: RequestInit = {}) => fetch(`${server.origin}/api/${path}`, init);

  it("answers the API only with the launch's token", async () => {
    expect((await api("pages")).status).toBe(403);
    expect((await api("pages", { headers: { "x-tollgate-console-token": "guess" } })).status).toBe(403);
    expect((await api("pages", { headers: { "x-tollgate-console-token": server.token } })).status).toBe(200);
  });

  it("refuses another Origin, a POST without one, and a Host that is not this server (DNS rebinding)", async () => {
    const token = { "x-tollgate-console-token": server.token };
    const body = JSON.stringify({ messageIds: ["x"] });
    const post = (headers: Record<string, string>) => api("dlq/redrive", { method: "POST", headers, body });
    expect((await post({ ...token, origin: "http://evil.example" })).status).toBe(403);
    expect((await post(token)).status).toBe(403);
    expect(await statusWithHost("evil.example", token)).toBe(421);
    // with its own Origin the same POST reaches the route (no such dead letter)
    const own = await post({ ...token, origin: server.origin });
    expect(await own.json()).toMatchObject({ redriven: [], missing: ["x"] });
  });

  it("tollgate console serves on the address it prints, with its own token, and stops on Ctrl-C (exit 0)", async () => {
    const { awsEndpoint, bucket } = stack.endpoints;
    const child = spawn(
      process.execPath,
      ["bin/tollgate.mjs", "console", "--endpoint", awsEndpoint, "--bucket", bucket],
      {
        env: { ...process.env, AWS_ACCESS_KEY_ID: "local", AWS_SECRET_ACCESS_KEY: "local" },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    const url = await new Promise<URL>((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (chunk) => {
        out += chunk;
        const printed = /tollgate console at (\S+)/.exec(out)?.[1];
        if (printed) resolve(new URL(printed));
      });
      exited.then((code) => reject(new Error(`tollgate console exited ${code} before printing its address`)));
    });
    expect(url.hostname).toBe("127.0.0.1");
    const token = url.searchParams.get("token") ?? "";
    expect(token).not.toBe(server.token);
    const policy = await fetch(`${url.origin}/api/policy`, { headers: { "x-tollgate-console-token": token } });
    expect(policy.status).toBe(200);
    expect(((await policy.json()) as { rules: { name: string }[] }).rules.map((r) => r.name)).toEqual([
      SAMPLE_QUOTA.rule,
    ]);
    // this launch's token only: the other console's is refused here
    expect(
      (await fetch(`${url.origin}/api/pages`, { headers: { "x-tollgate-console-token": server.token } })).status,
    ).toBe(403);
    child.kill("SIGINT");
    expect(await exited).toBe(0);
  });

  it("a page of another origin in the browser cannot call the API even knowing the token", async () => {
    const page = await browser.newPage();
    await page.goto("about:blank");
    const outcome = await page.evaluate(
      async ({ url, token }) => {
        try {
          const response = await fetch(url, { headers: { "x-tollgate-console-token": token } });
          return `answered ${response.status}`;
        } catch {
          return "blocked";
        }
      },
      { url: `${server.origin}/api/pages`, token: server.token },
    );
    expect(outcome).toBe("blocked");
    await page.close();
  });
});
