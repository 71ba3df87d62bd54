import type { PendingWrite } from './transaction-types.js'

/** Rough bytes of a value cache entry beyond its key and value (Map slot, object headers). */
const CACHE_ENTRY_OVERHEAD = 64

/** Stands for "no value" in the value cache, whose misses are undefined. */
export const ABSENT: unique symbol = Symbol('tidemark.absent')

/**
 * A store's committed values by key id (PartitionStoreOptions.valueCacheBytes),
 * up to about `limit` bytes; insertion order is eviction order. The limit
 * follows the store's budget share while the store is open.
 */
export class ValueCache {
  /** The entries; the store reads them directly on its hot path. */
  readonly values = new Map<string, unknown>()
  #bytes = 0
  #limit: number

  constructor(limit: number) {
    this.#limit = limit
  }

  get limit(): number {
    return this.#limit
  }

  /** A new limit; a smaller one evicts the oldest entries at once. */
  resize(limit: number): void {
    this.#limit = limit
    this.#evict()
  }

  set(id: string, value: unknown): void {
    const limit = this.#limit
    const size = entryBytes(id, value)
    const old = this.values.get(id)
    if (old !== undefined) this.#bytes -= entryBytes(id, old)
    if (size > limit) {
      if (old !== undefined) this.values.delete(id)
      return
    }
    // An update keeps the entry's place in the eviction order.
    this.values.set(id, value)
    this.#bytes += size
    this.#evict()
  }

  /**
   * The cache follows a commit: decoded primitives and deletes are kept,
   * anything else is dropped. Writes of an uncachedState() are passed over:
   * none of its keys is ever in the cache.
   */
  noteCommitted(writes: Map<string, PendingWrite>): void {
    for (const [id, w] of writes) {
      if (!w.cache) continue
      if (w.exact) this.set(id, w.decoded)
      else if (w.value === undefined) this.set(id, ABSENT)
      else this.drop(id)
    }
  }

  drop(id: string): void {
    // A store of objects keeps no values at all: no lookup per committed write.
    if (this.values.size === 0) return
    const old = this.values.get(id)
    if (old === undefined) return
    this.values.delete(id)
    this.#bytes -= entryBytes(id, old)
  }

  clear(): void {
    this.values.clear()
    this.#bytes = 0
  }

  #evict(): void {
    if (this.#bytes <= this.#limit) return
    for (const [old, v] of this.values) {
      this.values.delete(old)
      this.#bytes -= entryBytes(old, v)
      if (this.#bytes <= this.#limit) return
    }
  }
}

function entryBytes(id: string, value: unknown): number {
  return CACHE_ENTRY_OVERHEAD + id.length + (typeof value === 'string' ? 2 * value.length : 8)
}
