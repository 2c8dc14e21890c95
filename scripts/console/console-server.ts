// `tollgate console`'s web server: on 127.0.0.1 only, it serves the browser modules of web/ and the pages'
// API routes, acting with the operator's own AWS credentials (no new endpoint, no new credential). Since it
// edits live policy, every API request must carry the per-launch token (X-Tollgate-Console-Token, which a
// cross-site page cannot set without a CORS preflight that is never granted), come with a Host of this
// server (no DNS rebinding) and, when it has one, an Origin of this server; a POST must have that Origin.
import { randomBytes, timingSafeEqual } from "node:crypto";
import { readFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { extname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import type { z } from "zod";
import {
  ChangedSinceOpenedError,
  InvalidPolicyError,
  ValidationError,
  WriteConflictError,
} from "../../functions/core/shared/errors.ts";
import type { ConsoleContext } from "./console-context.ts";
import type { ConsolePage, ConsoleRoute } from "./console-page.ts";

export const TOKEN_HEADER = "x-tollgate-console-token";
const WEB_ROOT = fileURLToPath(new URL("./web/", import.meta.url));
const MAX_BODY_BYTES = 1024 * 1024;
const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
};
const SECURITY_HEADERS = {
  "content-security-policy":
    "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
  "x-frame-options": "DENY",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store",
};

export interface ConsoleServer {
  /** The address to open: the start page with the launch's token. */
  url: string;
  origin: string;
  token: string;
  stop(): Promise<void>;
}

/** One field's problem, as the browser shows it next to that field. */
export interface FieldProblem {
  field: string;
  message: string;
}

/** The error an API request is answered with: its status, a message, and each problem by field. */
export function errorReply(error: unknown): { status: number; body: { error: string; problems: FieldProblem[] } } {
  if (error instanceof InvalidPolicyError) {
    const problems = error.issues.map(fieldProblem);
    return { status: 400, body: { error: "invalid policy", problems } };
  }
  if (error instanceof ValidationError)
    return { status: 400, body: { error: error.message, problems: [{ field: error.path, message: error.message }] } };
  if (error instanceof ChangedSinceOpenedError || error instanceof WriteConflictError)
    return { status: 409, body: { error: error.message, problems: [] } };
  // the service refused or did not answer (no credentials, a missing queue, Redis down): said as it is
  const { name, message } = error as Error;
  return { status: 502, body: { error: `${name}: ${message}`, problems: [] } };
}

/** "quotas[0].mode: expected ..." as its field and message. */
function fieldProblem(issue: string): FieldProblem {
  const at = issue.indexOf(": ");
  return at < 0 ? { field: "", message: issue } : { field: issue.slice(0, at), message: issue.slice(at + 2) };
}

export async function startConsoleServer(
  context: ConsoleContext,
  pages: readonly ConsolePage[],
  options: { port?: number } = {},
): Promise<ConsoleServer> {
  const token = randomBytes(24).toString("base64url");
  const routes = new Map<string, ConsoleRoute>();
  for (const page of pages)
    for (const r of page.routes) routes.set(`${r.method} /api/${page.id}${r.path ? `/${r.path}` : ""}`, r);
  let origin = "";
  let hosts: string[] = [];

  const server = createServer((request, response) => {
    serve(request, response).catch((error: unknown) => send(response, 500, { error: String(error), problems: [] }));
  });

  async function serve(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const url = new URL(request.url ?? "/", origin);
    if (!hosts.includes(request.headers.host ?? ""))
      return send(response, 421, { error: "unknown Host", problems: [] });
    if (!url.pathname.startsWith("/api/")) return serveFile(url.pathname, request, response);
    const requestOrigin = request.headers.origin;
    if (requestOrigin !== undefined && requestOrigin !== origin)
      return send(response, 403, { error: `Origin ${requestOrigin} is not this console's`, problems: [] });
    if (request.method === "POST" && requestOrigin === undefined)
      return send(response, 403, { error: "a POST must carry this console's Origin", problems: [] });
    if (!tokenMatches(request.headers[TOKEN_HEADER], token))
      return send(response, 403, { error: `missing or wrong ${TOKEN_HEADER}`, problems: [] });
    if (url.pathname === "/api/pages")
      return send(response, 200, { pages: pages.map(({ id, title }) => ({ id, title })) });
    const found = routes.get(`${request.method} ${url.pathname}`);
    if (!found) return send(response, 404, { error: `no route ${request.method} ${url.pathname}`, problems: [] });
    try {
      const raw = request.method === "GET" ? Object.fromEntries(url.searchParams) : await jsonBody(request);
      const parsed = found.input.safeParse(raw);
      if (!parsed.success) return send(response, 400, inputProblems(parsed.error));
      return send(response, 200, await found.handle(context, parsed.data));
    } catch (error) {
      const { status, body } = errorReply(error);
      return send(response, status, body);
    }
  }

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as { port: number };
  origin = `http://127.0.0.1:${port}`;
  hosts = [`127.0.0.1:${port}`, `localhost:${port}`];
  return {
    url: `${origin}/?token=${token}`,
    origin,
    token,
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function tokenMatches(given: string | string[] | undefined, token: string): boolean {
  if (typeof given !== "string") return false;
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

function inputProblems(error: z.ZodError): { error: string; problems: FieldProblem[] } {
  const problems = error.issues.map((issue) => ({ field: issue.path.join("."), message: issue.message }));
  return { error: problems.map((p) => `${p.field}: ${p.message}`).join("; "), problems };
}

async function jsonBody(request: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of request) {
    bytes += (chunk as Buffer).length;
    if (bytes > MAX_BODY_BYTES) throw new ValidationError("body", `larger than ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw new ValidationError("body", "not JSON");
  }
}

async function serveFile(pathname: string, request: IncomingMessage, response: ServerResponse): Promise<void> {
  if (request.method !== "GET") return send(response, 405, { error: "GET only", problems: [] });
  const relative = pathname === "/" ? "index.html" : normalize(pathname).replace(/^[/\\]+/, "");
  const type = TYPES[extname(relative)];
  if (!type || relative.startsWith("..")) return send(response, 404, { error: "not found", problems: [] });
  try {
    const body = await readFile(join(WEB_ROOT, relative));
    response.writeHead(200, { ...SECURITY_HEADERS, "content-type": type });
    response.end(body);
  } catch {
    send(response, 404, { error: "not found", problems: [] });
  }
}

function send(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { ...SECURITY_HEADERS, "content-type": "application/json; charset=utf-8" });
  response.end(JSON.stringify(body));
}
