// The decision archive's buffer over its writer port: adding never waits or throws, what cannot be kept or
// written is counted as lost, chunks are sealed by size and written in order of sealing, and a flush waits
// no longer than it is told.
import { describe, expect, it } from "vitest";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import { type ArchiveChunk, DecisionArchive } from "../../../functions/core/shared/decision-archive.ts";

function memoryWriter(behaviour: { fail?: number; hang?: boolean } = {}) {
  const chunks: ArchiveChunk[] = [];
  let failures = behaviour.fail ?? 0;
  let calls = 0;
  return {
    chunks,
    calls: () => calls,
    write: async (chunk: ArchiveChunk) => {
      calls++;
      if (behaviour.hang) return new Promise<void>(() => {});
      if (failures > 0) {
        failures--;
        throw new Error("store refused");
      }
      chunks.push(chunk);
    },
  };
}

const lines = (chunks: ArchiveChunk[]) => chunks.flatMap((chunk) => chunk.body.split("\n").filter(Boolean));

describe("the decision archive", () => {
  it("writes every line once, as NDJSON chunks sealed at chunkBytes, stamped with the clock", async () => {
    const writer = memoryWriter();
    const archive = new DecisionArchive({ writer, clock: fixedClock(1_795_000_000_000), chunkBytes: 100 });
    const added = Array.from({ length: 50 }, (_, i) => JSON.stringify({ i }));
    for (const line of added) archive.add(line);
    await archive.flush();
    expect(lines(writer.chunks).sort()).toEqual([...added].sort());
    expect(writer.chunks.length).toBeGreaterThan(1);
    expect(writer.chunks.every((chunk) => chunk.body.length <= 100 + 10 && chunk.body.endsWith("\n"))).toBe(true);
    expect(writer.chunks.every((chunk) => chunk.sealedAt === 1_795_000_000_000)).toBe(true);
    expect(archive.stats()).toEqual({ archived: 50, lost: 0, pending: 0 });
  });

  it("counts a line it has no room for as lost, without throwing, keeps what fits, and reports the losses at once", async () => {
    const writer = memoryWriter();
    const lost: number[] = [];
    const archive = new DecisionArchive({
      writer,
      clock: fixedClock(0),
      maxBufferBytes: 30,
      chunkBytes: 1_000,
      onLost: (records) => lost.push(records),
    });
    for (let i = 0; i < 5; i++) archive.add("0123456789"); // 11 bytes each: two fit
    expect(archive.stats()).toEqual({ archived: 0, lost: 3, pending: 2 });
    await archive.flush();
    // told once for the three, not once a line
    expect(lost).toEqual([3]);
    expect(archive.stats()).toEqual({ archived: 2, lost: 3, pending: 0 });
    // written lines free their room
    archive.add("0123456789");
    expect(archive.stats().lost).toBe(3);
  });

  it("retries a failed write, and counts the chunk's lines as lost once every attempt failed", async () => {
    const retried = memoryWriter({ fail: 2 });
    const archive = new DecisionArchive({ writer: retried, clock: fixedClock(0), attempts: 3 });
    archive.add("a");
    await archive.flush();
    expect(archive.stats()).toEqual({ archived: 1, lost: 0, pending: 0 });

    const failing = memoryWriter({ fail: 99 });
    const reasons: string[] = [];
    const doomed = new DecisionArchive({
      writer: failing,
      clock: fixedClock(0),
      attempts: 2,
      onLost: (_records, reason) => reasons.push(reason),
    });
    doomed.add("a");
    doomed.add("b");
    await doomed.flush();
    expect(failing.calls()).toBe(2);
    expect(doomed.stats()).toEqual({ archived: 0, lost: 2, pending: 0 });
    expect(reasons).toEqual(["write-failed"]);
  });

  it("counts a line of many decisions as that many, archived, refused for room or lost to a failed write", async () => {
    const writer = memoryWriter();
    const lost: number[] = [];
    const archive = new DecisionArchive({
      writer,
      clock: fixedClock(0),
      maxBufferBytes: 30,
      onLost: (records) => lost.push(records),
    });
    archive.add("batch-of-10000", 10_000); // 15 bytes
    archive.add("another-batch-7", 7); // 16 bytes: no room
    expect(archive.stats()).toEqual({ archived: 0, lost: 7, pending: 10_000 });
    await archive.flush();
    expect(archive.stats()).toEqual({ archived: 10_000, lost: 7, pending: 0 });
    expect(writer.chunks.map((chunk) => chunk.records)).toEqual([10_000]);
    expect(lost).toEqual([7]);

    const doomed = new DecisionArchive({ writer: memoryWriter({ fail: 99 }), clock: fixedClock(0), attempts: 1 });
    doomed.add("batch", 1_024);
    doomed.add("single");
    await doomed.flush();
    expect(doomed.stats()).toEqual({ archived: 0, lost: 1_025, pending: 0 });
  });

  it("a flush returns by its deadline while the writer hangs, the lines still pending", async () => {
    const archive = new DecisionArchive({ writer: memoryWriter({ hang: true }), clock: fixedClock(0) });
    archive.add("a");
    // a flush that waited for the writer would never resolve (the test would time out)
    await archive.flush(50);
    expect(archive.stats()).toEqual({ archived: 0, lost: 0, pending: 1 });
  });

  it("flushDue writes nothing before maxAgeMs, and the open chunk once it is that old", async () => {
    const writer = memoryWriter();
    const clock = fixedClock(1_000);
    const archive = new DecisionArchive({ writer, clock, maxAgeMs: 1_000 });
    archive.add("a");
    clock.advance(999);
    await archive.flushDue();
    expect(writer.calls()).toBe(0);
    clock.advance(1);
    await archive.flushDue();
    expect(lines(writer.chunks)).toEqual(["a"]);
  });
});
