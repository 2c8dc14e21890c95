// `tollgate redis libraries [--prune]`: Tollgate's Redis Functions libraries on each primary, this build's
// and those earlier deploys left behind (functions/app/redis-libraries.ts), and removing the latter.
import { type Command, Option } from "commander";
import { listLibraries, pruneLibraries } from "../../functions/app/redis-libraries.ts";
import { ValidationError } from "../../functions/core/shared/errors.ts";
import { localEndpoints } from "./aws-options.ts";
import { type RedisNodeOptions, withCluster, withRedisNodes } from "./redis-options.ts";

export function addRedisCommands(program: Command): void {
  const redis = program.command("redis").description("the Redis cluster");

  withRedisNodes(
    redis
      .command("libraries")
      .description("Tollgate's Redis Functions libraries on each primary: this build's, and those of other builds")
      .option("--local", "the Redis cluster of `npm run local`")
      .addOption(new Option("--region <region>", "AWS region of the AUTH secret").env("AWS_REGION"))
      .option(
        "--prune",
        "remove the libraries of other builds (a client still on one loads it again on its next call)",
      ),
  ).action(async (options: RedisNodeOptions & { local?: boolean; prune?: boolean }) => {
    const nodes = options.redis ?? (options.local ? localEndpoints().redis : undefined);
    if (!nodes) throw new ValidationError("--redis", "required (or --local)");
    const held = await withCluster(nodes, options, (cluster) =>
      options.prune ? pruneLibraries(cluster) : listLibraries(cluster),
    );
    for (const { node, current, stale } of held.sort((a, b) => a.node.localeCompare(b.node))) {
      const others = stale.length === 0 ? "none" : stale.join(" ");
      console.log(
        `${node}\tthis build: ${current.join(" ") || "none"}\t${options.prune ? "removed" : "other builds"}: ${others}`,
      );
    }
  });
}
