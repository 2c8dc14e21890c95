// The `tollgate` operator CLI. Exit codes: 0 done, 1 the input was refused (the message says why),
// 2 usage error.
//
//   npm run tollgate -- segments build --out build/segments new=new.txt active=active.txt
//   npm run tollgate -- policy validate config/policy.json
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Command, CommanderError } from "commander";
import { InvalidPolicyError, ValidationError } from "../functions/core/errors.ts";
import { parsePolicyText } from "../functions/core/policy.ts";
import { buildSegments, parseUserIdList } from "../functions/core/segment-builder.ts";
import { isMain } from "./is-main.ts";

export function makeProgram(): Command {
  const program = new Command("tollgate")
    .description("Operate Tollgate: build segments, validate policies")
    .exitOverride()
    .configureOutput({ writeErr: (text) => process.stderr.write(text) });

  const segments = program.command("segments").description("segment bitmaps (CRoaring portable format)");
  segments
    .command("build")
    .description("build one bitmap per segment from files of user IDs (one per line, or comma/space separated)")
    .requiredOption("--out <dir>", "directory for <name>.roaring files")
    .argument("<segment=file...>", "segment name and the file of its user IDs")
    .action((pairs: string[], options: { out: string }) => {
      const members = pairs.map((pair) => {
        const [name, file] = pair.split("=", 2);
        if (!name || !file) throw new ValidationError(pair, "expected <segment>=<file>");
        return { name, userIds: parseUserIdList(readFileSync(file, "utf8"), file) };
      });
      const built = buildSegments(members);
      mkdirSync(options.out, { recursive: true });
      for (const { name, userIds } of members) {
        const path = join(options.out, `${name}.roaring`);
        const bytes = built.get(name) as Uint8Array;
        writeFileSync(path, bytes);
        console.log(`${path}: ${new Set(userIds).size} users, ${bytes.length} bytes`);
      }
    });

  const policy = program.command("policy").description("the capping policy (config/policy.json)");
  policy
    .command("validate")
    .description("check a policy file; prints every problem by field")
    .argument("<file>", "policy JSON file")
    .action((file: string) => {
      const parsed = parsePolicyText(readFileSync(file, "utf8"));
      console.log(
        `${file}: valid (version ${parsed.version}; channels ${parsed.channels.join(", ")}; ` +
          `segments ${parsed.segments.map((s) => s.name).join(", ")})`,
      );
    });

  return program;
}

/** Runs the CLI; returns the exit code instead of exiting, so tests can call it. */
export async function runCli(argv: readonly string[]): Promise<number> {
  try {
    await makeProgram().parseAsync(argv, { from: "user" });
    return 0;
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
    if (error instanceof InvalidPolicyError) {
      console.error(`tollgate: invalid policy:\n${error.issues.map((issue) => `  ${issue}`).join("\n")}`);
      return 1;
    }
    if (error instanceof ValidationError) {
      console.error(`tollgate: ${error.message}`);
      return 1;
    }
    if ((error as NodeJS.ErrnoException).code === "ENOENT") {
      console.error(`tollgate: ${(error as Error).message}`);
      return 1;
    }
    throw error;
  }
}

if (isMain(import.meta)) {
  runCli(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
