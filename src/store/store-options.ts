import { TidemarkError } from '../errors.js'
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
  /** LevelDB block cache in bytes. Default 8 MiB. */
  cacheSize?: number
  /** LevelDB write buffer (memtable) in bytes. Default 4 MiB. */
  writeBufferSize?: number
  /**
   * Committed values of JSON states that are primitives (numbers, strings,
   * booleans) or absent are kept decoded, up to about this many bytes, so a
   * hot key is read without LevelDB and without a decode. Objects are not
   * kept: a caller could change one after a read. 0 turns it off. Default 4 MiB.
   */
  valueCacheBytes?: number
}

export const STORE_DEFAULTS = Object.freeze({
  maxKeyBytes: 16384,
  sync: false,
  cacheSize: 8 * 1024 * 1024,
  writeBufferSize: 4 * 1024 * 1024,
  valueCacheBytes: 4 * 1024 * 1024,
})

export type ResolvedOptions = Readonly<Required<Omit<PartitionStoreOptions, 'states' | 'path' | 'create'>>>

/** Checks PartitionStore.open's options once; the states by name. */
export function resolveStoreOptions(options: PartitionStoreOptions): { path: string; create: boolean; resolved: ResolvedOptions; byName: Map<string, StateDefinition> } {
  if (options === null || typeof options !== 'object') throw new TypeError('options must be an object with at least { path }')
  const { path, states = [], create = true } = options
  if (typeof path !== 'string' || path.length === 0) throw new TypeError(`options.path must be a non-empty string, got ${JSON.stringify(path)}`)
  if (typeof create !== 'boolean') throw new TypeError(`options.create must be a boolean, got ${typeof create}`)
  const resolved = {
    maxKeyBytes: options.maxKeyBytes ?? STORE_DEFAULTS.maxKeyBytes,
    sync: options.sync ?? STORE_DEFAULTS.sync,
    cacheSize: options.cacheSize ?? STORE_DEFAULTS.cacheSize,
    writeBufferSize: options.writeBufferSize ?? STORE_DEFAULTS.writeBufferSize,
    valueCacheBytes: options.valueCacheBytes ?? STORE_DEFAULTS.valueCacheBytes,
  }
  if (!Number.isInteger(resolved.maxKeyBytes) || resolved.maxKeyBytes < 1 || resolved.maxKeyBytes > MAX_KEY_BYTES) {
    throw new RangeError(`options.maxKeyBytes must be an integer from 1 to ${MAX_KEY_BYTES}, got ${resolved.maxKeyBytes}`)
  }
  if (typeof resolved.sync !== 'boolean') throw new TypeError(`options.sync must be a boolean, got ${typeof resolved.sync}`)
  for (const field of ['cacheSize', 'writeBufferSize'] as const) {
    const v = resolved[field]
    if (!Number.isInteger(v) || v < 64 * 1024) throw new RangeError(`options.${field} must be an integer of at least 65536 bytes, got ${v}`)
  }
  if (!Number.isSafeInteger(resolved.valueCacheBytes) || resolved.valueCacheBytes < 0) {
    throw new RangeError(`options.valueCacheBytes must be a non-negative integer, got ${resolved.valueCacheBytes}`)
  }
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
