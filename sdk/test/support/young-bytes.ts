// How many bytes a synchronous piece of code allocates, read from V8's young generation with no GC in
// between: the SDK's allocation test and the bench's check row count allocations the same way.
import { GCProfiler, getHeapSpaceStatistics, setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

// a full GC first, so no marking begun before the measured code finishes during it; `gc` without
// starting Node with --expose-gc (the flag set at run time, the function taken from a new context)
setFlagsFromString("--expose-gc");
const fullGc = runInNewContext("gc") as () => void;

const youngUsed = () => getHeapSpaceStatistics().find((space) => space.space_name === "new_space")!.space_used_size;

/**
 * Bytes the young generation gained while `run` ran, less what measuring an empty function gains, and
 * the GCs that ran meanwhile (with any GC the bytes mean nothing: the caller must see 0).
 */
export function youngBytesDuring(run: () => void): { bytes: number; gcs: number } {
  const measure = (fn: () => void) => {
    const profiler = new GCProfiler();
    profiler.start();
    const before = youngUsed();
    fn();
    const after = youngUsed();
    return { bytes: after - before, gcs: profiler.stop()?.statistics.length ?? 0 };
  };
  // the statistics objects measuring makes (more the first time), with nothing run
  measure(() => {});
  fullGc();
  const floor = measure(() => {});
  const measured = measure(run);
  return { bytes: measured.bytes - floor.bytes, gcs: measured.gcs + floor.gcs };
}
