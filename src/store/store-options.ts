import { TidemarkError } from '../errors.js'
import { describeValue } from '../util/describe-value.js'
import { MIN_LEVEL_BYTES, MIN_OPEN_FILES, SHARE_CAP, type StoreShare } from './budget/budget-options.js'
import type { LevelOptions } from './store-dir.js'
import { defaultStoreBudget, StoreBudget } from './budget/store-budget.js'
import { MAX_KEY_BYTES } from './keys.js'
import type { StateDefinition } from './state.js'

export interface PartitionStoreOptions {
  /**
   * The LevelDB directory of this partition. It must be absent, empty, a
   * store Tidemark made (it holds the TIDEMARK-STORE marker) or a plain
   * LevelDB store of an earlier version (which gets the marker); anything
   * else is refused with TIDEMARK_STORE_NOT_A_STORE and left as it is.
   */
  path: string
  /**
   * Create the store when the path is absent or an empty directory. Default
   * true. With false nothing is ever created (no directory, no LevelDB
   * files) and a missing store fails with TIDEMARK_STORE_NOT_FOUND: for
   * tools that only read.
   */
  create?: boolean
  /** Every state the program uses; a state not listed here is refused. */
  states?: readonly StateDefinition[]
  /** Longest key (or sub-key) in bytes. Default 16384, at most 65535. */
  maxKeyBytes?: number
  /**
   * fsync each commit. Off by default: a commit then survives a crash of the
   * process (it is in the OS page cache) but not of the machine, which is the
   * usual trade for a store that snapshots and replays can rebuild.
   */
  sync?: boolean
  /**
   * The process budget this store shares with the others (docs/partition-store.md):
   * its cacheSize, writeBufferSize, valueCacheBytes and maxOpenFiles are its
   * share unless given here, and it closes its LevelDB when idle. Default:
   * the process's defaultStoreBudget().
   */
  budget?: StoreBudget
  /** LevelDB block cache in bytes, at least 65536. Default: the budget's share, at most 8 MiB. Given, it is outside the budget. */
  cacheSize?: number
  /** LevelDB write buffer (memtable) in bytes, at least 65536. Default: the budget's share, at most 4 MiB. Given, it is outside the budget. */
  writeBufferSize?: number
  /**
   * Committed values of JSON states that are primitives (numbers, strings,
   * booleans) or absent are kept decoded, up to about this many bytes, so a
   * hot key is read without LevelDB and without a decode. Objects are not
   * kept: a caller could change one after a read. 0 turns it off. Default:
   * the budget's share, at most 4 MiB. Given, it is outside the budget.
   */
  valueCacheBytes?: number
  /** LevelDB's max_open_files, 74 to 50000. Default: the budget's share, 74 to 1000. Given, it is outside the budget. */
  maxOpenFiles?: number
}

/** The sizes are what a store gets when it has its budget to itself (the sizes before budgets). */
export const STORE_DEFAULTS = Object.freeze({
  maxKeyBytes: 16384,
  sync: false,
  cacheSize: SHARE_CAP.cacheSize,
  writeBufferSize: SHARE_CAP.writeBufferSize,
  valueCacheBytes: SHARE_CAP.valueCacheBytes,
  maxOpenFiles: SHARE_CAP.maxOpenFiles,
})

/** LevelDB clips max_open_files to at most this. */
const MAX_OPEN_FILES = 50_000

/** The sizes a store was given; the others come from its budget's share. */
export type ExplicitSizes = Readonly<Partial<Pick<PartitionStoreOptions, 'cacheSize' | 'writeBufferSize' | 'valueCacheBytes' | 'maxOpenFiles'>>>

export type ResolvedOptions = Readonly<{ maxKeyBytes: number; sync: boolean; budget: StoreBudget; explicit: ExplicitSizes }>

/** Checks PartitionStore.open's options once; the states by name. */
export function resolveStoreOptions(options: PartitionStoreOptions): { path: string; create: boolean; resolved: ResolvedOptions; byName: Map<string, StateDefinition> } {
  if (options === null || typeof options !== 'object') throw new TypeError('options must be an object with at least { path }')
  const { path, states = [], create = true } = options
  if (typeof path !== 'string' || path.length === 0) throw new TypeError(`options.path must be a non-empty string, got ${JSON.stringify(path)}`)
  if (typeof create !== 'boolean') throw new TypeError(`options.create must be a boolean, got ${typeof create}`)
  const maxKeyBytes = options.maxKeyBytes ?? STORE_DEFAULTS.maxKeyBytes
  const sync = options.sync ?? STORE_DEFAULTS.sync
  const budget = options.budget ?? defaultStoreBudget()
  if (!Number.isInteger(maxKeyBytes) || maxKeyBytes < 1 || maxKeyBytes > MAX_KEY_BYTES) {
    throw new RangeError(`options.maxKeyBytes must be an integer from 1 to ${MAX_KEY_BYTES}, got ${maxKeyBytes}`)
  }
  if (typeof sync !== 'boolean') throw new TypeError(`options.sync must be a boolean, got ${typeof sync}`)
  if (!(budget instanceof StoreBudget)) throw new TypeError(`options.budget must be a StoreBudget (new StoreBudget()), got ${describeValue(budget)}`)
  const explicit: { -readonly [K in keyof ExplicitSizes]: ExplicitSizes[K] } = {}
  for (const field of ['cacheSize', 'writeBufferSize'] as const) {
    const v = options[field]
    if (v === undefined) continue
    if (!Number.isInteger(v) || v < MIN_LEVEL_BYTES) throw new RangeError(`options.${field} must be an integer of at least ${MIN_LEVEL_BYTES} bytes, got ${v}`)
    explicit[field] = v
  }
  if (options.valueCacheBytes !== undefined) {
    if (!Number.isSafeInteger(options.valueCacheBytes) || options.valueCacheBytes < 0) {
      throw new RangeError(`options.valueCacheBytes must be a non-negative integer, got ${options.valueCacheBytes}`)
    }
    explicit.valueCacheBytes = options.valueCacheBytes
  }
  if (options.maxOpenFiles !== undefined) {
    const v = options.maxOpenFiles
    if (!Number.isInteger(v) || v < MIN_OPEN_FILES || v > MAX_OPEN_FILES) {
      throw new RangeError(`options.maxOpenFiles must be an integer from ${MIN_OPEN_FILES} to ${MAX_OPEN_FILES} (LevelDB's bounds), got ${v}`)
    }
    explicit.maxOpenFiles = v
  }
  const resolved: ResolvedOptions = Object.freeze({ maxKeyBytes, sync, budget, explicit: Object.freeze(explicit) })
  if (!Array.isArray(states)) throw new TypeError('options.states must be an array of state definitions (valueState(), mapState())')
  const byName = new Map<string, StateDefinition>()
  for (const def of states) {
    if (def === null || typeof def !== 'object' || (def.kind !== 'value' && def.kind !== 'map')) {
      throw new TypeError('options.states must hold state definitions made by valueState() or mapState()')
    }
    if (byName.has(def.name)) throw new TidemarkError('TIDEMARK_STATE_CONFLICT', `state ${JSON.stringify(def.name)} is defined twice`)
    byName.set(def.name, def)
  }
  return { path, create, resolved, byName }
}

/** LevelDB's table size (max_file_size) at its default max_open_files, and the largest a store writes (tableBytesFor). */
const LEVELDB_TABLE_BYTES = 2 * 1024 * 1024
const MAX_TABLE_BYTES = 8 * 1024 * 1024

/**
 * LevelDB's table size (max_file_size) for a store that may keep
 * `maxOpenFiles` files open, given or its share:
 * LevelDB's 2 MiB at its default 1,000, and inversely larger as the share
 * shrinks, up to MAX_TABLE_BYTES (8 MiB from a share of 250). A store's
 * descriptors are its tables (beyond the 1,000 the process maps) plus 4, so
 * a small partition among many must hold its data in few tables: at 2 MiB a
 * partition of 4 MiB kept 3 to 5 open (level 1's 2 or 3 and level 0's
 * flushes), and 1,024 of them 3,300 descriptors of tables alone (issue 38).
 * Larger tables cost a compaction nothing for keys that arrive at random
 * (level 0 overlaps all of level 1 either way); what grows is the unit a
 * compaction of a large store's deeper levels works in, which is why the
 * size stops at 8 MiB.
 */
function tableBytesFor(maxOpenFiles: number): number {
  const bytes = Math.floor((LEVELDB_TABLE_BYTES * SHARE_CAP.maxOpenFiles) / maxOpenFiles)
  return Math.min(MAX_TABLE_BYTES, Math.max(LEVELDB_TABLE_BYTES, bytes - (bytes % MIN_LEVEL_BYTES)))
}

/** What a LevelDB opens with: the explicit sizes, else the budget's share; the table size follows maxOpenFiles. */
export function levelOptionsOf(explicit: ExplicitSizes, share: StoreShare): LevelOptions {
  const maxOpenFiles = explicit.maxOpenFiles ?? share.maxOpenFiles
  return {
    cacheSize: explicit.cacheSize ?? share.cacheSize,
    writeBufferSize: explicit.writeBufferSize ?? share.writeBufferSize,
    maxOpenFiles,
    maxFileSize: tableBytesFor(maxOpenFiles),
  }
}

/** What of an open LevelDB counts in the budget: its memtable (twice: a full one is written out while the next fills) and block cache, unless given explicitly. */
export function budgetedBytes(explicit: ExplicitSizes, level: LevelOptions): number {
  return (explicit.writeBufferSize === undefined ? 2 * level.writeBufferSize : 0) + (explicit.cacheSize === undefined ? level.cacheSize : 0)
}
