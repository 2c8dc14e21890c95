// Runs the `tollgate` CLI in process and collects what it printed (console.log and console.error, in order)
// with its exit code, for tests of its commands' output.
import { vi } from "vitest";
import { runCli } from "../../scripts/cli.ts";

export async function cliOutput(argv: string[]): Promise<{ code: number; text: string }> {
  const lines: string[] = [];
  const log = vi.spyOn(console, "log").mockImplementation((line: string) => void lines.push(line));
  const error = vi.spyOn(console, "error").mockImplementation((line: string) => void lines.push(line));
  try {
    return { code: await runCli(argv), text: lines.join("\n") };
  } finally {
    log.mockRestore();
    error.mockRestore();
  }
}
