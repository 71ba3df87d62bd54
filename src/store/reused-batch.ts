// One LevelDB write batch per open database, written and cleared at every
// commit instead of a new one per commit.
//
// Why: classic-level 3.0.0's chained batch frees its native WriteBatch only
// when V8 collects the batch object (its chained-batch.js: "close native
// batch (currently done on GC)"), and V8 does not know that memory exists.
// A commit's batch object outlives its write, so it is usually promoted and
// waits for a full GC, which a process whose JavaScript heap grows slowly
// seldom runs: at 1,024 stores the batches of commits already written held
// 3.7 GB (issue 38's memory probe). Reused, a store holds one batch, as large as the
// largest it wrote since it was made; one larger than `keepBytes` is dropped
// after its write, so that what a store keeps stays within its budget share.
//
// It uses abstract-level's interface for implementations (_put, _del,
// _write, _clear), which skips what the public one does per operation
// (option objects, encodings, hooks, 'write' events). Tidemark uses none of
// those: keys and values reach it as strings (UTF-8) or Buffers.
import type { ClassicLevel } from 'classic-level'

/** abstract-level's interface that a chained batch implements (docs of abstract-level, "private API for implementors"). */
interface ImplementedBatch {
  _put(key: string | Buffer, value: string | Buffer): void
  _del(key: string | Buffer): void
  _write(options: { sync?: boolean }): Promise<void>
  _clear(): void
  close(): Promise<void>
}

export class ReusedBatch {
  readonly db: ClassicLevel<string, string>
  readonly #batch: ImplementedBatch
  #bytes = 0

  constructor(db: ClassicLevel<string, string>) {
    this.db = db
    const batch = db.batch() as unknown as Partial<ImplementedBatch>
    for (const name of ['_put', '_del', '_write', '_clear'] as const) {
      if (typeof batch[name] !== 'function') throw new TypeError(`classic-level's chained batch has no ${name}(): Tidemark needs the classic-level version it pins`)
    }
    this.#batch = batch as ImplementedBatch
  }

  put(key: string | Buffer, value: string | Buffer): void {
    this.#batch._put(key, value)
    this.#bytes += key.length + value.length
  }

  del(key: string | Buffer): void {
    this.#batch._del(key)
    this.#bytes += key.length
  }

  /**
   * Writes what was put since the last write, and clears the batch whether
   * or not the write succeeded: a failed commit's operations never reach the
   * next one. Resolves with whether the batch may be used again (false: it
   * held more than `keepBytes`, and is closed for V8 to collect).
   */
  async write(sync: boolean, keepBytes: number): Promise<boolean> {
    const bytes = this.#bytes
    try {
      // An empty batch is skipped by classic-level itself (its hasData_).
      await this.#batch._write(sync ? SYNC : EMPTY)
    } finally {
      this.clear()
    }
    if (bytes <= keepBytes) return true
    await this.#batch.close()
    return false
  }

  /** Drops what was put (a commit that failed before its write). */
  clear(): void {
    this.#batch._clear()
    this.#bytes = 0
  }
}

const SYNC = Object.freeze({ sync: true })
const EMPTY = Object.freeze({})
