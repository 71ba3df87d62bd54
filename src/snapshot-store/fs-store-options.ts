import { DEFAULT_TRANSFER_LIMIT } from './transfer-limiter.js'

export interface FsSnapshotStoreOptions {
  /** Absolute path of the store's root directory; created on the first put. */
  root: string
  /**
   * A temporary file whose last write is older than this belongs to a put
   * that was killed, and sweepTemporaryFiles() removes it (default 1 hour).
   * A live put writes its file continuously, so this must only exceed the
   * longest pause between two writes of one put, plus the clock skew between
   * the hosts that share the store.
   */
  temporaryFileGraceMs?: number
  /**
   * A put with ifMatch holds a lock file beside the object for the few
   * milliseconds of its compare and rename. A lock file older than this was
   * left by a process that died holding it, and the next ifMatch put of that
   * key breaks it (default 10 s). It must exceed the longest such put (a
   * stalled network file system) plus the clock skew between the hosts that
   * share the store: a lock broken while its put still runs lets two
   * compare-and-swaps through.
   */
  lockStaleMs?: number
  /**
   * Puts of a streamed body running at once across every caller of this
   * store instance (all the partitions of a process that share it); a put
   * of a body already in memory (a manifest, a claim) takes no slot (default 16).
   */
  maxConcurrentUploads?: number
  /** Gets whose stream is open at once across every caller of this store instance; a get holds its slot until its stream is read to the end or destroyed (default 16). */
  maxConcurrentDownloads?: number
}

export const FS_STORE_DEFAULTS = Object.freeze({
  temporaryFileGraceMs: 60 * 60 * 1000,
  lockStaleMs: 10_000,
  maxConcurrentUploads: DEFAULT_TRANSFER_LIMIT,
  maxConcurrentDownloads: DEFAULT_TRANSFER_LIMIT,
})
