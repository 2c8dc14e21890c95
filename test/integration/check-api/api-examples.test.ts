// Runs every request/response example of docs/api.md, in order, against the local stack: the docs
// cannot drift from what the API answers. The functions' clock is pinned to the moment the examples are
// dated, so the page passes in any year (an `at` older than the policy's longest window is refused).
import { afterAll, beforeAll, expect, it } from "vitest";
import { fixedClock } from "../../../functions/core/shared/clock.ts";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { EXAMPLES_NOW, examplesOf, readDoc } from "../../support/docs-examples.ts";
import { testStack, uploadRules } from "../../support/pipeline.ts";
import { designPolicy } from "../../support/rules.ts";
import { signedFetch } from "../../support/signed-fetch.ts";

const examples = examplesOf(readDoc("docs/api.md"));

let stack: LocalStack;
beforeAll(async () => {
  stack = await testStack({ clock: fixedClock(EXAMPLES_NOW) });
  // the policy of docs/api.md, with users 17 and 42 in "new"
  await uploadRules(stack, designPolicy(), { new: [17, 42] });
});
afterAll(async () => {
  await stack.stop();
});

it("has examples to run, some with their headers", () => {
  expect(examples.length).toBeGreaterThanOrEqual(10);
  expect(examples.filter((example) => example.headers.length > 0).length).toBeGreaterThanOrEqual(3);
});

it("answers every example of docs/api.md as documented", async () => {
  for (const example of examples) {
    // signed by the local principal's key, the tenant the policy of docs/api.md gives it
    const response = await signedFetch(`${stack.endpoints.functionUrl}${example.path}`, {
      method: example.method,
      ...(example.body ? { body: example.body } : {}),
    });
    const label = `${example.method} ${example.path} ${example.body.slice(0, 100)}`;
    expect(response.status, label).toBe(example.status);
    expect(await response.json(), label).toEqual(example.reply);
    for (const [name, value] of example.headers) expect(response.headers.get(name), `${label}: ${name}`).toBe(value);
  }
});
