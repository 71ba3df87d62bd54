/**
 * The store a transform builds: a fresh partition store opened with the
 * target program's states, written through transactions in batches (each
 * entry at its state's current version), then given the source's positions
 * and a new lineage in its last commit.
 */
import { TidemarkError } from '../errors.js'
import { countState, LINEAGE_METADATA, PartitionStore, type LineageRecord, type MapState, type Position, type StateDefinition, type Transaction, type ValueState } from '../store/index.js'
import { describeValue } from '../util/index.js'
import type { StateEntry, TargetWriter } from './types.js'

type AnyValue = ValueState<unknown, string | Uint8Array>
type AnyMap = MapState<unknown, string | Uint8Array, string | Uint8Array>

export class TargetStore implements TargetWriter {
  readonly store: PartitionStore
  readonly #defs: ReadonlyMap<string, StateDefinition>
  readonly #batchSize: number
  readonly #onBatch: (written: number) => void
  #tx: Transaction
  /** Entries put so far, committed or not. */
  #puts = 0

  private constructor(store: PartitionStore, defs: ReadonlyMap<string, StateDefinition>, batchSize: number, onBatch: (written: number) => void) {
    this.store = store
    this.#defs = defs
    this.#batchSize = batchSize
    this.#onBatch = onBatch
    this.#tx = store.transaction()
  }

  /** `internal`: Tidemark's own states the source holds (dedupe watermarks, the outbox), copied as they are and never named by an entry. */
  static async create(path: string, states: readonly StateDefinition[], internal: readonly StateDefinition[], options: { batchSize: number; onBatch: (written: number) => void }): Promise<TargetStore> {
    const store = await PartitionStore.open({ path, states: [...states, ...internal] })
    return new TargetStore(store, new Map(states.map((s) => [s.name, s])), options.batchSize, options.onBatch)
  }

  /** Entries put so far (Tidemark's own states not counted). */
  get puts(): number {
    return this.#puts
  }

  put(entry: StateEntry): Promise<void> {
    return this.write(entry, undefined)
  }

  /** `from`: the source entry this one came from, named in an error. */
  async write(entry: StateEntry, from: StateEntry | undefined): Promise<void> {
    const def = this.#check(entry, from)
    try {
      if (def.kind === 'value') this.#tx.value(def as AnyValue).put(entry.key, entry.value)
      else this.#tx.map(def as AnyMap).put(entry.key, entry.subKey!, entry.value)
    } catch (err) {
      // The key's own checks (a type, an empty or oversized key): the entry is bad input.
      if (err instanceof TypeError || err instanceof RangeError) throw invalid('key', `${err.message}`, entry, from, err)
      throw err
    }
    await this.#counted(true)
  }

  /** Copies one entry of one of Tidemark's own states, as it is. */
  async writeInternal(def: StateDefinition, key: string | Uint8Array, value: unknown): Promise<void> {
    this.#tx.value(def as AnyValue).put(key, value)
    await this.#counted(false)
  }

  async get(state: string, key: string | Uint8Array, subKey?: string | Uint8Array): Promise<unknown> {
    const entry = { state, key, ...(subKey === undefined ? {} : { subKey }), value: null }
    const def = this.#check(entry, undefined)
    try {
      return def.kind === 'value' ? await this.#tx.value(def as AnyValue).get(key) : await this.#tx.map(def as AnyMap).get(key, subKey!)
    } catch (err) {
      if (err instanceof TypeError || err instanceof RangeError) throw invalid('key', err.message, entry, undefined, err)
      throw err
    }
  }

  /**
   * The last commit: what is pending, the positions (the job resumes after
   * them) and the lineage record, written before it so that a store with
   * the positions always has it.
   */
  async finish(positions: readonly Position[], lineage: LineageRecord): Promise<void> {
    await this.store.setMetadata(LINEAGE_METADATA, lineage)
    if (positions.length > 0) await this.#tx.commit(positions)
    else await this.#tx.commitWithoutPosition()
    this.#onBatch(this.#puts)
  }

  /** Entries per target state, as the store holds them now. */
  async counts(): Promise<Record<string, number>> {
    const counts: Record<string, number> = {}
    for (const def of this.#defs.values()) counts[def.name] = await countState(this.store, def)
    return counts
  }

  close(): Promise<void> {
    if (this.#tx.isOpen) this.#tx.abort()
    return this.store.close()
  }

  async #counted(entry: boolean): Promise<void> {
    if (entry) this.#puts++
    if (this.#tx.size < this.#batchSize) return
    await this.#tx.commitWithoutPosition()
    this.#tx = this.store.transaction()
    this.#onBatch(this.#puts)
  }

  #check(entry: StateEntry, from: StateEntry | undefined): StateDefinition {
    if (entry === null || typeof entry !== 'object') throw invalid('not-an-entry', `an entry must be { state, key, subKey?, value }, got ${describeValue(entry)}`, undefined, from)
    const def = typeof entry.state === 'string' ? this.#defs.get(entry.state) : undefined
    if (def === undefined) {
      throw invalid('unknown-state', `state ${describeValue(entry.state)} is not one of the target's states (${[...this.#defs.keys()].join(', ') || 'none'})`, entry, from)
    }
    if (def.kind === 'map' && entry.subKey === undefined) throw invalid('sub-key', `state ${JSON.stringify(def.name)} is a map state: the entry needs a subKey`, entry, from)
    if (def.kind === 'value' && entry.subKey !== undefined) throw invalid('sub-key', `state ${JSON.stringify(def.name)} is a value state: the entry must have no subKey`, entry, from)
    if (entry.value === undefined) throw invalid('value', 'the entry has no value (undefined); return no entry to drop it', entry, from)
    return def
  }
}

function invalid(reason: string, message: string, entry: Partial<StateEntry> | undefined, from: StateEntry | undefined, cause?: unknown): TidemarkError {
  const what = entry?.state === undefined || typeof entry.state !== 'string' ? 'an entry' : `an entry of ${JSON.stringify(entry.state)} (key ${describeValue(entry.key)})`
  const source = from === undefined ? '' : ` made from ${JSON.stringify(from.state)} key ${describeValue(from.key)}`
  return new TidemarkError('TIDEMARK_TRANSFORM_ENTRY_INVALID', `${what}${source}: ${message}`, {
    ...(cause === undefined ? {} : { cause }),
    details: { reason, ...(typeof entry?.state === 'string' ? { state: entry.state } : {}), ...(from === undefined ? {} : { from: { state: from.state, key: from.key } }) },
  })
}
