// The shared HTTP layer of the Function URL handlers, on plain payload 2.0 events: routing (404, 405 with
// Allow, HEAD as GET without content), the body rules, and how refusals become replies.
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import { describe, expect, it } from "vitest";
import { StoreUnavailableError, ValidationError } from "../../../functions/core/shared/errors.ts";
import {
  actionFor,
  HttpError,
  json,
  MAX_BODY_BYTES,
  parseJsonObject,
  type Routes,
  refusal,
} from "../../../functions/handlers/http.ts";

const event = (method: string, rawPath: string, body?: string) =>
  ({
    rawPath,
    body,
    isBase64Encoded: false,
    requestContext: { http: { method } },
  }) as unknown as APIGatewayProxyEventV2;

const routes: Routes = {
  "/v1/health": { GET: async () => json(200, { ok: true }) },
  "/v1/limit": { POST: async (body) => json(200, body) },
};

const refusedWith = (call: () => unknown) => {
  try {
    call();
  } catch (error) {
    return refusal(error);
  }
  throw new Error("expected a refusal");
};

describe("routing", () => {
  it("runs the route's action for its method", async () => {
    expect((await actionFor(routes, event("POST", "/v1/limit"))({ key: "k" }, undefined)).body).toBe('{"key":"k"}');
  });

  it("answers 404 for an unknown path and 405 with Allow (HEAD wherever GET is) for a wrong method", () => {
    expect(refusedWith(() => actionFor(routes, event("GET", "/v2/limit")))?.statusCode).toBe(404);
    const wrong = refusedWith(() => actionFor(routes, event("POST", "/v1/health")));
    expect(wrong?.statusCode).toBe(405);
    expect(wrong?.headers).toMatchObject({ allow: "GET, HEAD" });
    expect(refusedWith(() => actionFor(routes, event("GET", "/v1/limit")))?.headers).toMatchObject({ allow: "POST" });
  });

  it("answers HEAD with GET's status and headers and no content", async () => {
    const head = await actionFor(routes, event("HEAD", "/v1/health"))({}, undefined);
    expect(head).toMatchObject({ statusCode: 200, headers: { "content-type": "application/json" }, body: "" });
  });
});

describe("the body", () => {
  it("is a JSON object of at most MAX_BODY_BYTES, decoded from base64 when the event says so", () => {
    expect(parseJsonObject(event("POST", "/", '{"a":1}'))).toEqual({ a: 1 });
    const encoded = { ...event("POST", "/", Buffer.from('{"b":2}').toString("base64")), isBase64Encoded: true };
    expect(parseJsonObject(encoded)).toEqual({ b: 2 });
    expect(refusedWith(() => parseJsonObject(event("POST", "/", "x".repeat(MAX_BODY_BYTES + 1))))?.statusCode).toBe(
      413,
    );
    for (const text of ["{", "[1]", "null", "3"]) {
      expect(JSON.parse(refusedWith(() => parseJsonObject(event("POST", "/", text)))?.body as string)).toMatchObject({
        error: { code: "invalid_request", path: "body" },
      });
    }
  });
});

describe("refusals", () => {
  it("turn HttpError and the core's ValidationError into replies naming the field, and leave faults alone", () => {
    const http = refusal(new HttpError(400, "invalid_request", "bad", "onStoreError"));
    expect(JSON.parse(http?.body as string)).toEqual({
      error: { code: "invalid_request", message: "bad", path: "onStoreError" },
    });
    const validation = refusal(new ValidationError("limits[0].max", "expected a positive integer"));
    expect(validation?.statusCode).toBe(400);
    expect(JSON.parse(validation?.body as string).error.path).toBe("limits[0].max");
    expect(refusal(new StoreUnavailableError("down"))).toBeUndefined();
    expect(refusal(new Error("bug"))).toBeUndefined();
  });
});
