// The gRPC interceptor in a real @grpc/grpc-js server, called by a real client over loopback HTTP/2: unary,
// server-streaming, client-streaming and bidirectional methods. Messages are JSON (gRPC does not mind the
// encoding). The store is a fake, as for the other middleware: the subject is the interceptor (decisions,
// metadata, RESOURCE_EXHAUSTED), not the sync.
import {
  type Client,
  type ClientDuplexStream,
  type ClientReadableStream,
  type ClientWritableStream,
  credentials,
  Metadata,
  type MethodDefinition,
  makeGenericClientConstructor,
  Server,
  ServerCredentials,
  type ServerDuplexStream,
  type ServerReadableStream,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import { afterEach, describe, expect, it } from "vitest";
import { type GrpcCheckOptions, grpcQuotas } from "../../src/middleware/grpc.ts";
import type { QuotaRule } from "../../src/protocol/index.ts";
import { createQuotas } from "../../src/quotas.ts";
import { fakeStore } from "../support/fake-store.ts";

const rule: QuotaRule = {
  mode: "approximate",
  limits: [
    { windowMs: 1_000, max: 100 },
    { windowMs: 5_000, max: 400 },
  ],
  leaseMs: 60_000,
  fallback: "deny",
  slotGroups: 1,
};

type Note = { n: number };
const json = {
  serialize: (value: Note) => Buffer.from(JSON.stringify(value)),
  deserialize: (bytes: Buffer) => JSON.parse(bytes.toString()) as Note,
};
function method(name: string, requestStream: boolean, responseStream: boolean): MethodDefinition<Note, Note> {
  return {
    path: `/demo.Notes/${name}`,
    requestStream,
    responseStream,
    requestSerialize: json.serialize,
    requestDeserialize: json.deserialize,
    responseSerialize: json.serialize,
    responseDeserialize: json.deserialize,
  };
}
const service = {
  echo: method("Echo", false, false),
  count: method("Count", false, true),
  sum: method("Sum", true, false),
  chat: method("Chat", true, true),
};

interface NotesClient extends Client {
  echo(request: Note, metadata: Metadata, callback: (error: ServiceError | null, reply?: Note) => void): unknown;
  count(request: Note, metadata: Metadata): ClientReadableStream<Note>;
  sum(metadata: Metadata, callback: (error: ServiceError | null, reply?: Note) => void): ClientWritableStream<Note>;
  chat(metadata: Metadata): ClientDuplexStream<Note, Note>;
}

const stops: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
});

/** A server with the interceptor, the handlers counting what they received, and a client of it. */
async function serve(options: Partial<GrpcCheckOptions> = {}, keys = ["alice"]) {
  const store = fakeStore({ rule, amount: 2 });
  const quotas = createQuotas({ transport: store.transport, rules: { api: rule } });
  for (const key of keys) quotas.resolve("api", key);
  await quotas.sync();
  const received: number[] = [];
  const server = new Server({
    interceptors: [
      grpcQuotas(quotas, { rule: "api", key: (call) => String(call.metadata.get("x-api-key")[0]), ...options }),
    ],
  });
  server.addService(service, {
    echo: (call: ServerUnaryCall<Note, Note>, callback: (error: null, reply: Note) => void) => {
      received.push(call.request.n);
      callback(null, { n: call.request.n });
    },
    count: (call: ServerWritableStream<Note, Note>) => {
      received.push(call.request.n);
      for (let n = 1; n <= call.request.n; n++) call.write({ n });
      call.end();
    },
    sum: (call: ServerReadableStream<Note, Note>, callback: (error: null, reply: Note) => void) => {
      let total = 0;
      call.on("data", (note: Note) => {
        received.push(note.n);
        total += note.n;
      });
      call.on("end", () => callback(null, { n: total }));
    },
    chat: (call: ServerDuplexStream<Note, Note>) => {
      call.on("data", (note: Note) => {
        received.push(note.n);
        call.write({ n: note.n * 10 });
      });
      call.on("end", () => call.end());
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, bound) =>
      error ? reject(error) : resolve(bound),
    ),
  );
  const Notes = makeGenericClientConstructor(service, "Notes");
  const client = new Notes(`127.0.0.1:${port}`, credentials.createInsecure()) as unknown as NotesClient;
  stops.push(async () => {
    client.close();
    await new Promise((resolve) => server.tryShutdown(resolve));
  });
  return { client, received, store };
}

const as = (key: string) => {
  const metadata = new Metadata();
  metadata.set("x-api-key", key);
  return metadata;
};

/** A unary call's reply, error, and the response headers and trailers it carried. */
function echo(client: NotesClient, n: number, metadata: Metadata) {
  return new Promise<{ reply?: Note; error?: ServiceError; headers?: Metadata }>((resolve) => {
    let headers: Metadata | undefined;
    const call = client.echo({ n }, metadata, (error, reply) =>
      resolve({ ...(reply ? { reply } : {}), ...(error ? { error } : {}), ...(headers ? { headers } : {}) }),
    ) as { on(event: "metadata", listener: (metadata: Metadata) => void): void };
    call.on("metadata", (sent) => {
      headers = sent;
    });
  });
}

/** A stream's messages and how it ended. */
function drain(stream: ClientReadableStream<Note> | ClientDuplexStream<Note, Note>) {
  return new Promise<{ notes: number[]; error?: ServiceError }>((resolve) => {
    const notes: number[] = [];
    stream.on("data", (note: Note) => notes.push(note.n));
    stream.on("error", (error: ServiceError) => resolve({ notes, error }));
    stream.on("end", () => resolve({ notes }));
  });
}

describe("the gRPC interceptor over a real gRPC server and client", () => {
  it("unary: allowed calls reach the handler with the RateLimit fields; the third ends RESOURCE_EXHAUSTED with retry-after, unseen by the handler", async () => {
    const { client, received } = await serve();
    const results = [
      await echo(client, 1, as("alice")),
      await echo(client, 2, as("alice")),
      await echo(client, 3, as("alice")),
    ];
    expect(results.map((result) => result.reply?.n)).toEqual([1, 2, undefined]);
    expect(results[0]?.headers?.getMap()).toMatchObject({
      "ratelimit-limit": "100",
      "ratelimit-remaining": "1",
      "ratelimit-policy": "100;w=1, 400;w=5",
    });
    expect(results[0]?.headers?.get("retry-after")).toEqual([]);
    const denied = results[2]?.error;
    expect(denied?.code).toBe(status.RESOURCE_EXHAUSTED);
    expect(denied?.details).toBe("quota api exhausted");
    expect(denied?.metadata.getMap()).toMatchObject({ "ratelimit-remaining": "0", "retry-after": "1" });
    expect(received).toEqual([1, 2]);
  });

  it("keys are independent: another key's calls are decided by its own allowance", async () => {
    const { client } = await serve({}, ["alice", "bob"]);
    for (let i = 0; i < 2; i++) expect((await echo(client, i, as("alice"))).reply).toEqual({ n: i });
    expect((await echo(client, 2, as("alice"))).error?.code).toBe(status.RESOURCE_EXHAUSTED);
    expect((await echo(client, 9, as("bob"))).reply).toEqual({ n: 9 });
  });

  it("server streaming: an allowed call streams every message; a denied one ends before the handler runs", async () => {
    const { client, received } = await serve();
    expect(await drain(client.count({ n: 3 }, as("alice")))).toEqual({ notes: [1, 2, 3] });
    expect(await drain(client.count({ n: 4 }, as("alice")))).toEqual({ notes: [1, 2, 3, 4] });
    const denied = await drain(client.count({ n: 5 }, as("alice")));
    expect(denied.notes).toEqual([]);
    expect(denied.error?.code).toBe(status.RESOURCE_EXHAUSTED);
    expect(received).toEqual([3, 4]);
  });

  it("bidirectional, per call: one check for the whole stream, every message through", async () => {
    const { client, received, store } = await serve();
    const chat = client.chat(as("alice"));
    const done = drain(chat);
    for (const n of [1, 2, 3, 4, 5]) chat.write({ n });
    chat.end();
    expect(await done).toEqual({ notes: [10, 20, 30, 40, 50] });
    expect(received).toEqual([1, 2, 3, 4, 5]);
    // one of alice's two: the next unary call is allowed, the one after is not
    expect((await echo(client, 1, as("alice"))).reply).toEqual({ n: 1 });
    expect((await echo(client, 2, as("alice"))).error?.code).toBe(status.RESOURCE_EXHAUSTED);
    expect(store.calls.length).toBeGreaterThan(0);
  });

  it("client streaming, per message: the handler gets the messages the allowance covers, then the call ends RESOURCE_EXHAUSTED", async () => {
    const { client, received } = await serve({ per: "message" });
    const reply = new Promise<{ error: ServiceError | null; reply?: Note }>((resolve) => {
      const sum = client.sum(as("alice"), (error, note) => resolve({ error, ...(note ? { reply: note } : {}) }));
      for (const n of [1, 2, 3, 4, 5]) sum.write({ n });
      sum.end();
    });
    const { error } = await reply;
    expect(error?.code).toBe(status.RESOURCE_EXHAUSTED);
    expect(error?.details).toBe("quota api exhausted");
    expect(received).toEqual([1, 2]);
  });

  it("bidirectional, per message, with a cost from the message: a costly message ends the stream", async () => {
    const { client, received } = await serve({
      per: "message",
      cost: (call) => (call.message as Note | undefined)?.n ?? 1,
    });
    const chat = client.chat(as("alice"));
    const done = drain(chat);
    chat.write({ n: 1 });
    chat.write({ n: 5 });
    chat.write({ n: 1 });
    chat.end();
    const { notes, error } = await done;
    expect(notes).toEqual([10]);
    expect(error?.code).toBe(status.RESOURCE_EXHAUSTED);
    expect(received).toEqual([1]);
  });

  it("a rule by method, and a key the SDK refuses ends the call INVALID_ARGUMENT with the reason", async () => {
    const { client, received } = await serve({
      rule: (call) => (call.method === "/demo.Notes/Echo" ? "api" : "none"),
      key: (call) => String(call.metadata.get("x-api-key")[0] ?? ""),
    });
    const missing = await echo(client, 1, new Metadata());
    expect(missing.error?.code).toBe(status.INVALID_ARGUMENT);
    expect(missing.error?.details).toContain("key");
    expect((await echo(client, 2, as("alice"))).reply).toEqual({ n: 2 });
    expect(received).toEqual([2]);
  });
});
