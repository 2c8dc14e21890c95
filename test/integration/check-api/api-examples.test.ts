// Runs every request/response example of docs/api.md, in order, against the local stack: the docs
// cannot drift from what the API answers.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { LocalStack } from "../../../scripts/local-stack.ts";
import { testStack, uploadRules } from "../../support/pipeline.ts";
import { designPolicy } from "../../support/rules.ts";

const doc = readFileSync(new URL("../../../docs/api.md", import.meta.url), "utf8");
// a reply is its status, then any header lines shown (`Name: value`), then its JSON body
const examples = [
  ...doc.matchAll(/```http\n([^\n]+)\n?([\s\S]*?)```\s*```json\n(\d{3})\n((?:[A-Za-z-]+: [^\n]*\n)*)([\s\S]*?)```/g),
].map((match) => {
  const [method, path] = (match[1] as string).split(" ");
  return {
    method: method as string,
    path: path as string,
    body: (match[2] as string).trim(),
    status: Number(match[3]),
    headers: (match[4] as string)
      .split("\n")
      .filter(Boolean)
      .map((line) => line.split(": ") as [string, string]),
    reply: JSON.parse(match[5] as string) as unknown,
  };
});

let stack: LocalStack;
beforeAll(async () => {
  stack = await testStack();
  // the policy of DESIGN.md, with users 17 and 42 in "new"
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
    const response = await fetch(`${stack.endpoints.functionUrl}${example.path}`, {
      method: example.method,
      ...(example.body ? { body: example.body, headers: { "content-type": "application/json" } } : {}),
    });
    const label = `${example.method} ${example.path} ${example.body.slice(0, 100)}`;
    expect(response.status, label).toBe(example.status);
    expect(await response.json(), label).toEqual(example.reply);
    for (const [name, value] of example.headers) expect(response.headers.get(name), `${label}: ${name}`).toBe(value);
  }
});
