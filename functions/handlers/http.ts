// The HTTP layer of the Function URL handlers: JSON replies, the request body (size, a JSON object), a
// route table answering 404, 405 (with Allow) and HEAD, and the errors every route maps the same way.
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from "aws-lambda";
import { MAX_SYNC_BODY_BYTES } from "../../sdk/src/protocol/index.ts";
import { ValidationError } from "../core/shared/errors.ts";
import type { Tenant } from "../core/shared/tenants.ts";
import { repeatedMember } from "./json-members.ts";

/** Every route's body limit: the quota wire protocol's, which the SDK sizes its sync requests against. */
export const MAX_BODY_BYTES = MAX_SYNC_BODY_BYTES;

export type HttpResponse = APIGatewayProxyStructuredResultV2;
/** A route's work for one request: its body, and the tenant it runs as (undefined on a route of no tenant). */
export type Action = (body: Record<string, unknown>, tenant: Tenant | undefined) => Promise<HttpResponse>;
/** Path -> method -> action. */
export type Routes = Record<string, Partial<Record<"GET" | "POST", Action>>>;

/** A request refused before it reached the core; its message is for the caller. */
export class HttpError extends Error {
  override name = "HttpError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly path?: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

export const json = (status: number, body: unknown, headers: Record<string, string> = {}): HttpResponse => ({
  statusCode: status,
  // Object.assign, not a spread: this runs on every reply, and V8's object spread costs about 1 µs
  headers: Object.assign({ "content-type": "application/json" }, headers),
  body: JSON.stringify(body),
});

/** The body as a JSON object, at most MAX_BODY_BYTES, no member given twice; HttpError 413 or 400 otherwise. */
export function parseJsonObject(event: APIGatewayProxyEventV2): Record<string, unknown> {
  const raw = event.body ?? "";
  const text = event.isBase64Encoded ? Buffer.from(raw, "base64").toString("utf8") : raw;
  // a UTF-16 code unit is at most 3 bytes of UTF-8: a short text is not counted (a call into C++ per request)
  if (text.length > MAX_BODY_BYTES / 3 && Buffer.byteLength(text) > MAX_BODY_BYTES)
    throw new HttpError(413, "payload_too_large", `body over ${MAX_BODY_BYTES} bytes`);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new HttpError(400, "invalid_request", `not valid JSON: ${(error as Error).message}`, "body");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw new HttpError(400, "invalid_request", "expected a JSON object", "body");
  const repeated = repeatedMember(text, body);
  if (repeated !== undefined) throw new HttpError(400, "invalid_request", `${repeated}: given twice`, repeated);
  return body as Record<string, unknown>;
}

/** The Allow field of a route: its methods, and HEAD wherever GET is. */
const allowed = (route: Partial<Record<string, Action>>) =>
  [...Object.keys(route), ...("GET" in route ? ["HEAD"] : [])].join(", ");

/**
 * The action for the request's path and method, or HttpError 404 / 405 (with Allow). HEAD runs the GET
 * action and answers without the content (RFC 9110: same status and header fields).
 */
export function actionFor(routes: Routes, event: APIGatewayProxyEventV2): Action {
  const method = event.requestContext.http.method.toUpperCase();
  const route: Partial<Record<string, Action>> | undefined = routes[event.rawPath];
  if (!route) throw new HttpError(404, "not_found", `no route ${event.rawPath}`);
  const action = route[method] ?? (method === "HEAD" ? route.GET : undefined);
  if (!action) {
    throw new HttpError(
      405,
      "method_not_allowed",
      `${method} not allowed on ${event.rawPath}; use ${allowed(route)}`,
      undefined,
      {
        allow: allowed(route),
      },
    );
  }
  if (method !== "HEAD") return action;
  return async (body, tenant) => ({ ...(await action(body, tenant)), body: "" });
}

/** The reply to a refused request (HttpError, or a ValidationError from the core: 400); undefined for faults. */
export function refusal(error: unknown): HttpResponse | undefined {
  if (error instanceof HttpError) {
    const { status, code, message, path, headers } = error;
    return json(status, { error: { code, message, ...(path ? { path } : {}) } }, headers);
  }
  if (error instanceof ValidationError) {
    return json(400, { error: { code: "invalid_request", message: error.message, path: error.path } });
  }
  return undefined;
}
