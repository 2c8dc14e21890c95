// The decision archive's buffer: decisions as NDJSON lines (a line holds one decision, or a whole campaign
// batch's: archive-lines.ts), kept in a bounded buffer and written in
// chunks through the ArchiveWriter port (S3 objects locally, Firehose records on AWS). Adding a line never
// waits and never throws: a line the buffer has no room for, or a chunk every write attempt failed, is lost
// and counted, never a failed decision.
import type { Clock } from "./clock.ts";

/** Where the archive's objects go in the bucket, under `dt=YYYY-MM-DD/hour=HH/` partitions. */
export const DEFAULT_ARCHIVE_PREFIX = "archive/decisions/";

/** Where decisions' lines go (DecisionArchive): never waits, never throws. */
export interface DecisionLog {
  /** One line holding `records` decisions (default 1): kept, lost and counted as that many. */
  add(line: string, records?: number): void;
}

/** A sealed chunk: NDJSON lines, each ending in "\n". */
export interface ArchiveChunk {
  body: string;
  /** Decisions in it (a line can hold many). */
  records: number;
  /** When the chunk was sealed (the writer's partition time on S3). */
  sealedAt: number;
}

/** Where chunks go: resolves once the chunk is stored, rejects when it was not (the archive retries). */
export interface ArchiveWriter {
  write(chunk: ArchiveChunk): Promise<void>;
  /** The largest chunk it takes (default: the archive's chunkBytes). */
  readonly maxChunkBytes?: number;
}

export interface ArchiveStats {
  /** Decisions stored by the writer. */
  archived: number;
  /** Decisions dropped: their line had no room in the buffer, or their chunk's writes all failed. */
  lost: number;
  /** Decisions added and not yet stored (in the buffer or being written). */
  pending: number;
}

export interface DecisionArchiveOptions {
  writer: ArchiveWriter;
  clock: Clock;
  /** The most bytes held at once (lines waiting and chunks being written); past it, lines are lost. */
  maxBufferBytes?: number;
  /** A chunk is sealed at this size (Firehose takes records up to 1,000 KiB). */
  chunkBytes?: number;
  /** A chunk older than this is due to be written by flushDue(). */
  maxAgeMs?: number;
  /** Attempts per chunk before its lines count as lost. */
  attempts?: number;
  /** Chunks written at once. */
  concurrency?: number;
  /**
   * Told of losses (for the metric and a log line), with how many decisions and why: a failed chunk at once,
   * decisions the buffer had no room for once per seal (one call for many, never one per line).
   */
  onLost?: (records: number, reason: "buffer-full" | "write-failed", error?: unknown) => void;
}

export class DecisionArchive implements DecisionLog {
  private readonly writer: ArchiveWriter;
  private readonly clock: Clock;
  private readonly maxBufferBytes: number;
  private readonly chunkBytes: number;
  private readonly maxAgeMs: number;
  private readonly attempts: number;
  private readonly concurrency: number;
  private lines: string[] = [];
  /** Decisions in `lines`. */
  private lineRecords = 0;
  private lineBytes = 0;
  private openedAt = 0;
  private heldBytes = 0;
  private readonly sealed: { chunk: ArchiveChunk; bytes: number }[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private readonly counts = { archived: 0, lost: 0 };
  /** Decisions refused for room since the last report. */
  private unreported = 0;

  constructor(private readonly options: DecisionArchiveOptions) {
    this.writer = options.writer;
    this.clock = options.clock;
    this.maxBufferBytes = options.maxBufferBytes ?? 64 * 1024 * 1024;
    this.chunkBytes = options.chunkBytes ?? options.writer.maxChunkBytes ?? 900 * 1024;
    this.maxAgeMs = options.maxAgeMs ?? 1_000;
    this.attempts = options.attempts ?? 3;
    this.concurrency = options.concurrency ?? 4;
  }

  /** A line (JSON, no newline) holding `records` decisions. Never waits, never throws. */
  add(line: string, records = 1): void {
    // UTF-16 length: bytes for the ASCII the lines are, a bound within 3x otherwise
    const size = line.length + 1;
    if (this.heldBytes + size > this.maxBufferBytes) {
      this.counts.lost += records;
      this.unreported += records;
      return;
    }
    if (this.lines.length === 0) this.openedAt = this.clock.now();
    this.lines.push(line);
    this.lineRecords += records;
    this.lineBytes += size;
    this.heldBytes += size;
    if (this.lineBytes >= this.chunkBytes) {
      this.seal();
      this.pump();
    }
  }

  stats(): ArchiveStats {
    return { ...this.counts, pending: this.pendingLines() };
  }

  /**
   * Writes what is due (a full chunk, or lines older than maxAgeMs) and waits for the writes in flight, at
   * most `withinMs`; returns at once when nothing is due. For a function between requests.
   */
  flushDue(withinMs = 100): Promise<void> {
    const due = this.linesDue();
    if (!due && this.sealed.length === 0 && this.inFlight.size === 0) return Promise.resolve();
    if (due) this.seal();
    return this.drain(withinMs);
  }

  /**
   * Whether flushDue() has anything to write or wait for now: without, a function between requests skips
   * its call and the promise it answers (the check API asks after every request).
   */
  isFlushDue(): boolean {
    return this.sealed.length > 0 || this.inFlight.size > 0 || this.linesDue();
  }

  /** The open chunk's lines are older than maxAgeMs. */
  private linesDue(): boolean {
    return this.lines.length > 0 && this.clock.now() - this.openedAt >= this.maxAgeMs;
  }

  /** Writes everything held and waits for it, at most `withinMs` (what is left stays for the next flush). */
  flush(withinMs = 10_000): Promise<void> {
    this.seal();
    return this.drain(withinMs);
  }

  private pendingLines(): number {
    let records = this.lineRecords;
    for (const { chunk } of this.sealed) records += chunk.records;
    return records + this.writingRecords;
  }

  private writingRecords = 0;

  private seal(): void {
    if (this.unreported > 0) {
      this.options.onLost?.(this.unreported, "buffer-full");
      this.unreported = 0;
    }
    if (this.lines.length === 0) return;
    const body = `${this.lines.join("\n")}\n`;
    this.sealed.push({
      chunk: { body, records: this.lineRecords, sealedAt: this.clock.now() },
      bytes: this.lineBytes,
    });
    this.lines = [];
    this.lineRecords = 0;
    this.lineBytes = 0;
  }

  private pump(): void {
    while (this.inFlight.size < this.concurrency && this.sealed.length > 0) {
      const next = this.sealed.shift() as { chunk: ArchiveChunk; bytes: number };
      this.writingRecords += next.chunk.records;
      const writing: Promise<void> = this.writeChunk(next.chunk).finally(() => {
        this.inFlight.delete(writing);
        this.writingRecords -= next.chunk.records;
        this.heldBytes -= next.bytes;
        this.pump();
      });
      this.inFlight.add(writing);
    }
  }

  /** Never rejects: a chunk whose attempts all failed is counted as lost. */
  private async writeChunk(chunk: ArchiveChunk): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.writer.write(chunk);
        this.counts.archived += chunk.records;
        return;
      } catch (error) {
        if (attempt >= this.attempts) {
          this.counts.lost += chunk.records;
          this.options.onLost?.(chunk.records, "write-failed", error);
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, 25 * 2 ** attempt * (0.5 + Math.random())));
      }
    }
  }

  private async drain(withinMs: number): Promise<void> {
    this.pump();
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, withinMs);
    });
    try {
      while (this.inFlight.size > 0) {
        const settled = await Promise.race([Promise.race(this.inFlight).then(() => true), deadline.then(() => false)]);
        if (!settled) return;
      }
    } finally {
      clearTimeout(timer);
    }
  }
}
