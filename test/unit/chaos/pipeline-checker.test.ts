// The campaign pipeline's chaos checker on hand-made outputs: each rule passes at its bound and fails one past it.
import { describe, expect, it } from "vitest";
import {
  type CapRule,
  checkPipeline,
  type DeliveredSend,
  fullestAround,
  fullestWindow,
  type PipelineOutput,
  type PushedMessage,
} from "../../../scripts/chaos/pipeline-checker.ts";

const caps: CapRule[] = [
  { channel: "push", windowMs: 1_000, max: 1 },
  { channel: "*", windowMs: 10_000, max: 3 },
];

const pushed = (
  seq: number,
  at: number,
  userIds: number[],
  channel = "push",
  campaignId = `c${seq}`,
): PushedMessage => ({
  seq,
  campaignId,
  channel,
  userIds,
  at,
});
const deliveredOf = (m: PushedMessage, userId: number): DeliveredSend => ({
  seq: m.seq,
  campaignId: m.campaignId,
  channel: m.channel,
  userId,
  dedupeId: `${m.campaignId}:${m.channel}:${userId}`,
});
/** Every user of every message delivered once. */
const allDelivered = (messages: PushedMessage[]): PipelineOutput => ({
  pushed: messages,
  delivered: messages.flatMap((m) => m.userIds.map((u) => deliveredOf(m, u))),
  capped: [],
  deadLettered: [],
});
const failed = (output: PipelineOutput) =>
  checkPipeline(output, caps)
    .verdicts.filter((v) => !v.pass)
    .map((v) => v.rule);

describe("pipeline checker: rolling windows from the contract", () => {
  it("finds the fullest window (x − W, x]: sends exactly W apart are in different windows", () => {
    expect(fullestWindow([0, 1_000, 2_000], 1_000).sends).toBe(1);
    expect(fullestWindow([0, 999, 2_000], 1_000).sends).toBe(2);
  });

  it("passes max sends per window and fails a window one over max", () => {
    expect(failed(allDelivered([pushed(0, 0, [7]), pushed(1, 1_000, [7])]))).toEqual([]);
    const over = checkPipeline(allDelivered([pushed(0, 0, [7]), pushed(1, 999, [7])]), caps);
    expect(over.verdicts.find((v) => v.rule === "window")?.pass).toBe(false);
    expect(over.figures.worst).toMatchObject({ userId: 7, sends: 2, cap: { windowMs: 1_000, max: 1 } });
  });

  it('counts every channel in a "*" cap, and a channel\'s own cap only for its sends', () => {
    const sends = [pushed(0, 0, [7], "push"), pushed(1, 100, [7], "email"), pushed(2, 200, [7], "email")];
    expect(failed(allDelivered(sends))).toEqual([]);
    expect(failed(allDelivered([...sends, pushed(3, 5_000, [7], "email")]))).toEqual(["window"]);
  });

  it("counts a send delivered twice under its dedupe id once (a redelivery is no second send)", () => {
    const m = pushed(0, 0, [7]);
    const output = allDelivered([m]);
    output.delivered.push(deliveredOf(m, 7));
    const result = checkPipeline(output, caps);
    expect(result.pass).toBe(true);
    expect(result.figures.repeats).toBe(1);
  });
});

describe("pipeline checker: nothing lost", () => {
  it("passes a message whose users were delivered, capped or dead-lettered with a reason", () => {
    const a = pushed(0, 0, [1, 2]);
    const b = pushed(1, 5_000, [3]);
    const output: PipelineOutput = {
      pushed: [a, b, pushed(2, 0, [4])],
      delivered: [deliveredOf(a, 1), deliveredOf(a, 2), deliveredOf(b, 3)],
      capped: [],
      deadLettered: [{ seq: 2, reason: "channel: unknown channel" }],
    };
    expect(failed(output)).toEqual([]);
  });

  it("fails a send that never came out (not delivered, not capped, its message nowhere)", () => {
    const m = pushed(0, 0, [1, 2]);
    const output: PipelineOutput = { pushed: [m], delivered: [deliveredOf(m, 1)], capped: [], deadLettered: [] };
    expect(failed(output)).toEqual(["lost"]);
    expect(checkPipeline(output, caps).figures.lost).toBe(1);
  });

  it("fails a message SQS moved to the DLQ with no reason when its users never came out", () => {
    const output: PipelineOutput = {
      pushed: [pushed(0, 0, [1])],
      delivered: [],
      capped: [],
      deadLettered: [{ seq: 0, reason: "" }],
    };
    expect(failed(output)).toEqual(["lost"]);
  });
});

describe("pipeline checker: dedupe ids and phantom counts", () => {
  it("fails a send delivered under a dedupe id that is not campaignId:channel:userId", () => {
    const m = pushed(0, 0, [1]);
    const output = allDelivered([m]);
    output.delivered.push({ ...deliveredOf(m, 1), dedupeId: "c0:push:1:again" });
    expect(failed(output)).toContain("dedupe");
  });

  it("passes a send capped while its window held max delivered sends, and fails one capped with room", () => {
    const first = pushed(0, 0, [7]);
    const second = pushed(1, 500, [7]);
    const fair: PipelineOutput = {
      pushed: [first, second],
      delivered: [deliveredOf(first, 7)],
      capped: [{ seq: 1, userId: 7, cap: { channel: "push", windowMs: 1_000, max: 1 } }],
      deadLettered: [],
    };
    expect(failed(fair)).toEqual([]);
    // the same capped decision with the first message dead-lettered instead: the store counted a send that
    // never went out
    const phantom = {
      ...fair,
      delivered: [],
      deadLettered: [{ seq: 0, reason: "retries exhausted: StoreReplyError" }],
    };
    expect(failed(phantom)).toEqual(["counted-twice"]);
  });

  it("judges a capped send by every window around it, the ones after it included (decision 0008)", () => {
    expect(fullestAround([1_400], 1_000, 500)).toBe(1);
    expect(fullestAround([1_500], 1_000, 500)).toBe(0);
  });
});
