// Runs every request/response example of docs/api.md, in order, against the local stack: the docs
// cannot drift from what the API answers.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { LocalStack } from "../../scripts/local-stack.ts";
import { testStack, uploadRules } from "../support/pipeline.ts";
import { designPolicy } from "../support/rules.ts";

const doc = readFileSync(new URL("../../docs/api.md", import.meta.url), "utf8");
const examples = [...doc.matchAll(/```http\n([^\n]+)\n?([\s\S]*?)```\s*```json\n(\d{3})\n([\s\S]*?)```/g)].map(
  (match) => {
    const [method, path] = (match[1] as string).split(" ");
    return {
      method: method as string,
      path: path as string,
      body: (match[2] as string).trim(),
      status: Number(match[3]),
      reply: JSON.parse(match[4] as string) as unknown,
    };
  },
);

let stack: LocalStack;
beforeAll(async () => {
  stack = await testStack();
  // the policy of DESIGN.md, with users 17 and 42 in "new"
  await uploadRules(stack, designPolicy(), { new: [17, 42] });
});
afterAll(async () => {
  await stack.stop();
});

it("has examples to run", () => {
  expect(examples.length).toBeGreaterThanOrEqual(10);
});

it("answers every example of docs/api.md as documented", async () => {
  for (const example of examples) {
    const response = await fetch(`${stack.endpoints.functionUrl}${example.path}`, {
      method: example.method,
      ...(example.body ? { body: example.body, headers: { "content-type": "application/json" } } : {}),
    });
    const label = `${example.method} ${example.path} ${example.body.slice(0, 100)}`;
    expect(response.status, label).toBe(example.status);
    expect(await response.json(), label).toEqual(example.reply);
  }
});
