// Every page of the console has its screenshot in docs/console/ (written by `npm run console:screenshots`
// from the same browser run the console's tests make), and docs/console/ holds no page that is gone.
import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { CONSOLE_PAGES } from "../../../scripts/console/page-registry.ts";

const DIR = new URL("../../../docs/console/", import.meta.url);
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

describe("the console's screenshots", () => {
  it("has one PNG per page of the registry, and none for a page the registry lacks", () => {
    const shots = readdirSync(DIR).filter((name) => name.endsWith(".png"));
    expect(shots.sort()).toEqual(CONSOLE_PAGES.map((page) => `${page.id}.png`).sort());
    for (const shot of shots) {
      const bytes = readFileSync(new URL(shot, DIR));
      expect(bytes.subarray(0, 8).equals(PNG_SIGNATURE), shot).toBe(true);
      // a real page, not an empty image: a PNG's width and height, big-endian after the IHDR tag
      expect(bytes.readUInt32BE(16), shot).toBeGreaterThan(400);
      expect(bytes.readUInt32BE(20), shot).toBeGreaterThan(200);
    }
  });
});
