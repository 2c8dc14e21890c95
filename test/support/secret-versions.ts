// Secrets Manager's versions and stages as the cache password rotation sees them (its SecretVersions port), for
// the rotation's tests: rotation on, one version current, RotateSecret's new version staged AWSPENDING.
import type { SecretVersions } from "../../functions/core/shared/credential-rotation.ts";

export /** Version "v1" holds `current` as AWSCURRENT. */
class SecretsModel implements SecretVersions {
  rotationEnabled = true;
  readonly values: Map<string, string>;
  readonly stages = new Map<string, string[]>([["v1", ["AWSCURRENT"]]]);

  constructor(current = "old-password") {
    this.values = new Map([["v1", current]]);
  }
  generated = 0;

  /** What RotateSecret does before invoking the function: a new version id staged AWSPENDING, no value yet. */
  startRotation(token: string): void {
    this.stages.set(token, ["AWSPENDING"]);
  }
  current(): string | undefined {
    const [id] = [...this.stages].find(([, s]) => s.includes("AWSCURRENT")) ?? [];
    return id === undefined ? undefined : this.values.get(id);
  }
  async describe() {
    return { rotationEnabled: this.rotationEnabled, stages: Object.fromEntries(this.stages) };
  }
  async value(_: string, stage: "AWSCURRENT" | "AWSPENDING", versionId?: string) {
    const id = [...this.stages].find(
      ([v, s]) => s.includes(stage) && (versionId === undefined || v === versionId),
    )?.[0];
    return id === undefined ? undefined : this.values.get(id);
  }
  async putPending(_: string, versionId: string, value: string) {
    this.values.set(versionId, value);
    this.stages.set(versionId, ["AWSPENDING"]);
  }
  async newPassword() {
    return `new-password-${++this.generated}-0123456789`;
  }
  async makeCurrent(_: string, versionId: string, fromVersionId: string) {
    this.stages.set(fromVersionId, ["AWSPREVIOUS"]);
    this.stages.set(versionId, [...(this.stages.get(versionId) ?? []), "AWSCURRENT"]);
  }
}
