// What the check API's handler tests share: a Lambda context of the check API, and the EMF documents
// Powertools writes to stdout.
import type { Context } from "aws-lambda";
import { vi } from "vitest";

/** A Lambda context of the check API with this request ID. */
export const checkApiContext = (awsRequestId: string) =>
  ({
    awsRequestId,
    functionName: "tollgate-check-api",
    functionVersion: "$LATEST",
    invokedFunctionArn: "arn:aws:lambda:local:000000000000:function:tollgate-check-api",
    memoryLimitInMB: "1024",
    getRemainingTimeInMillis: () => 30_000,
  }) as unknown as Context;

/** The EMF documents written to stdout from now on (Powertools writes them through its own Console). */
export function emfDocuments(): () => Record<string, unknown>[] {
  const documents: Record<string, unknown>[] = [];
  const write = process.stdout.write.bind(process.stdout);
  vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array, ...rest: unknown[]) => {
    const text = String(chunk);
    if (!text.includes('"_aws"')) return write(chunk, ...(rest as []));
    for (const line of text.split("\n").filter(Boolean)) documents.push(JSON.parse(line) as Record<string, unknown>);
    return true;
  });
  return () => documents;
}
