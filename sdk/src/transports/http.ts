// HTTP transport, for services outside the VPC: POST /v1/quotas/sync on the check API's Function URL,
// SigV4-signed when signing is configured (AWS_IAM auth). Same request and reply as the direct transport;
// the check API's clock is the store's `now`.
import { QuotasConfigError, StoreUnreachableError, SyncRejectedError } from "../errors.ts";
import { parseSyncReply, type SyncReply, type SyncRequest, WireError } from "../protocol/index.ts";
import type { QuotaTransport } from "../quotas.ts";
import { type Signer, type SigningOptions, sigV4Signer } from "./sigv4.ts";

export interface HttpTransportOptions {
  /** The Function URL (https://<id>.lambda-url.<region>.on.aws/) or the local one. */
  url: string;
  /** Sign each call (AWS_IAM Function URLs); omit for a URL without auth (local stack). */
  signing?: SigningOptions;
  /** A call without a reply after this long counts as unreachable (default 2,000 ms: a Lambda cold start). */
  timeoutMs?: number;
  /**
   * Send strict spend stamps (`spentAgo`), which count spent tokens from when they were spent rather than
   * from their report. Default false: a check API deployed before stamps refuses the field (400), so
   * turn it on once the service is upgraded.
   */
  spendStamps?: boolean;
}

/**
 * Statuses that say the store did not answer (or its answer was lost): the request goes again as is. Every
 * 5xx, and 429 (a throttle before the function ran); any other 4xx is the route's answer.
 */
function unanswered(status: number): boolean {
  return status === 429 || (status >= 500 && status <= 599);
}

export function httpTransport(options: HttpTransportOptions): QuotaTransport {
  let endpoint: URL;
  try {
    endpoint = new URL("/v1/quotas/sync", options.url);
  } catch {
    throw new QuotasConfigError("url", `not a URL: ${options.url}`);
  }
  const timeoutMs = options.timeoutMs ?? 2_000;
  let signer: Promise<Signer> | undefined;
  return {
    async sync(request: SyncRequest): Promise<SyncReply> {
      const body = JSON.stringify(options.spendStamps ? request : withoutStamps(request));
      let headers: Record<string, string> = { "content-type": "application/json" };
      if (options.signing) {
        signer ??= sigV4Signer(options.signing);
        headers = await (await signer)(endpoint, headers, body);
      }
      let response: Response;
      try {
        response = await fetch(endpoint, { method: "POST", headers, body, signal: AbortSignal.timeout(timeoutMs) });
      } catch (error) {
        throw new StoreUnreachableError(`POST ${endpoint.pathname}: ${(error as Error).message}`, { cause: error });
      }
      const text = await response.text();
      // 503: the check API could not reach Redis (or a Lambda throttle): the store is unreachable for now.
      // 500: Redis answered with an error or the function failed, possibly after the script ran; 502 and
      // 504: the function failed or timed out behind the gateway. Each may have applied the sync, so it is
      // sent again as is (same seq): the store answers `duplicate` if it was, never counting twice
      if (unanswered(response.status)) {
        throw new StoreUnreachableError(`POST ${endpoint.pathname}: ${response.status} ${text}`);
      }
      if (!response.ok) {
        throw new SyncRejectedError(`POST ${endpoint.pathname}: ${response.status} ${text}`, {
          status: response.status,
        });
      }
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        throw new WireError("reply", "not JSON");
      }
      return parseSyncReply(json, request);
    },
  };
}

/** The request without strict spend stamps: every spent token counted from the report, as before stamps. */
function withoutStamps(request: SyncRequest): SyncRequest {
  if (!request.entries.some((entry) => entry.spentAgo !== undefined)) return request;
  return { ...request, entries: request.entries.map(({ spentAgo: _, ...entry }) => entry) };
}
