// The Secrets Manager rotation function of the cache passwords (docs/deploy.md): the event's secret, version
// and step, validated, handed to the rotation core; a failed step throws, and Secrets Manager retries it.
import type { Logger } from "@aws-lambda-powertools/logger";
import { z } from "zod";
import { ROTATION_STEPS, type RotationRequest } from "../core/shared/credential-rotation.ts";
import { parseOrThrow } from "../core/shared/validation.ts";

const rotationEvent = z.object({
  SecretId: z.string("required: the secret being rotated").min(1),
  ClientRequestToken: z.string("required: the version being rotated in").min(1),
  Step: z.enum(ROTATION_STEPS, `expected one of ${ROTATION_STEPS.join(", ")}`),
});

export interface CacheRotationHandlerDeps {
  rotate: (request: RotationRequest) => Promise<void>;
  logger: Pick<Logger, "info" | "error">;
}

export function makeCacheRotationHandler(deps: CacheRotationHandlerDeps) {
  return async (event: unknown): Promise<void> => {
    const { SecretId, ClientRequestToken, Step } = parseOrThrow(rotationEvent, event, "event");
    const request = { secretId: SecretId, token: ClientRequestToken, step: Step };
    try {
      await deps.rotate(request);
    } catch (error) {
      deps.logger.error("rotation step failed; Secrets Manager retries it", { ...request, error: error as Error });
      throw error;
    }
  };
}
