// Edits of the one policy object that more than one team changes (the capping team's `policy upload`, an API
// team's `quotas set` and `quotas remove`): each edit reads the object with its tag, makes the new text from
// what it read, validates it, and writes it only if the object is still the one it read (compare-and-set).
// When another edit came first, it starts again from that one, so no edit is lost and none deletes another's
// rules. A quota rule's slotGroups is refused here while the rule is in service (see slotGroupsChanges).
import { ChangedSinceOpenedError, InvalidPolicyError, ValidationError, WriteConflictError } from "../shared/errors.ts";
import type { ConditionalObjectStore } from "../shared/object-store.ts";
import type { QuotaRuleDocument } from "../shared/quota-rules.ts";
import type { TenantDocument } from "../shared/tenants.ts";
import { DEFAULT_POLICY_KEY, type Policy, parsePolicyText } from "./policy.ts";

/** The policy an edit starts from: its text and, when that text is valid, the parsed policy. */
export interface CurrentPolicy {
  text: string;
  /** undefined when the object holds a policy that does not validate (an edit may still replace it). */
  policy: Policy | undefined;
}

/** Makes the new policy text from the current one (undefined: no policy object yet). */
export type PolicyEdit = (current: CurrentPolicy | undefined) => string | Promise<string>;

export interface PolicyEditOptions {
  key?: string;
  /** How many times an edit is made again after another edit came first (default 5). */
  attempts?: number;
}

export interface EditedPolicy {
  policy: Policy;
  /** The policy the edit replaced, when there was a valid one. */
  previous: Policy | undefined;
  etag: string;
}

const DEFAULT_ATTEMPTS = 5;

/**
 * Applies `edit` to the policy object with compare-and-set: validated whole before it is written (an
 * invalid result writes nothing), made again from the newer object when another edit wrote first, and
 * refused with WriteConflictError after `attempts` such races.
 */
export async function editPolicy(
  store: ConditionalObjectStore,
  edit: PolicyEdit,
  options: PolicyEditOptions = {},
): Promise<EditedPolicy> {
  const key = options.key ?? DEFAULT_POLICY_KEY;
  const attempts = options.attempts ?? DEFAULT_ATTEMPTS;
  for (let attempt = 1; ; attempt++) {
    const object = await store.read(key);
    const current = object === undefined ? undefined : readCurrent(new TextDecoder().decode(object.body));
    const text = await edit(current);
    const policy = parsePolicyText(text);
    const previous = current?.policy;
    if (previous) refuseSlotGroupsChanges(previous, policy, text);
    try {
      const etag = await store.putIf(key, text, object?.etag);
      return { policy, previous, etag };
    } catch (error) {
      if (!(error instanceof WriteConflictError)) throw error;
      if (attempt >= attempts) {
        throw new WriteConflictError(
          key,
          `the policy was changed by another edit ${attempts} time(s) while this one was being made; nothing of this edit was written: run it again`,
          { cause: error },
        );
      }
    }
  }
}

/**
 * `edit`, made only while the policy object is still the text an editor opened (undefined: there was none);
 * otherwise refused with ChangedSinceOpenedError. Under editPolicy's compare-and-set a save that lost the
 * race is made again, finds the newer text, and is refused: the later of two editors never overwrites the
 * earlier one's save.
 */
export function ifPolicyUnchanged(
  openedText: string | undefined,
  edit: PolicyEdit,
  key = DEFAULT_POLICY_KEY,
): PolicyEdit {
  return (current) => {
    if (current?.text !== openedText) throw new ChangedSinceOpenedError(key, "the policy");
    return edit(current);
  };
}

/**
 * `edit`, made only while the quota rule `name` is still as an editor opened it (`openedRule`: the rule's
 * document as quotaRuleOpened gave it, undefined for a rule that did not exist); otherwise refused with
 * ChangedSinceOpenedError. Edits of other rules in between do not refuse it: they are kept, as `quotas set`
 * keeps them.
 */
export function ifQuotaRuleUnchanged(
  name: string,
  openedRule: string | undefined,
  edit: PolicyEdit,
  key = DEFAULT_POLICY_KEY,
): PolicyEdit {
  return (current) => {
    if (quotaRuleOpened(current, name) !== openedRule) throw new ChangedSinceOpenedError(key, `quota rule "${name}"`);
    return edit(current);
  };
}

/** The quota rule `name` of the policy as stored (its JSON), what an editor opens; undefined when absent. */
export function quotaRuleOpened(current: CurrentPolicy | undefined, name: string): string | undefined {
  if (current === undefined) return undefined;
  let document: PolicyDocument;
  try {
    document = JSON.parse(current.text) as PolicyDocument;
  } catch {
    return undefined;
  }
  const rule = Array.isArray(document.quotas) ? document.quotas.find((r) => r?.name === name) : undefined;
  return rule === undefined ? undefined : JSON.stringify(rule);
}

function readCurrent(text: string): CurrentPolicy {
  try {
    return { text, policy: parsePolicyText(text) };
  } catch (error) {
    if (error instanceof InvalidPolicyError) return { text, policy: undefined };
    throw error;
  }
}

/**
 * The edit of `quotas set`: the rule added, or put in place of the one of that name, and granted to the
 * tenants named in `grantTo` (their `quota-sync`; ValidationError on `--tenant` for a tenant the policy lacks).
 */
export function withQuotaRule(rule: QuotaRuleDocument, grantTo: readonly string[] = []): PolicyEdit {
  return (current) => {
    const document = currentDocument(current);
    const quotas = (document.quotas ?? []).filter((existing) => existing.name !== rule.name);
    for (const name of grantTo) {
      if (!document.tenants?.some((tenant) => tenant.name === name))
        throw new ValidationError("--tenant", `no tenant "${name}" in policy ${document.version}`);
    }
    const tenants = document.tenants?.map((tenant) =>
      grantTo.includes(tenant.name) ? grantRule(tenant, rule.name) : tenant,
    );
    return render({
      ...document,
      version: nextVersion(document.version),
      quotas: [...quotas, rule],
      ...(tenants ? { tenants } : {}),
    });
  };
}

/** `tenant` with `rule` among the rules it syncs. */
function grantRule(tenant: TenantDocument, rule: string): TenantDocument {
  const operations = tenant.operations.includes("quota-sync")
    ? tenant.operations
    : [...tenant.operations, "quota-sync"];
  const quotaRules = [...new Set([...(tenant.quotaRules ?? []), rule])];
  return { ...tenant, operations, quotaRules } as TenantDocument;
}

/** The edit of `quotas remove`: the rule taken out (ValidationError when the policy has none of that name). */
export function withoutQuotaRule(name: string): PolicyEdit {
  return (current) => {
    const document = currentDocument(current);
    const quotas = document.quotas ?? [];
    if (!quotas.some((rule) => rule.name === name))
      throw new ValidationError("rule", `the policy has no quota rule "${name}"`);
    const tenants = document.tenants?.map((tenant) => withoutRuleGrant(tenant, name));
    return render({
      ...document,
      version: nextVersion(document.version),
      quotas: quotas.filter((rule) => rule.name !== name),
      ...(tenants ? { tenants } : {}),
    });
  };
}

/** `tenant` no longer syncing `rule` (and without `quota-sync` when it was the last rule it synced). */
function withoutRuleGrant(tenant: TenantDocument, rule: string): TenantDocument {
  if (!tenant.quotaRules?.includes(rule)) return tenant;
  const quotaRules = tenant.quotaRules.filter((name) => name !== rule);
  if (quotaRules.length > 0) return { ...tenant, quotaRules };
  const { quotaRules: _last, ...rest } = tenant;
  const operations = tenant.operations.filter((operation) => operation !== "quota-sync");
  if (operations.length === 0)
    throw new ValidationError(
      "rule",
      `tenant "${tenant.name}" does nothing but sync "${rule}": grant it another rule or take the tenant out of the policy first`,
    );
  return { ...rest, operations };
}

/**
 * The edit of `policy upload`: the file's policy, keeping the quota rules and tenants of the policy in the
 * bucket when the file has no `quotas` or no `tenants` (the capping team's file need not carry the API teams'). A file whose
 * `quotas` differ from those in the bucket is refused unless `replaceQuotas`: it would delete or undo rules
 * another team set.
 */
export function uploadedPolicy(text: string, options: { replaceQuotas?: boolean } = {}): PolicyEdit {
  return (current) => {
    const fileDocument = documentOf(text);
    const bucketDocument = current?.policy ? (JSON.parse(current.text) as PolicyDocument) : undefined;
    // what the file leaves out is kept from the bucket: the capping team's file need not carry the API teams'
    // quota rules, nor the tenants that sync them
    const kept: Partial<PolicyDocument> = {};
    if (fileDocument.quotas === undefined && bucketDocument?.quotas !== undefined) kept.quotas = bucketDocument.quotas;
    if (fileDocument.tenants === undefined && bucketDocument?.tenants !== undefined)
      kept.tenants = bucketDocument.tenants;
    const result = Object.keys(kept).length === 0 ? text : render({ ...fileDocument, ...kept });
    const uploaded = parsePolicyText(result); // its problems, by field
    if (fileDocument.quotas === undefined || options.replaceQuotas || current?.policy === undefined) return result;
    const changes = quotaChanges(current.policy, uploaded);
    if (changes.length === 0) return result;
    throw new ValidationError(
      "quotas",
      `the file's quota rules differ from those of the policy in the bucket (${changes.join(", ")}), which other teams set with \`tollgate quotas set\`: leave "quotas" out of the file to keep them, or pass --replace-quotas to replace them`,
    );
  };
}

/** The file as a JSON object; text that is not one fails as parsePolicyText says (InvalidPolicyError). */
function documentOf(text: string): PolicyDocument {
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    parsePolicyText(text);
  }
  if (typeof document !== "object" || document === null || Array.isArray(document)) parsePolicyText(text);
  return document as PolicyDocument;
}

interface PolicyDocument {
  version: string;
  quotas?: QuotaRuleDocument[];
  tenants?: TenantDocument[];
  [field: string]: unknown;
}

function currentDocument(current: CurrentPolicy | undefined): PolicyDocument {
  if (current === undefined) throw new ValidationError("policy", "no policy in the bucket yet: upload one first");
  // an edit of one rule never carries an invalid policy forward: the error names its fields
  if (current.policy === undefined) parsePolicyText(current.text);
  return JSON.parse(current.text) as PolicyDocument;
}

/** `<version>+<base-36 ms>`: a new version for each edit, so every rule's config version changes with it. */
function nextVersion(version: string): string {
  return `${version.split("+")[0]?.slice(0, 50)}+${Date.now().toString(36)}`;
}

function render(document: PolicyDocument): string {
  return JSON.stringify(document, null, 2);
}

/** What an upload would do to the rules in service: "adds x", "removes y", "changes z". */
function quotaChanges(before: Policy, after: Policy): string[] {
  const changes: string[] = [];
  for (const [name, { rule }] of after.quotas) {
    const old = before.quotas.get(name);
    if (!old) changes.push(`adds "${name}"`);
    else if (JSON.stringify(old.rule) !== JSON.stringify(rule)) changes.push(`changes "${name}"`);
  }
  for (const name of before.quotas.keys()) if (!after.quotas.has(name)) changes.push(`removes "${name}"`);
  return changes;
}

/**
 * A rule's slotGroups decides which hash slot each of its keys lives in: changed, every key moves to
 * another slot where its windows start empty, and strict admits up to twice its limit while the old
 * windows are still full. So a rule in service keeps its slotGroups; the error says what to do instead.
 */
function refuseSlotGroupsChanges(previous: Policy, next: Policy, text: string): void {
  const documents = (JSON.parse(text) as PolicyDocument).quotas ?? [];
  for (const [name, { rule }] of next.quotas) {
    const old = previous.quotas.get(name)?.rule;
    if (!old || old.slotGroups === rule.slotGroups) continue;
    const index = documents.findIndex((document) => document.name === name);
    const longest = Math.max(...old.limits.map((limit) => limit.windowMs)) + old.leaseMs;
    throw new ValidationError(
      `quotas[${index}].slotGroups`,
      `rule "${name}" is in service with slotGroups ${old.slotGroups}; changing it to ${rule.slotGroups} moves its keys to other hash slots, where their windows would start empty. ` +
        `Give the new layout another rule name, or remove the rule (\`tollgate quotas remove ${name}\`), wait until its windows have emptied (${longest} ms: its longest window and lease), then add it with slotGroups ${rule.slotGroups}`,
    );
  }
}
