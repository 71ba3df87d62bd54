// The options of a StoreBudget, and the share of it that one store gets.
import { describeValue } from '../../util/describe-value.js'

export interface StoreBudgetOptions {
  /**
   * Bytes for the LevelDB memtables, LevelDB block caches and Tidemark value
   * caches of every store that uses this budget, however many are open.
   * Each open store gets an equal share (docs/partition-store.md). Default
   * 256 MiB. A share never goes below LevelDB's floor of 64 KiB for the
   * memtable and the block cache, so past about memoryBytes / 320 KiB
   * stores the floors, not the budget, set the total.
   */
  memoryBytes?: number
  /**
   * File descriptors for the stores' table files: each store gets
   * `maxOpenFiles / stores` as LevelDB's max_open_files, from 74 (LevelDB's
   * own floor) to 1000 (its default). Default 8192. Every open LevelDB also
   * holds 4 (LOCK, LOG, MANIFEST, write-ahead log); the idle close gives
   * those back.
   */
  maxOpenFiles?: number
  /**
   * A store with no read and no commit for this long closes its LevelDB
   * (memtable, block cache, files) and drops its value cache; its next read
   * or commit opens it again. 0: never. Default 60000 (ms).
   */
  idleCloseMs?: number
  /** Milliseconds on a monotonic clock, for the idle time. Default performance.now; tests move it. */
  clock?: () => number
}

export const BUDGET_DEFAULTS = Object.freeze({
  memoryBytes: 256 * 1024 * 1024,
  maxOpenFiles: 8192,
  idleCloseMs: 60_000,
})

export type ResolvedBudgetOptions = Readonly<Required<StoreBudgetOptions>>

/** What one store gets of a budget. */
export interface StoreShare {
  writeBufferSize: number
  cacheSize: number
  valueCacheBytes: number
  maxOpenFiles: number
}

/** LevelDB's floor for a memtable (it clips write_buffer_size to it), and ours for its block cache. */
export const MIN_LEVEL_BYTES = 64 * 1024
/** LevelDB clips max_open_files to at least this (64 tables + 10 other files). */
export const MIN_OPEN_FILES = 74
/** What a store had before there was a budget, and what one store alone still gets. */
export const SHARE_CAP: Readonly<StoreShare> = Object.freeze({
  writeBufferSize: 4 * 1024 * 1024,
  cacheSize: 8 * 1024 * 1024,
  valueCacheBytes: 4 * 1024 * 1024,
  maxOpenFiles: 1000,
})

export function resolveBudgetOptions(options: StoreBudgetOptions): ResolvedBudgetOptions {
  if (options === null || typeof options !== 'object') throw new TypeError(`StoreBudget options must be an object, got ${describeValue(options)}`)
  const known = ['memoryBytes', 'maxOpenFiles', 'idleCloseMs', 'clock']
  for (const name of Object.keys(options)) {
    if (!known.includes(name)) throw new RangeError(`unknown option options.${name} of StoreBudget; known: ${known.join(', ')}`)
  }
  const resolved = {
    memoryBytes: options.memoryBytes ?? BUDGET_DEFAULTS.memoryBytes,
    maxOpenFiles: options.maxOpenFiles ?? BUDGET_DEFAULTS.maxOpenFiles,
    idleCloseMs: options.idleCloseMs ?? BUDGET_DEFAULTS.idleCloseMs,
    clock: options.clock ?? (() => performance.now()),
  }
  if (!Number.isSafeInteger(resolved.memoryBytes) || resolved.memoryBytes < 1024 * 1024) {
    throw new RangeError(`options.memoryBytes must be an integer of at least 1048576 bytes, got ${describeValue(resolved.memoryBytes)}`)
  }
  if (!Number.isSafeInteger(resolved.maxOpenFiles) || resolved.maxOpenFiles < MIN_OPEN_FILES) {
    throw new RangeError(`options.maxOpenFiles must be an integer of at least ${MIN_OPEN_FILES}, got ${describeValue(resolved.maxOpenFiles)}`)
  }
  // A sweep runs every quarter of it on a timer, and timers hold at most 2^31 - 1 ms.
  if (!Number.isSafeInteger(resolved.idleCloseMs) || resolved.idleCloseMs < 0 || resolved.idleCloseMs > 2 ** 31 - 1) {
    throw new RangeError(`options.idleCloseMs must be an integer from 0 to ${2 ** 31 - 1} (ms), got ${describeValue(resolved.idleCloseMs)}`)
  }
  if (typeof resolved.clock !== 'function') throw new TypeError(`options.clock must be a function returning milliseconds, got ${describeValue(resolved.clock)}`)
  return Object.freeze(resolved)
}

/**
 * The share of each of `stores` stores. A fifth of it is the value cache,
 * two fifths the block cache and one fifth the memtable, which counts
 * twice: LevelDB holds a full one while it writes it out and fills the
 * next. The 1:2:1 split is the one of the sizes before the budget.
 */
export function shareOf(budget: ResolvedBudgetOptions, stores: number): StoreShare {
  const n = Math.max(1, stores)
  const unit = Math.floor(budget.memoryBytes / n / 5)
  return {
    writeBufferSize: clamp(unit, MIN_LEVEL_BYTES, SHARE_CAP.writeBufferSize),
    cacheSize: clamp(2 * unit, MIN_LEVEL_BYTES, SHARE_CAP.cacheSize),
    valueCacheBytes: Math.min(unit, SHARE_CAP.valueCacheBytes),
    maxOpenFiles: clamp(Math.floor(budget.maxOpenFiles / n), MIN_OPEN_FILES, SHARE_CAP.maxOpenFiles),
  }
}

function clamp(v: number, min: number, max: number): number {
  return Math.min(max, Math.max(min, v))
}
