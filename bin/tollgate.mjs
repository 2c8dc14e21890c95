#!/usr/bin/env node
// The `tollgate` command (package.json "bin"): runs the TypeScript CLI through tsx.
import { register } from "tsx/esm/api";

register();
const { runCli } = await import("../scripts/cli.ts");
process.exitCode = await runCli(process.argv.slice(2));
