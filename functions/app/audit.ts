// The audit trail of rules changes: one structured line (JSON, on stderr) for every change an operator
// makes to the policy or the quota rules (the CLI), naming who (the operating system
// user and AWS profile of the process: the operator tenant's principal signs the writes themselves), what
// and the versions before and after (docs/tenants.md).
import { userInfo } from "node:os";

export interface AuditEntry {
  action: "policy-upload" | "quota-rule-set" | "quota-rule-remove" | "quota-rule-revoke";
  [field: string]: unknown;
}

/** Where audit lines go (stderr unless a caller, such as a test, listens). */
let sink: (line: string) => void = (line) => process.stderr.write(`${line}\n`);

export function setAuditSink(next: (line: string) => void): () => void {
  const previous = sink;
  sink = next;
  return () => {
    sink = previous;
  };
}

export function audit(entry: AuditEntry): void {
  const actor = { user: safeUser(), ...(process.env.AWS_PROFILE ? { profile: process.env.AWS_PROFILE } : {}) };
  const { action, ...fields } = entry;
  sink(JSON.stringify({ audit: action, at: new Date().toISOString(), actor, ...fields }));
}

function safeUser(): string {
  try {
    return userInfo().username;
  } catch {
    return "unknown";
  }
}
