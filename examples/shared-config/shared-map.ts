// A map shared by any number of processes, after the SharedMap of Pravega's
// StateSynchronizer sample. Reads come from the local copy (call refresh() for
// the latest); every change is a read-modify-write inside updateState(), so
// it is decided on the state it was derived from and never lost.
import { createStateSynchronizer, type CompactPointStore, type RevisionedLog, type StateSynchronizer } from '../../src/index.js'

type Entries<V> = Readonly<Record<string, V>>

/** The changes that go into the log. Each is applied by every client, so it carries its data, not a function. */
export type MapUpdate<V> =
  | { op: 'put'; key: string; value: V }
  | { op: 'remove'; key: string }
  | { op: 'clear' }

function applyUpdate<V>(state: Entries<V>, update: MapUpdate<V>): Entries<V> {
  switch (update.op) {
    case 'put':
      return { ...state, [update.key]: update.value }
    case 'remove': {
      const { [update.key]: _removed, ...rest } = state
      return rest
    }
    case 'clear':
      return {}
  }
}

export interface SharedMapOptions {
  log: RevisionedLog
  compactPoints: { store: CompactPointStore; prefix: string }
  /** Compact after this many removes by this client (and after every clear), as the Pravega sample does. */
  compactEveryRemoves?: number
}

export class SharedMap<V> {
  readonly #sync: StateSynchronizer<Entries<V>, MapUpdate<V>>
  readonly #compactEvery: number
  #removes = 0

  private constructor(options: SharedMapOptions) {
    this.#sync = createStateSynchronizer<Entries<V>, MapUpdate<V>>({ log: options.log, apply: applyUpdate, compactPoints: options.compactPoints })
    this.#compactEvery = options.compactEveryRemoves ?? 5
  }

  /** Opens the map, creating it empty if the log holds none yet. */
  static async open<V>(options: SharedMapOptions): Promise<SharedMap<V>> {
    const map = new SharedMap<V>(options)
    await map.#sync.initialize({})
    return map
  }

  get revision(): bigint {
    return this.#sync.getRevision()
  }

  get(key: string): V | undefined {
    return Object.hasOwn(this.#sync.getState(), key) ? this.#sync.getState()[key] : undefined
  }

  /** A copy of the local entries. */
  entries(): Map<string, V> {
    return new Map(Object.entries(this.#sync.getState()))
  }

  refresh(): Promise<void> {
    return this.#sync.fetchUpdates()
  }

  /** Returns the previous value. */
  put(key: string, value: V): Promise<V | undefined> {
    return this.#sync.updateStateWithResult((state, updates) => {
      updates.push({ op: 'put', key, value })
      return Object.hasOwn(state, key) ? state[key] : undefined
    })
  }

  /** Puts only if the key is absent; returns the value it already had. */
  putIfAbsent(key: string, value: V): Promise<V | undefined> {
    return this.#sync.updateStateWithResult((state, updates) => {
      if (Object.hasOwn(state, key)) return state[key]
      updates.push({ op: 'put', key, value })
      return undefined
    })
  }

  /** Removes the key, or, with `expected`, only while it has that value. Returns the removed value. */
  async remove(key: string, ...expected: [] | [V]): Promise<V | undefined> {
    const removed = await this.#sync.updateStateWithResult((state, updates) => {
      if (!Object.hasOwn(state, key)) return undefined
      if (expected.length === 1 && !same(state[key], expected[0])) return undefined
      updates.push({ op: 'remove', key })
      return { value: state[key] as V }
    })
    if (removed === undefined) return undefined
    if (++this.#removes % this.#compactEvery === 0) await this.compact()
    return removed.value
  }

  /** Replaces the value of a present key, or, with `expected`, only while it has that value. Returns the replaced value. */
  replace(key: string, value: V, ...expected: [] | [V]): Promise<{ replaced: V } | undefined> {
    return this.#sync.updateStateWithResult((state, updates) => {
      if (!Object.hasOwn(state, key)) return undefined
      if (expected.length === 1 && !same(state[key], expected[0])) return undefined
      updates.push({ op: 'put', key, value })
      return { replaced: state[key] as V }
    })
  }

  async clear(): Promise<void> {
    await this.#sync.updateState((_, updates) => updates.push({ op: 'clear' }))
    await this.compact()
  }

  /** Writes the current state as a compact point; readers that start later skip the entries before it. */
  compact(): Promise<void> {
    return this.#sync.compact((state) => state)
  }

  close(): Promise<void> {
    return this.#sync.close()
  }
}

function same<V>(a: V | undefined, b: V): boolean {
  return JSON.stringify(a) === JSON.stringify(b)
}
