// @tollgate/quotas/protocol: what the SDK and the Tollgate service must agree on, in one place. The quota
// sync protocol (wire.ts, and sync-schemas.ts for the HTTP bodies), every Redis key format (keys.ts),
// Redis Functions libraries and how they are called (redis-functions.ts), and what an error reply says
// (redis-replies.ts), and how a Lua script is joined from its parts (lua-chunks.ts). The SDK's transports and the service (functions/) both import it, through this
// entry; it imports neither of them.
export { WireError } from "./errors.ts";
export * from "./keys.ts";
export * from "./keys-store-epoch.ts";
export * from "./lua-chunks.ts";
export * from "./redis-auth.ts";
export * from "./redis-functions.ts";
export * from "./redis-replies.ts";
export * from "./sync-schemas.ts";
export * from "./wire.ts";
