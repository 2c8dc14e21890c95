// A fault proxy on loopback in front of an HTTP service (the QuotaSync route, the S3 emulator): passes requests
// through, or answers a 5xx, adds latency, or drops the connection, as the nemesis sets it; with `faults`, only
// the requests it picks (the bucket's, not the queues' of the same emulator).
import { createServer, request as httpRequest, type Server } from "node:http";

export type ProxyFault =
  | { kind: "pass" }
  | { kind: "status"; status: number }
  | { kind: "latency"; ms: number }
  | { kind: "drop" };

export interface FaultProxy {
  url: string;
  fault: ProxyFault;
  stop(): Promise<void>;
}

export async function startFaultProxy(
  target: () => string,
  faults: (path: string) => boolean = () => true,
): Promise<FaultProxy> {
  const proxy: FaultProxy = { url: "", fault: { kind: "pass" }, stop: async () => {} };
  const server: Server = createServer((incoming, outgoing) => {
    const fault: ProxyFault = faults(incoming.url ?? "/") ? proxy.fault : { kind: "pass" };
    if (fault.kind === "drop") {
      incoming.socket.destroy();
      return;
    }
    if (fault.kind === "status") {
      incoming.resume();
      outgoing.writeHead(fault.status, { "content-type": "application/json" }).end('{"error":{"code":"injected"}}');
      return;
    }
    const forward = () => {
      const upstream = httpRequest(
        new URL(incoming.url ?? "/", target()),
        { method: incoming.method, headers: incoming.headers },
        (reply) => {
          outgoing.writeHead(reply.statusCode ?? 502, reply.headers);
          reply.pipe(outgoing);
        },
      );
      // the function behind it is gone (restarting): the client sees the connection fail, as on AWS a 5xx
      upstream.on("error", () => incoming.socket.destroy());
      incoming.pipe(upstream);
    };
    if (fault.kind === "latency") setTimeout(forward, fault.ms);
    else forward();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  proxy.url = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
  proxy.stop = () =>
    new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return proxy;
}
