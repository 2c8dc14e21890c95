// The local stack's Lambda emulation keeps Lambda's contract while doing less per invocation: the Function
// URL event's time in AWS's own format, and a context whose remaining time counts down per invocation.
import { describe, expect, it } from "vitest";
import { functionUrlEvent, requestTime } from "../../../scripts/local/function-url-server.ts";
import { lambdaContext } from "../../../scripts/local/sqs-poller.ts";

describe("the local Function URL event", () => {
  it("writes requestContext.time as a Function URL does, to the second, beside timeEpoch", () => {
    // pinned: the times the pure formatter is given
    expect(requestTime(Date.UTC(2020, 2, 12, 19, 3, 58, 999))).toBe("12/Mar/2020:19:03:58 +0000");
    expect(requestTime(Date.UTC(2026, 0, 2, 3, 4, 5))).toBe("02/Jan/2026:03:04:05 +0000");
    // the same second again, then the next one: the cache never answers another second's text
    expect(requestTime(Date.UTC(2026, 0, 2, 3, 4, 5, 500))).toBe("02/Jan/2026:03:04:05 +0000");
    expect(requestTime(Date.UTC(2026, 0, 2, 3, 4, 6))).toBe("02/Jan/2026:03:04:06 +0000");
    const event = functionUrlEvent("POST", "/v1/limit", "{}");
    const { time, timeEpoch } = event.requestContext;
    expect(time).toBe(requestTime(timeEpoch));
    expect(time).toMatch(/^\d{2}\/[A-Z][a-z]{2}\/\d{4}:\d{2}:\d{2}:\d{2} \+0000$/);
  });
});

describe("the local Lambda context", () => {
  it("gives each invocation its own request ID and deadline, and names the function it was made for", () => {
    const first = lambdaContext(30_000, "tollgate-check-api");
    const second = lambdaContext(0, "tollgate-check-api");
    expect(first.awsRequestId).not.toBe(second.awsRequestId);
    expect(first.functionName).toBe("tollgate-check-api");
    expect(first.invokedFunctionArn).toBe("arn:aws:lambda:local:000000000000:function:tollgate-check-api");
    expect(first.getRemainingTimeInMillis()).toBeGreaterThan(29_000);
    expect(first.getRemainingTimeInMillis()).toBeLessThanOrEqual(30_000);
    expect(second.getRemainingTimeInMillis()).toBe(0);
    // copied with an override (as a test of the consumer's time budget does), the context still works
    const copy = { ...first, getRemainingTimeInMillis: () => 5 };
    expect(copy.getRemainingTimeInMillis()).toBe(5);
    expect(copy.awsRequestId).toBe(first.awsRequestId);
    expect(lambdaContext(1_000).functionName).toBe("tollgate-campaign-consumer");
  });
});
