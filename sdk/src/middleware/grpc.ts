// gRPC server interceptor (@grpc/grpc-js ≥ 1.10) for unary and streaming methods: each call is decided
// locally (no I/O) when its metadata arrives, and with `per: "message"` each message a client streams in
// is decided too. A denied call ends with RESOURCE_EXHAUSTED before the handler sees it, the RateLimit
// fields and `retry-after` in its trailers. The sync loop runs on its own timers: call quotas.start() once.
//
//   new Server({ interceptors: [grpcQuotas(quotas, { rule: "api", key: (call) => String(call.metadata.get("x-api-key")[0]) })] })
import {
  Metadata,
  ServerInterceptingCall,
  type ServerInterceptingCallInterface,
  type ServerInterceptor,
  status,
} from "@grpc/grpc-js";
import type { Decision } from "../decision.ts";
import type { Quotas } from "../quotas.ts";
import { type CheckOptions, decisionHeaders, deniedBody, ruleOf } from "./options.ts";

/** What a gRPC call is checked by: the method's path (`/package.Service/Method`) and the client's metadata. */
export interface GrpcCall {
  method: string;
  metadata: Metadata;
  /** The message a check is for, with `per: "message"` (absent for the call's own check). */
  message?: unknown;
}

export interface GrpcCheckOptions extends CheckOptions<GrpcCall> {
  /**
   * "call" (default): one check per call, when its metadata arrives. "message": one per message the client
   * sends (each of a client or bidirectional stream's messages, a unary or server-streaming call's one
   * request), so a long stream cannot outspend its quota; the call ends at the first denied message.
   */
  per?: "call" | "message";
}

/** The RateLimit fields of a decision as gRPC metadata (keys lower-case, as HTTP/2 carries them). */
function decisionMetadata(decision: Readonly<Decision>): Metadata {
  const metadata = new Metadata();
  for (const [name, value] of Object.entries(decisionHeaders(decision))) metadata.set(name.toLowerCase(), value);
  return metadata;
}

function merge(into: Metadata, from: Metadata): Metadata {
  for (const [name, value] of Object.entries(from.getMap())) into.set(name, value);
  return into;
}

export function grpcQuotas(quotas: Quotas, options: GrpcCheckOptions): ServerInterceptor {
  return (methodDescriptor, call: ServerInterceptingCallInterface) => {
    let metadataIn: Metadata | undefined;
    let allowedFields: Metadata | undefined;
    let ended = false;

    /** Decides one check; a denial or a failing key or cost ends the call. Returns whether to go on. */
    const decide = (request: GrpcCall): boolean => {
      let rule: string;
      let decision: Readonly<Decision>;
      try {
        rule = ruleOf(options, request);
        decision = quotas.check(rule, options.key(request), options.cost?.(request) ?? 1);
      } catch (error) {
        // a key or cost the SDK refuses is the caller's request at fault, like a 400
        ended = true;
        call.sendStatus({ code: status.INVALID_ARGUMENT, details: (error as Error).message });
        return false;
      }
      if (!decision.allowed) {
        ended = true;
        call.sendStatus({
          code: status.RESOURCE_EXHAUSTED,
          details: deniedBody(rule).error.message,
          metadata: decisionMetadata(decision),
        });
        return false;
      }
      // response metadata goes out once: the first allowed decision's fields ride on it
      if (options.headers !== false) allowedFields ??= decisionMetadata(decision);
      return true;
    };

    return new ServerInterceptingCall(call, {
      start: (next) => {
        next({
          onReceiveMetadata: (metadata, nextMetadata) => {
            metadataIn = metadata;
            if (options.per === "message" || decide({ method: methodDescriptor.path, metadata })) {
              nextMetadata(metadata);
            }
          },
          onReceiveMessage: (message, nextMessage) => {
            if (ended) return;
            if (options.per !== "message") return nextMessage(message);
            const metadata = metadataIn ?? new Metadata();
            if (decide({ method: methodDescriptor.path, metadata, message })) nextMessage(message);
          },
          onReceiveHalfClose: (nextHalfClose) => {
            if (!ended) nextHalfClose();
          },
        });
      },
      sendMetadata: (metadata, nextMetadata) => {
        nextMetadata(allowedFields ? merge(metadata, allowedFields) : metadata);
      },
    });
  };
}
