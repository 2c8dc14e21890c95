// The browser the console is driven in: Debian's chromium (scripts/ensure-deps.mjs installs it, as it
// installs redis-server), launched headless by playwright-core, which downloads no browser of its own.
// CHROMIUM_PATH names another build.
import { existsSync } from "node:fs";
import { type Browser, chromium } from "playwright-core";

const CANDIDATES = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"];

export function chromiumPath(): string {
  const chosen = process.env.CHROMIUM_PATH ?? CANDIDATES.find((path) => existsSync(path));
  if (!chosen || !existsSync(chosen))
    throw new Error(
      `no Chromium at ${chosen ?? CANDIDATES.join(", ")}: run \`node scripts/ensure-deps.mjs\` (apt-get install -y chromium) or set CHROMIUM_PATH`,
    );
  return chosen;
}

/** The environment without libfaketime's preload (`npm run test:shifted`): the browser keeps the real clock, as Redis does. */
function realClockEnvironment(): Record<string, string> {
  const { LD_PRELOAD: _preload, FAKETIME: _faketime, DONT_FAKE_MONOTONIC: _monotonic, ...rest } = process.env;
  return Object.fromEntries(Object.entries(rest).filter((entry): entry is [string, string] => entry[1] !== undefined));
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    env: realClockEnvironment(),
    // as root (CI, containers) Chromium refuses its sandbox; /dev/shm is small in containers
    args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
  });
}
