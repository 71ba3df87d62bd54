import { Slots } from '../util/index.js'

/**
 * Catch-ups of a backlog that run at once in a process, however many
 * partitions it holds.
 *
 * Why: a catch-up holds memory while it runs (its log reader's chunks and
 * decoded records, the batch it builds and the one being written) and a
 * descriptor on its log, and a process that starts with a thousand
 * partitions behind their logs (a restart, a burst) began a thousand at
 * once: 2 GB of RSS and 10,000 descriptors at 1,024 partitions of 4 MiB,
 * where one at a time costs a few hundred kilobytes (issue 38's `many`
 * bench). The stores of a process write at most 64 batches at once anyway
 * (StoreBudget's writes in flight), so more catch-ups than that only wait
 * there with their memory held. In turns, a partition waits for its turn
 * instead, and the first ones are ready sooner.
 */
export const CATCH_UP_TURNS = 64

const turns = new Slots(CATCH_UP_TURNS)

/**
 * Waits for a turn, first come first served, and resolves with the
 * function that gives it back; with undefined when `signal` aborts first (a
 * turn that comes after that is given back at once).
 */
export async function catchUpTurn(signal: AbortSignal | undefined): Promise<(() => void) | undefined> {
  const turn = turns.acquire()
  if (signal === undefined) return turn
  if (signal.aborted) {
    void turn.then((release) => release())
    return undefined
  }
  let onAbort: (() => void) | undefined
  const aborted = new Promise<undefined>((resolve) => {
    onAbort = () => resolve(undefined)
    signal.addEventListener('abort', onAbort, { once: true })
  })
  try {
    const won = await Promise.race([turn, aborted])
    if (won === undefined) void turn.then((release) => release())
    return won
  } finally {
    signal.removeEventListener('abort', onAbort!)
  }
}
