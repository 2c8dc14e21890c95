// An editor's save (the console's) is made against what that editor opened: on the file object store, whose
// conditional write is real, a save after another editor's is refused as "changed since you opened it" and
// the other's save is kept, also when the other wrote between this save's read and its write.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FileObjectStore } from "../../../functions/adapters/file-object-store.ts";
import { DEFAULT_POLICY_KEY } from "../../../functions/core/capping/policy.ts";
import {
  editPolicy,
  ifPolicyUnchanged,
  ifQuotaRuleUnchanged,
  quotaRuleOpened,
  uploadedPolicy,
  withQuotaRule,
} from "../../../functions/core/capping/policy-edits.ts";
import { ChangedSinceOpenedError } from "../../../functions/core/shared/errors.ts";
import type { QuotaRuleDocument } from "../../../functions/core/shared/quota-rules.ts";

const base = { version: "e.1", channels: ["push"], segments: [], default: { name: "rest", caps: {} } };
const rule = (name: string, max: number): QuotaRuleDocument => ({
  name,
  mode: "strict",
  limits: [{ window: "1s", max }],
});
const withVersion = (version: string) => JSON.stringify({ ...base, version });

let root: string;
let store: FileObjectStore;
const text = async () => new TextDecoder().decode((await store.read(DEFAULT_POLICY_KEY))!.body);
const opened = async (name: string) => quotaRuleOpened({ text: await text(), policy: undefined }, name);
const maxOf = async (name: string) =>
  (JSON.parse(await text()).quotas as QuotaRuleDocument[]).find((r) => r.name === name)?.limits[0]?.max;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "tollgate-editor-"));
  store = new FileObjectStore(root);
  await store.putIf(DEFAULT_POLICY_KEY, JSON.stringify({ ...base, quotas: [rule("orders", 10)] }), undefined);
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("the policy document saved by an editor", () => {
  it("lands when the object is still the text the editor opened", async () => {
    const openedText = await text();
    await editPolicy(store, ifPolicyUnchanged(openedText, uploadedPolicy(withVersion("e.2"), { replaceQuotas: true })));
    expect(JSON.parse(await text()).version).toBe("e.2");
  });

  it("is refused after another editor's save, which is kept", async () => {
    const openedText = await text();
    await editPolicy(
      store,
      ifPolicyUnchanged(openedText, uploadedPolicy(withVersion("first"), { replaceQuotas: true })),
    );
    await expect(
      editPolicy(store, ifPolicyUnchanged(openedText, uploadedPolicy(withVersion("second"), { replaceQuotas: true }))),
    ).rejects.toThrow(ChangedSinceOpenedError);
    expect(JSON.parse(await text()).version).toBe("first");
  });

  it("is refused, not made again on top, when the other editor wrote between its read and its write", async () => {
    const openedText = await text();
    let otherWritten!: () => void;
    const written = new Promise<void>((resolve) => {
      otherWritten = resolve;
    });
    let tries = 0;
    const late = editPolicy(
      store,
      ifPolicyUnchanged(openedText, async (current) => {
        tries++;
        const made = uploadedPolicy(withVersion("late"), { replaceQuotas: true })(current);
        if (tries === 1) await written;
        return made;
      }),
    );
    await editPolicy(
      store,
      ifPolicyUnchanged(openedText, uploadedPolicy(withVersion("early"), { replaceQuotas: true })),
    );
    otherWritten();
    await expect(late).rejects.toThrow("changed since you opened it");
    // the conditional write refused its first write; made again from the newer object, the check refused it
    // before the edit ran a second time
    expect(tries).toBe(1);
    expect(JSON.parse(await text()).version).toBe("early");
  });
});

describe("a quota rule saved by an editor", () => {
  it("is refused when another editor changed that rule since, and the other's change is kept", async () => {
    const mine = await opened("orders");
    await editPolicy(store, ifQuotaRuleUnchanged("orders", mine, withQuotaRule(rule("orders", 20))));
    await expect(
      editPolicy(store, ifQuotaRuleUnchanged("orders", mine, withQuotaRule(rule("orders", 30)))),
    ).rejects.toThrow('quota rule "orders" changed since you opened it');
    expect(await maxOf("orders")).toBe(20);
  });

  it("lands when only another rule changed since: that edit is kept too", async () => {
    const mine = await opened("orders");
    await editPolicy(store, withQuotaRule(rule("billing", 5)));
    await editPolicy(store, ifQuotaRuleUnchanged("orders", mine, withQuotaRule(rule("orders", 30))));
    expect(await maxOf("orders")).toBe(30);
    expect(await maxOf("billing")).toBe(5);
  });

  it("as a new rule, is refused when another editor added a rule of that name first", async () => {
    await editPolicy(store, ifQuotaRuleUnchanged("search", undefined, withQuotaRule(rule("search", 7))));
    await expect(
      editPolicy(store, ifQuotaRuleUnchanged("search", undefined, withQuotaRule(rule("search", 8)))),
    ).rejects.toThrow(ChangedSinceOpenedError);
    expect(await maxOf("search")).toBe(7);
  });
});
