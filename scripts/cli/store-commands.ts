// `tollgate store acknowledge`: after a store loss under `onStoreLoss: pause` (metric Tollgate/StoreLost,
// GET /v1/health's `store.lostSlots`), the lost slots' epoch keys written again, so caps and limits count on
// (functions/app/store-actions.ts; docs/OPERATIONS.md).
import type { Command } from "commander";
import { acknowledgeStoreLoss } from "../../functions/app/store-actions.ts";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import { type AwsOptions, aws, required, withAws } from "./aws-options.ts";
import { type RedisOptions, withCluster, withRedis } from "./redis-options.ts";

export function addStoreCommands(program: Command): void {
  const store = program.command("store").description("the counter store's epoch (store loss)");

  withRedis(
    withAws(
      store
        .command("acknowledge")
        .description("accept a store loss: the lost hash slots count again, from empty")
        .option("--bucket <name>", "the config bucket (the store epoch's marker)"),
    ),
  ).action(async (options: AwsOptions & RedisOptions & { bucket?: string }) => {
    const { s3, local } = aws(options);
    const bucket = required(options.bucket, local?.bucket, "--bucket");
    const nodes = options.redis ?? local?.redis;
    if (!nodes) throw new ValidationError("--redis", "required (or --local)");
    const done = await withCluster(nodes, options, (cluster) =>
      acknowledgeStoreLoss(s3, bucket, cluster, options.namespace),
    );
    const slots = done.slotsWritten;
    console.log(
      done.created
        ? `store initialised: epoch ${done.marker.epoch} (${done.marker.initialisedAt}), ${slots.length} hash slots`
        : `store epoch ${done.marker.epoch} (${done.marker.initialisedAt}): ${slots.length} lost hash slots acknowledged${slots.length > 0 ? ` (${describeSlots(slots)})` : ""}`,
    );
  });
}

/** Slots as ranges: "0-5460 10923-16383". */
function describeSlots(slots: readonly number[]): string {
  const ranges: string[] = [];
  let start = slots[0] as number;
  for (let i = 1; i <= slots.length; i++) {
    const previous = slots[i - 1] as number;
    if (i < slots.length && slots[i] === previous + 1) continue;
    ranges.push(start === previous ? String(start) : `${start}-${previous}`);
    start = slots[i] as number;
  }
  return ranges.join(" ");
}
