// The policy's `tenants` section: who may call the check API and the quota sync route, as which tenant, for
// what. A request is authorized by its caller's IAM principal alone (never by anything in its body): the
// principal names exactly one tenant, the tenant's operations allow the route, and every key, scope and
// rule the request names is then placed in the tenant's namespace (sdk/src/protocol/keys.ts), so no body
// can name another tenant's state. Without tenants, nobody is authorized (docs/tenants.md).
import { z } from "zod";
import { TENANT_NAMESPACE_PATTERN } from "../../../sdk/src/protocol/index.ts";

/** What a tenant may do; a route needs the operation of its name (docs/tenants.md). */
export const OPERATIONS = ["limit", "limits", "frequency-check", "frequency-consume", "quota-sync"] as const;
export type Operation = (typeof OPERATIONS)[number];

export const MAX_TENANTS = 64;
const MAX_PRINCIPALS = 32;
/** An ARN pattern: an ARN, `*` matching any run of characters and `?` any one. */
const PRINCIPAL_PATTERN = /^arn:aws[a-z-]*:(iam|sts)::[0-9*?]{1,12}:[\x21-\x7e]{1,512}$/;

const tenantSchema = z
  .strictObject({
    name: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'expected a tenant name of a-z, 0-9, "_" or "-"'),
    namespace: z.string().regex(TENANT_NAMESPACE_PATTERN, 'expected 1-32 characters of a-z, 0-9 or "-"'),
    principals: z
      .array(z.string().regex(PRINCIPAL_PATTERN, "expected an IAM or STS ARN (wildcards * and ?)"))
      .min(1)
      .max(MAX_PRINCIPALS),
    operations: z.array(z.enum(OPERATIONS)).min(1),
    /** The quota rules the tenant syncs (with `quota-sync`). */
    quotaRules: z.array(z.string()).max(64).optional(),
    /** Every limit and frequency request must change nothing: `cost: 0`, no `consume`. */
    peekOnly: z.boolean().optional(),
    /** The console's and the CLI's principals: rules changes, audited; no check API route. */
    operator: z.boolean().optional(),
  })
  .superRefine((tenant, ctx) => {
    const syncs = tenant.operations.includes("quota-sync");
    if (syncs && !tenant.quotaRules?.length)
      ctx.addIssue({ code: "custom", path: ["quotaRules"], message: "quota-sync needs the rules it syncs" });
    if (!syncs && tenant.quotaRules?.length)
      ctx.addIssue({ code: "custom", path: ["quotaRules"], message: "only with the quota-sync operation" });
    if (tenant.peekOnly && tenant.operations.includes("frequency-consume"))
      ctx.addIssue({ code: "custom", path: ["operations"], message: "a peek-only tenant cannot frequency-consume" });
  });

export const tenantsSchema = z
  .array(tenantSchema)
  .max(MAX_TENANTS)
  .superRefine((tenants, ctx) => {
    const seen = { name: new Set<string>(), namespace: new Set<string>() };
    tenants.forEach((tenant, i) => {
      for (const field of ["name", "namespace"] as const) {
        if (seen[field].has(tenant[field]))
          ctx.addIssue({ code: "custom", path: [i, field], message: `duplicate tenant ${field} "${tenant[field]}"` });
        seen[field].add(tenant[field]);
      }
    });
    // campaigns (the users' frequency caps) are one tenant's: the campaign pipeline's, the marketing tenant
    const capping = tenants.flatMap((tenant, i) =>
      tenant.operations.some((op) => op.startsWith("frequency")) ? [i] : [],
    );
    for (const i of capping.slice(1))
      ctx.addIssue({
        code: "custom",
        path: [i, "operations"],
        message: `the users' frequency caps are one tenant's (already "${tenants[capping[0] as number]?.name}")`,
      });
  });

export type TenantDocument = z.output<typeof tenantSchema>;

export interface Tenant {
  name: string;
  namespace: string;
  operations: ReadonlySet<Operation>;
  quotaRules: ReadonlySet<string>;
  peekOnly: boolean;
  operator: boolean;
}

/** An authorization refused: which check failed, for the 403's code and the metric. */
export type Refusal =
  | { code: "unknown_principal"; message: string }
  | { code: "ambiguous_principal"; message: string }
  | { code: "operation_not_allowed"; message: string };

/** The caller of a request, from the Function URL's IAM context (none: an unsigned request). */
export interface Principal {
  arn: string;
  accountId?: string;
}

/** What a request asks to do: its route's operation, whether it changes state, the quota rule it names. */
export interface Intent {
  operation: Operation;
  /** true when the request may charge or consume (a limit with cost > 0, a frequency check with consume). */
  changes: boolean;
  rule?: string;
}

/** Compiles an ARN pattern: `*` any run, `?` one character, everything else literally. */
function arnMatcher(pattern: string): RegExp {
  const body = pattern.replace(/[.+^${}()|[\]\\*?]/g, (c) => (c === "*" ? ".*" : c === "?" ? "." : `\\${c}`));
  return new RegExp(`^${body}$`);
}

export class Tenancy {
  private readonly tenants: readonly (Tenant & { matchers: readonly RegExp[] })[];

  constructor(documents: readonly TenantDocument[]) {
    this.tenants = documents.map((document) => ({
      name: document.name,
      namespace: document.namespace,
      operations: new Set(document.operations),
      quotaRules: new Set(document.quotaRules ?? []),
      peekOnly: document.peekOnly ?? false,
      operator: document.operator ?? false,
      matchers: document.principals.map(arnMatcher),
    }));
  }

  get size(): number {
    return this.tenants.length;
  }

  /** Every tenant, in policy order. */
  list(): readonly Tenant[] {
    return this.tenants;
  }

  /** The one tenant `principal` acts for, or why none: no principal, none matching, or more than one. */
  tenantOf(principal: Principal | undefined): Tenant | Refusal {
    if (principal === undefined) return { code: "unknown_principal", message: "the request carries no principal" };
    const matching = this.tenants.filter((tenant) => tenant.matchers.some((m) => m.test(principal.arn)));
    if (matching.length === 0)
      return { code: "unknown_principal", message: `principal ${principal.arn} acts for no tenant` };
    // two tenants' patterns overlapping is a policy mistake: neither is guessed
    if (matching.length > 1)
      return {
        code: "ambiguous_principal",
        message: `principal ${principal.arn} matches tenants ${matching.map((t) => t.name).join(", ")}`,
      };
    return matching[0] as Tenant;
  }

  /** The tenant a request of `principal` runs as, or the refusal; nothing is read or written for a refusal. */
  authorize(principal: Principal | undefined, intent: Intent): Tenant | Refusal {
    const tenant = this.tenantOf(principal);
    if ("code" in tenant) return tenant;
    return refusalOf(tenant, intent) ?? tenant;
  }
}

/** A refusal of an operation (a module function: a closure per call cost more than the checks themselves). */
const refuse = (message: string): Refusal => ({ code: "operation_not_allowed", message });

/** Why `tenant` may not do `intent`, if it may not. */
export function refusalOf(tenant: Tenant, intent: Intent): Refusal | undefined {
  if (tenant.operator) return refuse(`tenant "${tenant.name}" is an operator: it changes rules, it calls no route`);
  if (!tenant.operations.has(intent.operation)) return refuse(`tenant "${tenant.name}" may not ${intent.operation}`);
  if (intent.changes && tenant.peekOnly) return refuse(`tenant "${tenant.name}" may only peek (cost 0, no consume)`);
  if (intent.rule !== undefined && !tenant.quotaRules.has(intent.rule))
    return refuse(`tenant "${tenant.name}" may not sync quota rule "${intent.rule}"`);
  return undefined;
}
