// Open-loop Poisson load over HTTP, a process of its own (forked by express-front.ts): the seeded arrivals of
// the instance's direct schedule, each a GET on a kept-alive connection sent when due, whatever the answers.
//
//   node --import tsx scripts/chaos/http-load-main.ts '<HttpLoadConfig JSON>'
import { Agent, request } from "node:http";
import { referenceClock } from "./messages.ts";
import { arrivals, seededRandom } from "./seeded.ts";

export interface HttpLoadConfig {
  port: number;
  /** The reference clock's origin (messages.ts). */
  origin: string;
  from: number;
  to: number;
  perSecond: number;
  seed: number;
}

const config = JSON.parse(process.argv[2] ?? "{}") as HttpLoadConfig;
const now = referenceClock(BigInt(config.origin));
const agent = new Agent({ keepAlive: true, maxSockets: 64 });
const schedule = arrivals(seededRandom(config.seed), config.perSecond, config.from, config.to);
let next = 0;
let open = 0;
const send = () => {
  open++;
  const call = request({ host: "127.0.0.1", port: config.port, path: "/", agent }, (response) => {
    response.resume();
    response.on("end", () => open--);
  });
  call.on("error", () => open--);
  call.end();
};
const tick = () => {
  const t = now();
  while (next < schedule.length && (schedule[next] as number) <= t) {
    send();
    next++;
  }
  if (t < config.to) setTimeout(tick, 1);
  else {
    // the answers still on the wire, then out (a server that stopped answering ends it after 5 s)
    const end = Date.now() + 5_000;
    const drain = () => {
      if (open > 0 && Date.now() < end) {
        setTimeout(drain, 5);
        return;
      }
      agent.destroy();
      process.exit(0);
    };
    drain();
  }
};
tick();
