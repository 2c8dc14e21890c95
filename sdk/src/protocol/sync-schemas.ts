// The JSON bodies of POST /v1/quotas/sync, validated strictly: the request as the check API takes it
// (syncRequestSchema), and the answer before the SDK's HTTP transport believes it (parseSyncReply). The
// same shapes as wire.ts's SyncRequest and SyncReply (decodeSync checks the direct transport's array the
// same way).
import { z } from "zod";
import { WireError } from "./errors.ts";
import { MAX_KEY_LENGTH, NAME_PATTERN, NAME_RULE, quotaKeyProblem } from "./keys.ts";
import { MAX_EPOCHS_PER_KEY, MAX_KEYS_PER_SYNC, PROTOCOL, type SyncReply, type SyncRequest } from "./wire.ts";

// what the wire carries (wire.ts): any whole number a double holds exactly. A byte quota's usage,
// merged over a long outage, passes 1e9; the script caps what it stores at its slots' range
const count = z.int().min(0).max(Number.MAX_SAFE_INTEGER);
const time = z.int().min(0).max(8_640_000_000_000_000);
const pairs = z.array(z.tuple([time, count])).max(MAX_EPOCHS_PER_KEY);

export const syncRequestSchema = z.strictObject({
  instanceId: z.string().regex(NAME_PATTERN, NAME_RULE),
  rule: z.string().min(1).max(64),
  group: z.int().min(0),
  seq: z.int().min(1).max(Number.MAX_SAFE_INTEGER),
  configVersion: z.string().max(200),
  entries: z
    .array(
      z
        .strictObject({
          key: z
            .string()
            .min(1)
            .max(MAX_KEY_LENGTH)
            .refine((key) => quotaKeyProblem(key) === undefined, "expected no lone UTF-16 surrogate"),
          usage: pairs,
          refunds: pairs,
          offered: count,
          want: count,
          // strict spend stamps, one per usage pair (absent: an older SDK's request, counted from now)
          spentAgo: z.array(count).max(MAX_EPOCHS_PER_KEY).optional(),
        })
        .refine((entry) => entry.spentAgo === undefined || entry.spentAgo.length === entry.usage.length, {
          path: ["spentAgo"],
          message: "expected one per usage pair",
        }),
    )
    // none: a request for the rule's definition alone (`quotas.ready()` before any key is checked)
    .max(MAX_KEYS_PER_SYNC)
    // a key listed twice would be handed two allowances with one reserved: one entry per key
    .superRefine((entries, ctx) => {
      const seen = new Map<string, number>();
      entries.forEach((entry, i) => {
        const first = seen.get(entry.key);
        if (first === undefined) seen.set(entry.key, i);
        else ctx.addIssue({ code: "custom", path: [i, "key"], message: `already listed as entries[${first}]` });
      });
    }),
});

const int = z.number().int();
const limit = z.strictObject({ windowMs: int.positive(), max: int.nonnegative() });
const rule = z.strictObject({
  mode: z.enum(["strict", "approximate"]),
  limits: z.array(limit).min(1),
  leaseMs: int.nonnegative(),
  fallback: z.enum(["share", "allow", "deny"]),
  slotGroups: int.positive(),
});
const base = { key: z.string(), denyUntil: int, resetAt: int, used: z.array(int) };
const assignment = z.discriminatedUnion("mode", [
  z.strictObject({ mode: z.literal("approximate"), allowance: int, validUntil: int, ...base }),
  z.strictObject({ mode: z.literal("strict"), tokens: int, leaseExpiresAt: int, ...base }),
]);
const reply = z.strictObject({
  protocol: z.literal(PROTOCOL).optional(),
  status: z.enum(["applied", "duplicate", "stale", "norule"]),
  serverTime: int,
  configVersion: z.string(),
  rule: rule.optional(),
  instances: int.nonnegative(),
  entries: z.array(assignment),
});

/** The reply, or a WireError naming the first field that is wrong (entries must answer the request's keys, in order). */
export function parseSyncReply(json: unknown, request: SyncRequest): SyncReply {
  const parsed = reply.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new WireError(`reply.${issue?.path.join(".") ?? ""}`, issue?.message ?? "invalid");
  }
  const result = parsed.data as SyncReply;
  if (result.status !== "norule" && result.entries.some((entry, i) => entry.key !== request.entries[i]?.key)) {
    throw new WireError("reply.entries", "do not answer the request's keys in order");
  }
  return result;
}
