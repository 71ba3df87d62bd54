import { TidemarkError } from '../errors.js'
import { decodeWith, encodeWith, type Codec } from './codec.js'
import { keyBytes, mapKeyPrefix, prefixEnd, type KeyInput } from './keys.js'
import type { Position } from './position.js'
import type { MapState, StateDefinition, ValueState } from './state.js'

/** What a transaction needs from its store; kept narrow so the two stay decoupled. */
export interface TransactionHost {
  readonly maxKeyBytes: number
  checkState(def: StateDefinition): void
  read(key: Buffer): Buffer | undefined | Promise<Buffer | undefined>
  scan(range: ByteRange): AsyncIterable<[Buffer, Buffer]>
  commitBatch(writes: Map<string, PendingWrite>, positions: Position[], options: CommitOptions): Promise<void>
}

export interface PendingWrite {
  readonly key: Buffer
  /** undefined deletes the key. */
  readonly value: Buffer | undefined
  /** The value as put, returned to reads when it is a primitive (an object could be changed by the caller after the put). */
  readonly decoded?: unknown
}

export interface ByteRange {
  gte: Buffer
  lt: Buffer | undefined
  reverse: boolean
}

export interface CommitOptions {
  /** Accept a position that is not after the stored one (a deliberate rewind). */
  allowRewind?: boolean
}

export interface ScanOptions<K> {
  prefix?: K
  gt?: K
  gte?: K
  lt?: K
  lte?: K
  reverse?: boolean
  limit?: number
}

export interface ValueView<V, K> {
  get(key: K): Promise<V | undefined>
  put(key: K, value: V): void
  delete(key: K): void
  entries(options?: ScanOptions<K>): AsyncIterable<[K, V]>
}

export interface MapView<V, K, S> {
  get(key: K, subKey: S): Promise<V | undefined>
  put(key: K, subKey: S, value: V): void
  delete(key: K, subKey: S): void
  /** Sub-key/value pairs of one key, in sub-key byte order. */
  entries(key: K, options?: ScanOptions<S>): AsyncIterable<[S, V]>
  /** Deletes every sub-key of one key. */
  clear(key: K): Promise<void>
}

// latin1 maps each byte to one UTF-16 unit: a cheap, collision-free map key.
const bufferId = (b: Buffer): string => b.toString('latin1')

/**
 * A unit of work on a partition store. Reads see the transaction's own writes;
 * nothing is visible to anyone else until commit(), which writes every change
 * and the new source position in one LevelDB batch. An abandoned transaction
 * (never committed, or aborted) leaves no trace.
 *
 * Transactions are not isolated from each other: a partition has one writer,
 * and the store serializes commits, so a second concurrent transaction is the
 * caller's choice and its reads may be stale.
 */
export class Transaction {
  readonly #host: TransactionHost
  readonly #writes = new Map<string, PendingWrite>()
  /** Views are made once per state: a handler asks for one per event. */
  readonly #views = new Map<StateDefinition, ValueView<unknown, never> | MapView<unknown, never, never>>()
  #state: 'open' | 'committing' | 'done' = 'open'

  constructor(host: TransactionHost) {
    this.#host = host
  }

  /** Number of pending writes. */
  get size(): number {
    return this.#writes.size
  }

  get isOpen(): boolean {
    return this.#state === 'open'
  }

  value<V, K extends string | Uint8Array>(def: ValueState<V, K>): ValueView<V, K> {
    this.#checkOpen()
    this.#host.checkState(def as StateDefinition)
    const cached = this.#views.get(def as StateDefinition)
    if (cached !== undefined) return cached as unknown as ValueView<V, K>
    if (def.kind !== 'value') throw new TypeError(`state ${JSON.stringify(def.name)} is a ${def.kind} state; use tx.map()`)
    const keyOf = (key: K): Buffer => Buffer.concat([def.prefix, keyBytes(key, `key of state ${def.name}`, this.#host.maxKeyBytes)])
    const what = (key: K) => (): string => `state ${def.name} key ${describeKey(key)}`
    const view: ValueView<V, K> = {
      get: async (key) => this.#get(def, keyOf(key), what(key)),
      put: (key, value) => this.#put(keyOf(key), encodeWith(def.codec, value, what(key)), value),
      delete: (key) => this.#put(keyOf(key), undefined),
      entries: (options = {}) => this.#entries(def, def.prefix, def.keyType, options, `key of state ${def.name}`),
    }
    this.#views.set(def as StateDefinition, view as unknown as ValueView<unknown, never>)
    return view
  }

  map<V, K extends string | Uint8Array, S extends string | Uint8Array>(def: MapState<V, K, S>): MapView<V, K, S> {
    this.#checkOpen()
    this.#host.checkState(def as StateDefinition)
    const cached = this.#views.get(def as StateDefinition)
    if (cached !== undefined) return cached as unknown as MapView<V, K, S>
    if (def.kind !== 'map') throw new TypeError(`state ${JSON.stringify(def.name)} is a ${(def as StateDefinition).kind} state; use tx.value()`)
    const max = this.#host.maxKeyBytes
    const baseOf = (key: K): Buffer => mapKeyPrefix(def.prefix, keyBytes(key, `key of state ${def.name}`, max))
    const keyOf = (key: K, sub: S): Buffer => Buffer.concat([baseOf(key), keyBytes(sub, `sub-key of state ${def.name}`, max)])
    const what = (key: K, sub: S) => (): string => `state ${def.name} key ${describeKey(key)} sub-key ${describeKey(sub)}`
    const view: MapView<V, K, S> = {
      get: async (key, sub) => this.#get(def, keyOf(key, sub), what(key, sub)),
      put: (key, sub, value) => this.#put(keyOf(key, sub), encodeWith(def.codec, value, what(key, sub)), value),
      delete: (key, sub) => this.#put(keyOf(key, sub), undefined),
      entries: (key, options = {}) => this.#entries(def, baseOf(key), def.subKeyType, options, `sub-key of state ${def.name}`),
      clear: async (key) => {
        const base = baseOf(key)
        const range: ByteRange = { gte: base, lt: prefixEnd(base), reverse: false }
        for await (const [k] of this.#merged(range)) this.#put(k, undefined)
      },
    }
    this.#views.set(def as StateDefinition, view as unknown as MapView<unknown, never, never>)
    return view
  }

  /** Writes every change and the new positions in one atomic batch. */
  async commit(position?: Position | readonly Position[], options: CommitOptions = {}): Promise<void> {
    this.#checkOpen()
    const positions = position === undefined ? [] : Array.isArray(position) ? [...position] : [position as Position]
    this.#state = 'committing'
    try {
      await this.#host.commitBatch(this.#writes, positions, options)
      this.#state = 'done'
      this.#writes.clear()
    } catch (err) {
      // A refused commit leaves the transaction usable: the caller may fix the
      // position and commit again, or abort.
      this.#state = 'open'
      throw err
    }
  }

  /** Drops every pending write. */
  abort(): void {
    this.#writes.clear()
    this.#state = 'done'
  }

  async #get<V>(def: { codec: Codec<V> }, key: Buffer, what: () => string): Promise<V | undefined> {
    const pending = this.#writes.get(bufferId(key))
    if (pending !== undefined && def.codec.name === 'json' && jsonExact(pending.decoded)) return pending.decoded as V
    let bytes = pending !== undefined ? pending.value : this.#host.read(key)
    if (bytes instanceof Promise) bytes = await bytes
    return bytes === undefined ? undefined : decodeWith(def.codec, bytes, what)
  }

  #put(key: Buffer, value: Buffer | undefined, decoded?: unknown): void {
    this.#checkOpen()
    this.#writes.set(bufferId(key), { key, value, decoded })
  }

  async *#entries<V, K>(
    def: { codec: Codec<V>; name: string },
    base: Buffer,
    keyType: 'string' | 'bytes',
    options: ScanOptions<K>,
    what: string,
  ): AsyncGenerator<[K, V]> {
    const max = this.#host.maxKeyBytes
    const enc = (k: K, field: string): Buffer => Buffer.concat([base, keyBytes(k as KeyInput, `${what} (${field})`, max)])
    const limit = options.limit ?? Infinity
    if (!(limit === Infinity || (Number.isInteger(limit) && limit >= 0))) throw new RangeError(`limit must be a non-negative integer, got ${limit}`)
    let gte = base
    let lt = prefixEnd(base)
    const raise = (b: Buffer): void => { if (Buffer.compare(b, gte) > 0) gte = b }
    const lower = (b: Buffer | undefined): void => { if (b !== undefined && (lt === undefined || Buffer.compare(b, lt) < 0)) lt = b }
    if (options.prefix !== undefined) {
      const p = enc(options.prefix, 'prefix')
      raise(p)
      lower(prefixEnd(p))
    }
    if (options.gte !== undefined) raise(enc(options.gte, 'gte'))
    if (options.gt !== undefined) raise(successor(enc(options.gt, 'gt')))
    if (options.lt !== undefined) lower(enc(options.lt, 'lt'))
    if (options.lte !== undefined) lower(successor(enc(options.lte, 'lte')))
    if (lt !== undefined && Buffer.compare(gte, lt) >= 0) return
    let n = 0
    if (n >= limit) return
    for await (const [k, v] of this.#merged({ gte, lt, reverse: options.reverse === true })) {
      const rest = k.subarray(base.length)
      const key = (keyType === 'string' ? rest.toString('utf8') : new Uint8Array(rest)) as K
      yield [key, decodeWith(def.codec, v, () => `state ${def.name} key ${describeKey(key)}`)]
      if (++n >= limit) return
    }
  }

  /** The store's entries in range with this transaction's writes laid over them. */
  async *#merged(range: ByteRange): AsyncGenerator<[Buffer, Buffer]> {
    const dir = range.reverse ? -1 : 1
    const inRange = (k: Buffer): boolean => Buffer.compare(k, range.gte) >= 0 && (range.lt === undefined || Buffer.compare(k, range.lt) < 0)
    const overlay = [...this.#writes.values()].filter((w) => inRange(w.key)).sort((a, b) => dir * Buffer.compare(a.key, b.key))
    let i = 0
    for await (const [k, v] of this.#host.scan(range)) {
      while (i < overlay.length && dir * Buffer.compare(overlay[i]!.key, k) < 0) {
        const w = overlay[i++]!
        if (w.value !== undefined) yield [w.key, w.value]
      }
      if (i < overlay.length && Buffer.compare(overlay[i]!.key, k) === 0) {
        const w = overlay[i++]!
        if (w.value !== undefined) yield [w.key, w.value]
        continue
      }
      yield [k, v]
    }
    for (; i < overlay.length; i++) {
      const w = overlay[i]!
      if (w.value !== undefined) yield [w.key, w.value]
    }
  }

  #checkOpen(): void {
    if (this.#state !== 'open') {
      throw new TidemarkError('TIDEMARK_TRANSACTION_CLOSED', this.#state === 'done' ? 'transaction already committed or aborted' : 'transaction is committing')
    }
  }
}

/** A value that JSON turns back into itself, so a read of a pending write can skip the decode. */
function jsonExact(v: unknown): boolean {
  return typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v) && !Object.is(v, -0))
}

/** The smallest key greater than b: b followed by a zero byte. */
function successor(b: Buffer): Buffer {
  return Buffer.concat([b, Buffer.of(0)])
}

function describeKey(key: unknown): string {
  if (typeof key === 'string') return JSON.stringify(key.length > 64 ? `${key.slice(0, 64)}…` : key)
  if (key instanceof Uint8Array) return `0x${Buffer.from(key.subarray(0, 32)).toString('hex')}${key.length > 32 ? '…' : ''}`
  return String(key)
}
