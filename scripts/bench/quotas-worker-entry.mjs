// Worker threads do not inherit tsx's loader on Node 20: this entry registers it, then loads the worker.
import { register } from "tsx/esm/api";

register();
await import("./quotas-worker.ts");
