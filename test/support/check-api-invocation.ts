// What the check API's handler tests share: a Lambda context of the check API, and the EMF documents
// Powertools writes to stdout.
import { vi } from "vitest";
import { lambdaContext } from "../../scripts/local/sqs-poller.ts";

/** A Lambda context of the check API (the local stack's) with this request ID. */
export const checkApiContext = (awsRequestId: string) =>
  Object.assign(lambdaContext(30_000, "tollgate-check-api"), { awsRequestId });

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
