// What Lambda's Node.js runtime does with a bundle, in plain JavaScript so that any Node can run it (the
// tests run it on Node 24, the functions' declared runtime): import the handler module, invoke it once per
// event with a Lambda context, write the replies as JSON to the file named by argv[3], and exit.
// Usage: node lambda-runtime.mjs <bundle index.mjs> <reply file> <timeout ms>  (events: a JSON array on stdin)
import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { text } from "node:stream/consumers";
import { pathToFileURL } from "node:url";

const [, , bundle, replyFile, timeoutMs] = process.argv;
const events = JSON.parse(await text(process.stdin));
const outcome = { node: process.version, arch: process.arch, replies: [] };
try {
  const { handler } = await import(pathToFileURL(bundle).href);
  for (const event of events) {
    const deadline = Date.now() + Number(timeoutMs);
    outcome.replies.push(
      await handler(event, {
        callbackWaitsForEmptyEventLoop: false,
        functionName: "tollgate-bundle-test",
        functionVersion: "$LATEST",
        invokedFunctionArn: "arn:aws:lambda:local:000000000000:function:tollgate-bundle-test",
        memoryLimitInMB: "512",
        awsRequestId: randomUUID(),
        logGroupName: "/aws/lambda/tollgate-bundle-test",
        logStreamName: "local",
        getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
      }),
    );
  }
} catch (error) {
  outcome.error = String(error?.stack ?? error);
}
writeFileSync(replyFile, JSON.stringify(outcome));
// the handler's Redis connections stay open between invocations, as in a warm container: end here
process.exit(0);
