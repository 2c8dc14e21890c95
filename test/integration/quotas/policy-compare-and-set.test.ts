// The one policy object that `policy upload`, `quotas set` and `quotas remove` edit: compare-and-set, so
// two concurrent edits never lose one and no command deletes another team's quota rules; a rule in service
// keeps its slotGroups. The race runs on the file object store (its conditional write is real: O_EXCL lock,
// content tag); fauxqs 1.9 ignores If-Match and If-None-Match on PutObject, so against it the tests check
// what the S3 adapter sends and everything but the refusal of a lost race.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileObjectStore } from "../../../functions/adapters/file-object-store.ts";
import { publishPolicy, uploadPolicy } from "../../../functions/app/operator-actions.ts";
import { readPolicy, removeQuotaRule, setQuotaRule } from "../../../functions/app/quota-actions.ts";
import { DEFAULT_POLICY_KEY } from "../../../functions/core/capping/policy.ts";
import { editPolicy, withQuotaRule } from "../../../functions/core/capping/policy-edits.ts";
import { ValidationError, WriteConflictError } from "../../../functions/core/shared/errors.ts";
import type { QuotaRuleDocument } from "../../../functions/core/shared/quota-rules.ts";
import { useAwsEmulator } from "../../support/aws-emulator.ts";

const base = { version: "p.1", channels: ["push"], segments: [], default: { name: "rest", caps: {} } };
const rule = (name: string, extra: Partial<QuotaRuleDocument> = {}): QuotaRuleDocument => ({
  name,
  mode: "strict",
  limits: [{ window: "1s", max: 40 }],
  ...extra,
});
const names = (text: string) => ((JSON.parse(text).quotas ?? []) as { name: string }[]).map((r) => r.name).sort();

describe("policy edits on the file object store (a real conditional write)", () => {
  let root: string;
  let store: FileObjectStore;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "tollgate-policy-"));
    store = new FileObjectStore(root);
    await store.putIf(DEFAULT_POLICY_KEY, JSON.stringify(base), undefined);
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("two concurrent quotas set edits of one policy both land: the one that lost the race is made again from the other's", async () => {
    let firstWritten!: () => void;
    const written = new Promise<void>((resolve) => {
      firstWritten = resolve;
    });
    let secondTries = 0;
    // the second edit reads the same object as the first, then waits until the first has written
    const second = editPolicy(store, async (current) => {
      secondTries++;
      const text = withQuotaRule(rule("billing"))(current);
      if (secondTries === 1) await written;
      return text;
    });
    await editPolicy(store, withQuotaRule(rule("orders")));
    firstWritten();
    await second;
    expect(secondTries).toBe(2);
    const object = await store.read(DEFAULT_POLICY_KEY);
    expect(names(new TextDecoder().decode(object!.body))).toEqual(["billing", "orders"]);
  });

  it("an edit that loses every race it is given is refused with a WriteConflictError that says to run it again, and writes nothing", async () => {
    const before = await store.read(DEFAULT_POLICY_KEY);
    const edit = editPolicy(
      store,
      async (current) => {
        const text = withQuotaRule(rule("late"))(current);
        // another team's edit lands between this one's read and its write
        await editPolicy(store, withQuotaRule(rule("search", { limits: [{ window: "1s", max: 7 }] })));
        return text;
      },
      { attempts: 1 },
    );
    await expect(edit).rejects.toThrow(WriteConflictError);
    await expect(edit).rejects.toThrow(
      /changed by another edit 1 time\(s\).*nothing of this edit was written: run it again/,
    );
    const after = new TextDecoder().decode((await store.read(DEFAULT_POLICY_KEY))!.body);
    expect(names(after)).toEqual([...names(new TextDecoder().decode(before!.body)), "search"].sort());
  });

  it("a conditional write naming a tag the object no longer has is refused, and one for a new object when it exists", async () => {
    const current = (await store.read(DEFAULT_POLICY_KEY))!;
    await expect(store.putIf(DEFAULT_POLICY_KEY, "{}", '"not-the-tag"')).rejects.toThrow(WriteConflictError);
    await expect(store.putIf(DEFAULT_POLICY_KEY, "{}", undefined)).rejects.toThrow(WriteConflictError);
    expect((await store.read(DEFAULT_POLICY_KEY))!.etag).toBe(current.etag);
  });
});

describe("policy upload and quotas set on one S3 object (fauxqs)", () => {
  const aws = useAwsEmulator();
  let bucket = "";
  let sent: Record<string, string | undefined>[] = [];
  beforeAll(async () => {
    bucket = `policy-${Date.now().toString(36)}`;
    const { CreateBucketCommand } = await import("@aws-sdk/client-s3");
    await aws.s3.send(new CreateBucketCommand({ Bucket: bucket }));
    // what each PutObject carried on the wire (the emulator does not enforce the conditions)
    aws.s3.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === "PutObjectCommand") {
          const headers = (args.request as { headers: Record<string, string> }).headers;
          sent.push({ ifMatch: headers["if-match"], ifNoneMatch: headers["if-none-match"] });
        }
        return next(args);
      },
      { step: "finalizeRequest", name: "recordConditions" },
    );
  });

  it("sends If-None-Match: * for the first policy and If-Match with the ETag it read for every later edit", async () => {
    sent = [];
    await uploadPolicy(aws.s3, bucket, JSON.stringify(base));
    const { S3ObjectStore } = await import("../../../functions/adapters/s3-object-store.ts");
    const etag = (await new S3ObjectStore(aws.s3, bucket).read(DEFAULT_POLICY_KEY))!.etag;
    await setQuotaRule(aws.s3, bucket, rule("orders"));
    expect(sent).toEqual([
      { ifMatch: undefined, ifNoneMatch: "*" },
      { ifMatch: etag, ifNoneMatch: undefined },
    ]);
  });

  it("policy upload of a file without quotas keeps the rules an API team set with quotas set", async () => {
    await publishPolicy(aws.s3, bucket, JSON.stringify(base));
    await setQuotaRule(aws.s3, bucket, rule("orders"));
    await uploadPolicy(aws.s3, bucket, JSON.stringify({ ...base, version: "p.2", channels: ["push", "email"] }));
    const { policy, text } = await readPolicy(aws.s3, bucket);
    expect({ version: policy.version, channels: policy.channels, rules: names(text) }).toEqual({
      version: "p.2",
      channels: ["push", "email"],
      rules: ["orders"],
    });
  });

  it("policy upload of a file whose quotas differ from the bucket's is refused naming quotas and what it would do, unless told to replace them", async () => {
    await publishPolicy(aws.s3, bucket, JSON.stringify(base));
    await setQuotaRule(aws.s3, bucket, rule("orders"));
    const file = JSON.stringify({ ...base, version: "p.3", quotas: [rule("search")] });
    const upload = uploadPolicy(aws.s3, bucket, file);
    await expect(upload).rejects.toThrow(ValidationError);
    await expect(upload).rejects.toThrow(/^quotas: .*adds "search", removes "orders".*--replace-quotas/);
    expect(names((await readPolicy(aws.s3, bucket)).text)).toEqual(["orders"]);
    await uploadPolicy(aws.s3, bucket, file, { replaceQuotas: true });
    expect(names((await readPolicy(aws.s3, bucket)).text)).toEqual(["search"]);
  });

  it("quotas remove takes one rule out and leaves the others; removing a rule the policy lacks names it", async () => {
    await publishPolicy(aws.s3, bucket, JSON.stringify({ ...base, quotas: [rule("orders"), rule("search")] }));
    const { previous, policy } = await removeQuotaRule(aws.s3, bucket, "orders");
    expect({ before: [...previous!.quotas.keys()], after: [...policy.quotas.keys()] }).toEqual({
      before: ["orders", "search"],
      after: ["search"],
    });
    await expect(removeQuotaRule(aws.s3, bucket, "orders")).rejects.toThrow(
      'rule: the policy has no quota rule "orders"',
    );
  });

  it("refuses a slotGroups change of a rule in service, by quotas set or policy upload, naming quotas[i].slotGroups and what to do; nothing is uploaded", async () => {
    // slotGroups 1 -> 8 moved every key to another hash slot, where its windows started empty (78-80 of 40)
    await publishPolicy(aws.s3, bucket, JSON.stringify({ ...base, quotas: [rule("search"), rule("orders")] }));
    const set = setQuotaRule(aws.s3, bucket, rule("orders", { slotGroups: 8 }));
    await expect(set).rejects.toThrow(
      /^quotas\[1\]\.slotGroups: rule "orders" is in service with slotGroups 1; changing it to 8 moves its keys .*another rule name, or remove the rule \(`tollgate quotas remove orders`\), wait .*\(1200 ms/,
    );
    const file = JSON.stringify({ ...base, quotas: [rule("orders", { slotGroups: 8 }), rule("search")] });
    await expect(uploadPolicy(aws.s3, bucket, file, { replaceQuotas: true })).rejects.toThrow(
      /^quotas\[0\]\.slotGroups: rule "orders" is in service with slotGroups 1/,
    );
    expect((await readPolicy(aws.s3, bucket)).policy.quotas.get("orders")?.rule.slotGroups).toBe(1);
    // under another name, or once removed, the new layout is accepted
    await setQuotaRule(aws.s3, bucket, rule("orders-v2", { slotGroups: 8 }));
    await removeQuotaRule(aws.s3, bucket, "orders");
    await setQuotaRule(aws.s3, bucket, rule("orders", { slotGroups: 8 }));
    expect((await readPolicy(aws.s3, bucket)).policy.quotas.get("orders")?.rule.slotGroups).toBe(8);
  });
});
