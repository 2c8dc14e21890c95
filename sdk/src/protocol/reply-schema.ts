// The JSON body of a POST /v1/quotas/sync answer, validated strictly before the SDK believes it: the
// same shape as wire.ts's SyncReply (decodeSync checks the direct transport's array the same way).
import { z } from "zod";
import { WireError } from "./errors.ts";
import { PROTOCOL, type SyncReply, type SyncRequest } from "./wire.ts";

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
