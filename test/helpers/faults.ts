// Fault injection on LevelDB commits, by wrapping one call: the partition
// store commits through a chained batch (db.batch() without arguments), and
// these helpers route that batch's write() through the test.
import { ClassicLevel } from 'classic-level'

/**
 * Wraps ClassicLevel.prototype.batch so that the write() of every chained
 * batch made from now on goes through `write(n, real)`: n counts the batches
 * from 1, and real() performs the actual write. Returns the function that
 * restores the original.
 */
export function interceptBatchWrites(write: (n: number, real: () => Promise<void>) => Promise<void>): () => void {
  const original = ClassicLevel.prototype.batch
  let made = 0
  ClassicLevel.prototype.batch = function (this: ClassicLevel, ...args: unknown[]) {
    const result = (original as (...a: unknown[]) => unknown).apply(this, args)
    if (args.length > 0) return result
    const batch = result as { write(options?: unknown): Promise<void> }
    const real = batch.write.bind(batch)
    const n = ++made
    batch.write = (options?: unknown) => write(n, () => real(options))
    return batch
  } as typeof original
  return () => { ClassicLevel.prototype.batch = original }
}

/** The next commit's write goes through `replace(real)`; later ones are left alone. */
export function interceptNextBatchWrite(replace: (real: () => Promise<void>) => Promise<void>): () => void {
  return interceptBatchWrites((n, real) => (n === 1 ? replace(real) : real()))
}
