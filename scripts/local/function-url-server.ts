// A local Lambda Function URL: HTTP requests become payload-2.0 events for the handler, and its result
// becomes the HTTP response, as on AWS. With credentials it has AWS_IAM auth as on AWS: each request's SigV4
// signature is checked (sigv4-verify.ts), a bad one is answered 403 without invoking the function, and the
// event carries the caller in requestContext.authorizer.iam; without, auth NONE (no caller).
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type {
  APIGatewayEventRequestContextIAMAuthorizer,
  APIGatewayProxyEventV2,
  APIGatewayProxyStructuredResultV2,
  Context,
} from "aws-lambda";
import { type LocalCredential, SigV4Verifier } from "./sigv4-verify.ts";
import { lambdaContext } from "./sqs-poller.ts";

export type FunctionUrlHandler = (
  event: APIGatewayProxyEventV2,
  context: Context,
) => Promise<APIGatewayProxyStructuredResultV2>;

/** Function URLs accept request bodies up to 6 MB; the handler enforces its own, smaller limit. */
const MAX_REQUEST_BYTES = 6 * 1024 * 1024;
/** The name the invocations' context carries (the check API is the function behind the Function URL). */

/**
 * Runs each invocation on a free handler, one invocation per handler at a time, as Lambda runs one per
 * execution environment: module state (clients, caches, the Powertools instances) is never shared by
 * two invocations at once. When every handler is busy, invocations wait in order. With `perEnvironment`
 * above 1, each handler takes that many invocations at once, as Lambda Managed Instances run several in one
 * execution environment (its module state shared by all of them).
 */
export function dispatcher(handlers: readonly FunctionUrlHandler[], perEnvironment = 1): FunctionUrlHandler {
  if (!Number.isInteger(perEnvironment) || perEnvironment < 1)
    throw new RangeError(`perEnvironment: expected an integer of at least 1, got ${perEnvironment}`);
  // a handler is here once per invocation it can still take
  const idle = Array.from({ length: perEnvironment }, () => handlers).flat();
  const waiting: ((handler: FunctionUrlHandler) => void)[] = [];
  // not async: an async function awaiting the handler in a try/finally cost several promises per invocation
  const release = (handler: FunctionUrlHandler) => {
    const next = waiting.shift();
    if (next) next(handler);
    else idle.push(handler);
  };
  const invoke = (handler: FunctionUrlHandler, event: APIGatewayProxyEventV2, context: Context) => {
    let result: Promise<APIGatewayProxyStructuredResultV2>;
    try {
      result = handler(event, context);
    } catch (error) {
      result = Promise.reject(error);
    }
    result.then(
      () => release(handler),
      () => release(handler),
    );
    return result;
  };
  return (event, context) => {
    const handler = idle.pop();
    if (handler !== undefined) return invoke(handler, event, context);
    return new Promise<FunctionUrlHandler>((resolve) => waiting.push(resolve)).then((free) =>
      invoke(free, event, context),
    );
  };
}

export interface FunctionUrlAuth {
  /** AWS_IAM auth: the keys that may sign, each standing for a principal. */
  credentials: readonly LocalCredential[];
  /** The clock signatures are dated against (default: the system's). */
  now?: () => number;
  /**
   * An unsigned request from a loopback address arrives as this caller: what the function sees on AWS,
   * where the Function URL checks the signature before the function runs. For the bench, whose load
   * generator does not sign. A request that carries a signature is checked against `credentials` as
   * always (a bad one is a 403), and an unsigned one from any other address is a 403.
   */
  trustedCaller?: APIGatewayEventRequestContextIAMAuthorizer["iam"];
}

/**
 * Serves `handlers` (the execution environments of function `functionName`) at a local Function URL, with
 * AWS_IAM auth when `auth` names credentials, `perEnvironment` invocations at once in each (see dispatcher).
 */
export async function startFunctionUrlServer(
  handlers: FunctionUrlHandler | readonly FunctionUrlHandler[],
  port = 0,
  functionName = "tollgate-check-api",
  auth?: FunctionUrlAuth,
  perEnvironment = 1,
): Promise<{ url: string; server: Server; stop(): Promise<void> }> {
  const handler = dispatcher(Array.isArray(handlers) ? handlers : [handlers as FunctionUrlHandler], perEnvironment);
  const trusted = auth?.trustedCaller;
  const verifier = auth ? new SigV4Verifier(auth.credentials, auth.now) : undefined;
  // Callbacks and thens, not an async function awaiting the body and the invocation, and no closure named
  // per request: the promises and functions of those were emulation work the function never pays for on AWS.
  const invocation: Invocation = { handler, functionName };
  const server = createServer((request, response) => {
    readBody(request, response, (body) => {
      if (trusted && request.headers.authorization === undefined && isLoopback(request.socket.remoteAddress)) {
        invoke(invocation, request, response, body, trusted);
      } else if (!verifier) {
        invoke(invocation, request, response, body, undefined);
      } else {
        verifier
          .verify({
            method: request.method ?? "GET",
            target: request.url ?? "/",
            headers: request.headers as Record<string, string>,
            body,
          })
          .then(
            (verified) => {
              // what a Function URL with AWS_IAM answers an unsigned or badly signed request: the function never runs
              if (verified.ok) invoke(invocation, request, response, body, verified.iam);
              else response.writeHead(403, { "content-type": "application/json" }).end('{"Message":"Forbidden"}');
            },
            (error: unknown) => handlerFailed(response, error),
          );
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const address = server.address();
  const url = `http://127.0.0.1:${typeof address === "object" && address ? address.port : port}`;
  return { url, server, stop: () => new Promise((resolve) => server.close(() => resolve())) };
}

/** An address of this machine's loopback interface (IPv4 127/8, IPv6 ::1, or IPv4 127/8 mapped in IPv6). */
export function isLoopback(address: string | undefined): boolean {
  if (address === undefined) return false;
  const v4 = address.startsWith("::ffff:") ? address.slice(7) : address;
  return v4.startsWith("127.") || address === "::1";
}

/** The function behind a Function URL: its execution environments (a dispatcher), and its name. */
interface Invocation {
  handler: FunctionUrlHandler;
  functionName: string;
}

/** One invocation for `request`, its result (or its fault, a 502) written to `response`. */
function invoke(
  { handler, functionName }: Invocation,
  request: IncomingMessage,
  response: ServerResponse,
  body: string,
  iam: APIGatewayEventRequestContextIAMAuthorizer["iam"] | undefined,
): void {
  let result: Promise<APIGatewayProxyStructuredResultV2>;
  try {
    result = handler(toEvent(request, body, iam), lambdaContext(30_000, functionName));
  } catch (error) {
    handlerFailed(response, error);
    return;
  }
  result.then(
    (made) => respond(request.method, response, made),
    (error: unknown) => handlerFailed(response, error),
  );
}

/** What the server answers when the function failed (threw or rejected): a 502. */
function handlerFailed(response: ServerResponse, error: unknown): void {
  response
    .writeHead(502, { "content-type": "application/json" })
    .end(JSON.stringify({ error: { code: "handler_failed", message: (error as Error).message } }));
}

/** The function's result as the HTTP response. */
function respond(method: string | undefined, response: ServerResponse, result: APIGatewayProxyStructuredResultV2) {
  const payload = result.isBase64Encoded ? Buffer.from(result.body ?? "", "base64") : (result.body ?? "");
  // A Function URL buffers the function's whole result: the body goes out with its length, head and
  // body in one write, not in chunked transfer coding (a head, then a chunk, its size and the last one).
  // Not for HEAD, whose length is the GET's (RFC 9110), which the empty body here does not tell.
  const headers =
    method === "HEAD"
      ? result.headers
      : Object.assign({ "content-length": String(Buffer.byteLength(payload)) }, result.headers);
  response.writeHead(result.statusCode ?? 200, headers as Record<string, string>);
  response.end(payload);
}

/**
 * The request's body as text to `done`; a body over MAX_REQUEST_BYTES is answered 413 and a stream error
 * 502 here, `done` never called.
 */
function readBody(request: IncomingMessage, response: ServerResponse, done: (body: string) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  request.on("data", (chunk: Buffer) => {
    size += chunk.length;
    if (size <= MAX_REQUEST_BYTES) chunks.push(chunk);
  });
  request.on("end", () => {
    if (size > MAX_REQUEST_BYTES)
      response.writeHead(413, { "content-type": "application/json" }).end('{"error":{"code":"payload_too_large"}}');
    // a small body arrives in one chunk: decoded as it is, not copied into a new buffer first
    else done(chunks.length === 1 ? (chunks[0] as Buffer).toString("utf8") : Buffer.concat(chunks).toString("utf8"));
  });
  request.on("error", (error) => handlerFailed(response, error));
}

function toEvent(
  request: IncomingMessage,
  body: string,
  iam?: APIGatewayEventRequestContextIAMAuthorizer["iam"],
): APIGatewayProxyEventV2 {
  // a loop, not Object.fromEntries(Object.entries(...).map(...)): this is emulation work on every request
  const headers: Record<string, string> = {};
  for (const name in request.headers) {
    const value = request.headers[name];
    headers[name] = Array.isArray(value) ? value.join(",") : (value ?? "");
  }
  return functionUrlEvent(
    request.method ?? "GET",
    request.url ?? "/",
    body,
    headers,
    request.socket.remoteAddress ?? "127.0.0.1",
    iam,
  );
}

/** A path that a WHATWG URL leaves as it is: segments of letters, digits, "-" and "_", no query. */
const PLAIN_PATH = /^(\/[\w-]+)*\/?$/;

/**
 * The payload 2.0 event a Function URL hands its function for one request; `iam`, the signed caller of a
 * URL with AWS_IAM auth (requestContext.authorizer.iam).
 */
export function functionUrlEvent(
  method: string,
  target: string,
  body: string,
  headers: Record<string, string> = {},
  sourceIp = "127.0.0.1",
  iam?: APIGatewayEventRequestContextIAMAuthorizer["iam"],
): APIGatewayProxyEventV2 {
  // a WHATWG URL only where it could change the path or has a query: on AWS the event comes built, so
  // parsing one per request is emulation work the function never pays for
  const url = PLAIN_PATH.test(target) ? undefined : new URL(target, "http://localhost");
  const path = url ? url.pathname : target;
  const now = Date.now();
  return {
    version: "2.0",
    routeKey: "$default",
    rawPath: path,
    rawQueryString: url ? url.search.slice(1) : "",
    headers,
    ...(url?.search ? { queryStringParameters: Object.fromEntries(url.searchParams) } : {}),
    requestContext: {
      accountId: "anonymous",
      apiId: "local",
      domainName: headers.host ?? "localhost",
      domainPrefix: "local",
      http: { method, path, protocol: "HTTP/1.1", sourceIp, userAgent: headers["user-agent"] ?? "" },
      requestId: randomUUID(),
      routeKey: "$default",
      stage: "$default",
      time: requestTime(now),
      timeEpoch: now,
      ...(iam ? { authorizer: { iam } } : {}),
    },
    ...(body ? { body } : {}),
    isBase64Encoded: false,
  };
}

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const twoDigits = (value: number) => String(value).padStart(2, "0");
let lastSecond = -1;
let lastTime = "";

/**
 * `requestContext.time` as a Function URL writes it ("12/Mar/2020:19:03:58 +0000"): to the second, so it is
 * formatted once a second, not per request (formatting a date is emulation work the function never pays for).
 */
export function requestTime(epochMs: number): string {
  const second = Math.floor(epochMs / 1000);
  if (second !== lastSecond) {
    const date = new Date(second * 1000);
    lastTime =
      `${twoDigits(date.getUTCDate())}/${MONTHS[date.getUTCMonth()]}/${date.getUTCFullYear()}:` +
      `${twoDigits(date.getUTCHours())}:${twoDigits(date.getUTCMinutes())}:${twoDigits(date.getUTCSeconds())} +0000`;
    lastSecond = second;
  }
  return lastTime;
}
