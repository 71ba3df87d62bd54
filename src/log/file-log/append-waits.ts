/**
 * Who in this process waits for the next append to a log, by the log's
 * directory (its path, device and inode), whatever the options of the
 * handle that appends.
 *
 * Why: a PartitionProcessor that has caught up looked at its log's files
 * every pollIntervalMs (a listing of the directory and a read of the tail),
 * and 1,024 idle partitions kept a core busy doing only that (issue 38). An
 * append made in this process wakes it instead; appends of other processes
 * are still found by looking (PartitionProcessor.run()).
 *
 * Module state, as the cores' map in handle.ts and for the same reason: the
 * appends of this process are its scope. An entry lives only while someone
 * waits.
 */
const waits = new Map<string, Set<() => void>>()

/** Appends to the log in `dir` were written: every waiter wakes, once. */
export function appended(dir: string): void {
  const waiting = waits.get(dir)
  if (waiting === undefined) return
  waits.delete(dir)
  for (const wake of waiting) wake()
}

/** Calls `wake` once, at the next append to the log in `dir`; returns the function that stops waiting. */
export function waitForAppend(dir: string, wake: () => void): () => void {
  let waiting = waits.get(dir)
  if (waiting === undefined) waits.set(dir, (waiting = new Set()))
  waiting.add(wake)
  return () => {
    const now = waits.get(dir)
    if (now?.delete(wake) === true && now.size === 0) waits.delete(dir)
  }
}
