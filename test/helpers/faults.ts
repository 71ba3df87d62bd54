// Fault injection on LevelDB commits, by wrapping one call: the partition
// store commits through a chained batch that it reuses (src/store/reused-batch.ts),
// whose every write goes through classic-level's ChainedBatch#_write; these
// helpers route that call through the test.
import { createRequire } from 'node:module'

interface Writable { _write(options: unknown): Promise<void> }
const { ChainedBatch } = createRequire(import.meta.url)('classic-level/chained-batch.js') as { ChainedBatch: { prototype: Writable } }

/**
 * Wraps classic-level's ChainedBatch.prototype._write so that every chained
 * batch write from now on, of any database, goes through `write(n, real)`: n
 * counts the writes from 1, and real() performs the actual write. Returns
 * the function that restores the original.
 */
export function interceptBatchWrites(write: (n: number, real: () => Promise<void>) => Promise<void>): () => void {
  const proto = ChainedBatch.prototype
  const original = proto._write
  let writes = 0
  proto._write = function (this: Writable, options: unknown) {
    const n = ++writes
    return write(n, () => original.call(this, options))
  }
  return () => { proto._write = original }
}

/** The next commit's write goes through `replace(real)`; later ones are left alone. */
export function interceptNextBatchWrite(replace: (real: () => Promise<void>) => Promise<void>): () => void {
  return interceptBatchWrites((n, real) => (n === 1 ? replace(real) : real()))
}
