// The local stack's scheduler for deferred sends (the DeferralScheduler port): each deferral is an object
// in the S3 emulator, `<prefix><eligibleAt>/<name>.json`, and fireDue() sends every one due by the given
// clock reading to the campaign queue, then deletes it. Driven by the stack's clock, so a test with a fixed
// clock sees deferred sends arrive at their instant without waiting for one.
import {
  DeleteObjectCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import type { CampaignQueue } from "../core/capping/campaign-push.ts";
import type { Deferral, DeferralScheduler } from "../core/capping/deferral.ts";

/** Eligible instants are written with this many digits, so the keys list in time order. */
const INSTANT_DIGITS = 15;

export class S3Schedules implements DeferralScheduler {
  constructor(
    private readonly s3: S3Client,
    private readonly bucket: string,
    private readonly prefix = "schedules/",
  ) {}

  /** Writes each deferral under its instant and name: the same deferral again overwrites itself. */
  async schedule(deferrals: readonly Deferral[]): Promise<void> {
    for (const deferral of deferrals) {
      await this.s3.send(new PutObjectCommand({ Bucket: this.bucket, Key: this.keyOf(deferral), Body: deferral.body }));
    }
  }

  /** Sends every deferral due at `now` to `queue` (in instant order) and deletes it; returns how many. */
  async fireDue(now: number, queue: CampaignQueue): Promise<number> {
    let fired = 0;
    for (const key of await this.dueKeys(now)) {
      const object = await this.s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
      const body = await object.Body?.transformToString("utf8");
      if (body === undefined) continue;
      // sent, then deleted: a crash between the two sends it again, which the campaign's dedupe ids absorb
      await queue.send([body], () => {});
      await this.s3.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }));
      fired++;
    }
    return fired;
  }

  /** The instants of the deferrals still waiting, ascending (one per deferral). */
  async pending(): Promise<number[]> {
    return (await this.keys()).map((key) => this.instantOf(key));
  }

  private async dueKeys(now: number): Promise<string[]> {
    return (await this.keys()).filter((key) => this.instantOf(key) <= now);
  }

  private async keys(): Promise<string[]> {
    const keys: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.s3.send(
        new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.prefix, ContinuationToken: token }),
      );
      for (const object of page.Contents ?? []) if (object.Key) keys.push(object.Key);
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return keys.sort();
  }

  private keyOf(deferral: Deferral): string {
    return `${this.prefix}${String(deferral.eligibleAt).padStart(INSTANT_DIGITS, "0")}/${deferral.name}.json`;
  }

  private instantOf(key: string): number {
    return Number(key.slice(this.prefix.length, this.prefix.length + INSTANT_DIGITS));
  }
}
