// Long file: the Transaction's read and write paths of value and map states
// share private helpers on the hot path (a handler's get and put per event);
// the versioned layout adds to each path, not a concern of its own.
import { TidemarkError } from '../errors.js'
import { decodeWith, encodeWith, isJsonCodec, type Codec } from './codec.js'
import { keyBytes, mapKeyPrefix, prefixEnd, type KeyInput } from './keys.js'
import type { Position } from './position.js'
import type { MapState, StateDefinition, ValueState } from './state.js'
import { describeValue } from '../util/describe-value.js'
import { type ByteRange, type CommitOptions, type MapView, NOT_CACHED, type PendingWrite, type ScanOptions, type TransactionHost, type ValueView, keyOfId, pendingBytes } from './transaction-types.js'
import { describeKey, jsonExact, jsonText, parseJson, settle, successor } from './transaction-util.js'
import { decodeVersioned, splitText, upgradeValue, type Versioning } from './versioning.js'

/** What the read and write paths need of a state definition. */
type Def<V> = { readonly codec: Codec<V>; readonly name: string; readonly versioning?: Versioning | undefined }

// latin1 maps each byte to one UTF-16 unit: a collision-free map key, and
// for an ASCII string key it is the key itself behind the state's prefix, so
// the hot path builds no Buffer (see idOf).
const bufferId = (b: Buffer): string => b.toString('latin1')

/** Whether every UTF-16 unit of `s` is below 0x80. */
function isAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0x7f) return false
  return true
}

/** The id of key bytes `rest` behind `prefixId` without building a Buffer when `key` is ASCII, else undefined. */
function asciiId(prefixId: string, key: unknown, max: number): string | undefined {
  if (typeof key !== 'string' || key.length === 0 || key.length > max || !isAscii(key)) return undefined
  return prefixId + key
}

export interface TransactionOptions {
  /**
   * A transaction whose commit has begun. Until that commit completes this
   * one reads its writes, and this one's commit waits for it and fails
   * (writing nothing) if it failed: the next batch of a stream can be
   * processed while the previous one is written.
   */
  after?: Transaction
}

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
  /** What the pending writes will write, about: see pendingBytes. */
  #bytes = 0
  /** Views are made once per state: a handler asks for one per event. */
  readonly #views = new Map<StateDefinition, ValueView<unknown, never> | MapView<unknown, never, never>>()
  #state: 'open' | 'committing' | 'done' = 'open'
  /** The value views' indexes of #writes by string key. */
  readonly #indexes: Array<Map<string, PendingWrite>> = []
  /** The transaction this one follows (TransactionOptions.after) until this one commits. */
  #after: Transaction | undefined
  /** The latest commit attempt. */
  #committed: Promise<void> | undefined
  /** beforeCommit() callbacks, in the order given. */
  #beforeCommit: Array<() => void> | undefined
  /** The state whose view was asked for last, and that view: a handler asks for its view on every event. */
  #lastDef: StateDefinition | undefined
  #lastView: ValueView<unknown, never> | MapView<unknown, never, never> | undefined
  /** Versioned states written by this transaction whose store records an older highest version (TransactionHost.versionBehind). */
  #versions: Set<StateDefinition> | undefined

  constructor(host: TransactionHost, options: TransactionOptions = {}) {
    if (typeof options !== 'object' || options === null) throw new TypeError(`options must be an object ({ after? }), got ${describeValue(options)}`)
    this.#host = host
    const after = options.after
    if (after !== undefined) {
      if (!(after instanceof Transaction) || after.#committed === undefined) throw new TypeError('options.after must be a transaction whose commit has begun')
      this.#after = after
    }
  }

  /** Number of pending writes. */
  get size(): number {
    return this.#writes.size
  }

  /**
   * About how many bytes the pending writes will write: each key's id and
   * its latest value (a string by its length, a JSON primitive by its own).
   * Commit loops close a batch when it reaches the store's memtable size
   * (docs/partition-store.md, "What a partition costs").
   */
  get pendingBytes(): number {
    return this.#bytes
  }

  get isOpen(): boolean {
    return this.#state === 'open'
  }

  /**
   * @internal Runs `fn` when a commit of this transaction begins, before its
   * writes are taken, at each attempt (a refused commit keeps it for the
   * next); an abort or a commit that succeeded drops it. For a write that is
   * complete only with the batch: the outbox entry that a batch's emits
   * append to is put once here instead of again at every emit (each put of
   * the growing entry cost about 0.9 us of CPU per emitted record: 6.2 us
   * per event of a word count emitting one record each, 5.3 without).
   */
  beforeCommit(fn: () => void): void {
    this.#checkOpen()
    ;(this.#beforeCommit ??= []).push(fn)
  }

  value<V, K extends string | Uint8Array>(def: ValueState<V, K>): ValueView<V, K> {
    this.#checkOpen()
    this.#host.checkState(def as StateDefinition)
    const cached = this.#view(def as StateDefinition)
    if (cached !== undefined) return cached as unknown as ValueView<V, K>
    if (def.kind !== 'value') throw new TypeError(`state ${JSON.stringify(def.name)} is a ${def.kind} state; use tx.map()`)
    const max = this.#host.maxKeyBytes
    const prefixId = bufferId(def.prefix)
    const header = def.versioning?.header ?? ''
    // The first write at a new version raises the store's version record in the same batch.
    const behind = def.versioning !== undefined && this.#host.versionBehind(def as StateDefinition)
    // An ASCII string key's id is prefixId + key, of the same length; any
    // other character takes more UTF-8 bytes than UTF-16 units. With an ASCII
    // prefix such an id is ASCII, its own UTF-8 key bytes, and the store need
    // not look at it again (PendingWrite.ascii, readText).
    const asciiPrefix = isAscii(prefixId)
    const asciiOf = (key: K, id: string): boolean => asciiPrefix && typeof key === 'string' && id.length === prefixId.length + key.length
    // Ids of string keys, kept by the store across transactions: a kept id
    // string is hashed once, where an id built per event is a new string
    // that every map lookup must flatten and hash again. The first `maxIds`
    // keys are kept (MAX_KEY_IDS, or fewer on a small budget share); the
    // map is not cleared when full, which churned when a stream had more
    // keys than that.
    const { ids, max: maxIds } = this.#host.keyIds(def as StateDefinition)
    // The last string key's id: a read-modify-write asks for it twice.
    let lastKey: string | undefined
    let lastId = ''
    const idOf = (key: K): string => {
      if (key === lastKey) return lastId
      if (typeof key !== 'string') return prefixId + bufferId(keyBytes(key, `key of state ${def.name}`, max))
      let id = ids.get(key)
      if (id === undefined) {
        id = asciiId(prefixId, key, max) ?? prefixId + bufferId(keyBytes(key, `key of state ${def.name}`, max))
        if (ids.size < maxIds) ids.set(key, id)
      }
      lastKey = key
      lastId = id
      return id
    }
    const what = (key: K) => (): string => `state ${def.name} key ${describeKey(key)}`
    const json = isJsonCodec(def.codec as Codec<unknown>)
    const cache = this.#host.caches(def as StateDefinition)
    // This transaction's writes of this state by string key: an index into
    // #writes (the same objects, changed in place), so that a key written
    // earlier in the batch is read and written again with one lookup by the
    // key itself and no id. Cleared with #writes.
    const own = new Map<string, PendingWrite>()
    this.#indexes.push(own)
    const ownWrite = (key: K): PendingWrite | undefined => (typeof key === 'string' ? own.get(key) : undefined)
    const index = (key: K, w: PendingWrite): void => { if (typeof key === 'string') own.set(key, w) }
    const view: ValueView<V, K> = {
      get: (key) => {
        try {
          const w = ownWrite(key)
          let r: V | undefined | Promise<V | undefined>
          if (w !== undefined) r = this.#readPending(def, w, what, key)
          else {
            const id = idOf(key)
            r = this.#get(def, json, cache, id, what, key, asciiOf(key, id))
          }
          return r instanceof Promise ? r : Promise.resolve(r)
        } catch (err) {
          return Promise.reject(err)
        }
      },
      getSync: (key) => {
        const w = ownWrite(key)
        if (w !== undefined) return this.#readPending(def, w, what, key)
        const id = idOf(key)
        return this.#getSync(def, json, cache, id, what, key, asciiOf(key, id))
      },
      put: (key, value) => {
        const w = ownWrite(key)
        if (w !== undefined) this.#putValue(def, json, cache, w, value, what, key, false, header)
        else {
          const id = idOf(key)
          index(key, this.#putValue(def, json, cache, id, value, what, key, asciiOf(key, id), header))
        }
        if (behind) this.#noteVersion(def as StateDefinition)
      },
      delete: (key) => {
        const id = idOf(key)
        index(key, this.#put(id, undefined, undefined, false, cache, asciiOf(key, id), header))
      },
      entries: (options = {}) => this.#entries(def, def.prefix, def.keyType, options, `key of state ${def.name}`),
    }
    this.#views.set(def as StateDefinition, view as unknown as ValueView<unknown, never>)
    return view
  }

  map<V, K extends string | Uint8Array, S extends string | Uint8Array>(def: MapState<V, K, S>): MapView<V, K, S> {
    this.#checkOpen()
    this.#host.checkState(def as StateDefinition)
    const cached = this.#view(def as StateDefinition)
    if (cached !== undefined) return cached as unknown as MapView<V, K, S>
    if (def.kind !== 'map') throw new TypeError(`state ${JSON.stringify(def.name)} is a ${(def as StateDefinition).kind} state; use tx.value()`)
    const max = this.#host.maxKeyBytes
    const baseOf = (key: K): Buffer => mapKeyPrefix(def.prefix, keyBytes(key, `key of state ${def.name}`, max))
    const idOf = (pair: readonly [K, S]): string => bufferId(baseOf(pair[0])) + (asciiId('', pair[1], max) ?? bufferId(keyBytes(pair[1], `sub-key of state ${def.name}`, max)))
    const what = (pair: readonly [K, S]) => (): string => `state ${def.name} key ${describeKey(pair[0])} sub-key ${describeKey(pair[1])}`
    const json = isJsonCodec(def.codec as Codec<unknown>)
    const cache = this.#host.caches(def as StateDefinition)
    const header = def.versioning?.header ?? ''
    const behind = def.versioning !== undefined && this.#host.versionBehind(def as StateDefinition)
    const view: MapView<V, K, S> = {
      get: (key, sub) => settle(() => { const pair = [key, sub] as const; return this.#get(def, json, cache, idOf(pair), what, pair, false) }),
      getSync: (key, sub) => { const pair = [key, sub] as const; return this.#getSync(def, json, cache, idOf(pair), what, pair, false) },
      put: (key, sub, value) => {
        const pair = [key, sub] as const
        this.#putValue(def, json, cache, idOf(pair), value, what, pair, false, header)
        if (behind) this.#noteVersion(def as StateDefinition)
      },
      delete: (key, sub) => this.#put(idOf([key, sub]), undefined, undefined, false, cache, false, header),
      entries: (key, options = {}) => this.#entries(def, baseOf(key), def.subKeyType, options, `sub-key of state ${def.name}`),
      clear: async (key) => {
        const base = baseOf(key)
        const range: ByteRange = { gte: base, lt: prefixEnd(base), reverse: false }
        for await (const [k] of this.#merged(range)) this.#put(bufferId(k), undefined, undefined, false, cache, false, header)
      },
    }
    this.#views.set(def as StateDefinition, view as unknown as MapView<unknown, never, never>)
    return view
  }

  /**
   * Writes every change and the new positions in one atomic batch; with
   * TransactionOptions.after, once that transaction has committed. The
   * position is required: state committed without one would be applied
   * again by a replay (use commitWithoutPosition() when that is meant).
   */
  commit(position: Position | readonly Position[], options: CommitOptions = {}): Promise<void> {
    if (position === undefined || position === null || (Array.isArray(position) && position.length === 0)) {
      return Promise.reject(new TypeError(`position must be a { topic, partition, offset } or a non-empty array of them, got ${Array.isArray(position) ? '[]' : String(position)}; use commitWithoutPosition() to commit state that no source event produced`))
    }
    return this.#start(position, options)
  }

  /**
   * Writes every change in one atomic batch and leaves the stored positions
   * as they are: for state that no source event produced (an initial load, a
   * repair). A replay does not know about these writes.
   */
  commitWithoutPosition(): Promise<void> {
    return this.#start(undefined, {})
  }

  #start(position: Position | readonly Position[] | undefined, options: CommitOptions): Promise<void> {
    try {
      this.#checkOpen()
      if (this.#beforeCommit !== undefined) for (const fn of this.#beforeCommit) fn()
    } catch (err) {
      return Promise.reject(err)
    }
    this.#state = 'committing'
    this.#committed = this.#commit(position, options)
    return this.#committed
  }

  async #commit(position: Position | readonly Position[] | undefined, options: CommitOptions): Promise<void> {
    try {
      const after = this.#after
      if (after !== undefined) {
        try {
          // The latest attempt: a retried commit of `after` counts.
          await after.#committed
        } catch (cause) {
          throw new TidemarkError('TIDEMARK_COMMIT_FAILED', `the commit of the transaction this one follows failed, so nothing of this one was written: ${(cause as Error)?.message ?? cause}`, { cause })
        }
        this.#after = undefined
      }
      const positions = position === undefined ? [] : Array.isArray(position) ? [...position] : [position as Position]
      await this.#host.commitBatch(this.#writes, positions, options, this.#versions)
      this.#state = 'done'
      this.#clearWrites()
    } catch (err) {
      // A refused commit leaves the transaction usable: the caller may fix the
      // position and commit again, or abort.
      this.#state = 'open'
      throw err
    }
  }

  /** Drops every pending write. */
  abort(): void {
    this.#clearWrites()
    this.#after = undefined
    this.#state = 'done'
  }

  /** A write of this transaction or, while they commit, of those it follows. */
  #pending(id: string): PendingWrite | undefined {
    const own = this.#writes.get(id)
    if (own !== undefined) return own
    for (let t = this.#after; t !== undefined; t = t.#after) {
      const w = t.#writes.get(id)
      if (w !== undefined) return w
    }
    return undefined
  }

  #get<V, Q>(def: Def<V>, json: boolean, cache: boolean, id: string, what: (q: Q) => () => string, q: Q, ascii: boolean): V | undefined | Promise<V | undefined> {
    const pending = this.#pending(id)
    if (pending !== undefined) return this.#readPending(def, pending, what, q)
    if (json && cache) {
      const hit = this.#host.cached(id)
      if (hit !== NOT_CACHED) return hit as V | undefined
    }
    return this.#readStored(def, json, cache, id, what, q, ascii)
  }

  /** A read of the committed value, past the value cache: no write of this transaction or of those it follows has the id. */
  #readStored<V, Q>(def: Def<V>, json: boolean, cache: boolean, id: string, what: (q: Q) => () => string, q: Q, ascii: boolean): V | undefined | Promise<V | undefined> {
    if (json) {
      const text = this.#host.readText(id, ascii)
      if (text instanceof Promise) return text.then((t) => (t === undefined ? undefined : this.#parseStored<V, Q>(def, id, t, what, q)))
      if (text === undefined) return undefined
      const value = this.#parseStored<V, Q>(def, id, text, what, q)
      // Only primitives are kept (an object could be changed by the caller),
      // and only what a read found: keeping misses churned the cache for every
      // new key of a stream. Same tick as the read, so a commit that completes
      // later overwrites it.
      if (cache && jsonExact(value)) this.#host.remember(id, value)
      return value
    }
    const bytes = this.#host.read(keyOfId(id))
    if (bytes instanceof Promise) return bytes.then((b) => (b === undefined ? undefined : this.#decodeStored(def, b, what(q))))
    return bytes === undefined ? undefined : this.#decodeStored(def, bytes, what(q))
  }

  /** Stored bytes decoded by the state's codec (and upgraded, for a versioned state). */
  #decodeStored<V>(def: Def<V>, bytes: Buffer, what: () => string): V {
    const ver = def.versioning
    return ver === undefined ? decodeWith(def.codec, bytes, what) : decodeVersioned(def, ver, bytes, what)
  }

  /**
   * JSON.parse of text LevelDB decoded from UTF-8. That decoding replaces
   * bytes that are not UTF-8 with U+FFFD instead of failing, so text holding
   * one is decoded again from the bytes by the codec, which tells a stored
   * U+FFFD from damage and fails with TIDEMARK_DECODE_FAILED on the latter.
   */
  #parseStored<V, Q>(def: Def<V>, id: string, text: string, what: (q: Q) => () => string, q: Q): V {
    const ver = def.versioning
    if (ver !== undefined) {
      // A value at the current version costs a startsWith and a slice more.
      if (text.startsWith(ver.header) && !text.includes('\ufffd')) return parseJson<V, Q>(text.slice(ver.header.length), what, q)
      return this.#parseOlder(def, ver, id, text, what, q)
    }
    if (!text.includes('\ufffd')) return parseJson<V, Q>(text, what, q)
    const bytes = this.#host.read(keyOfId(id))
    if (bytes instanceof Promise || bytes === undefined) return parseJson<V, Q>(text, what, q)
    return decodeWith(def.codec, bytes, what(q))
  }

  /** #parseStored of a versioned JSON value that is not plainly at the current version: an older one, upgraded, or text holding U+FFFD. */
  #parseOlder<V, Q>(def: Def<V>, ver: Versioning, id: string, text: string, what: (q: Q) => () => string, q: Q): V {
    const describe = what(q)
    if (text.includes('\ufffd')) {
      const bytes = this.#host.read(keyOfId(id))
      if (bytes !== undefined && !(bytes instanceof Promise)) return decodeVersioned(def, ver, bytes, describe)
    }
    const { version, json } = splitText(ver, def.name, text, describe)
    return upgradeValue(ver, def.name, version, parseJson<V, Q>(json, what, q), describe) as V
  }

  #getSync<V, Q>(def: Def<V>, json: boolean, cache: boolean, id: string, what: (q: Q) => () => string, q: Q, ascii: boolean): V | undefined {
    const pending = this.#pending(id)
    if (pending !== undefined) return this.#readPending(def, pending, what, q)
    if (json && cache) {
      const hit = this.#host.cached(id)
      if (hit !== NOT_CACHED) return hit as V | undefined
    }
    // Only a read that must go to LevelDB can find it closed; pending writes
    // and the value cache answer at any time.
    if (!this.#host.readable()) throw this.#host.quiescedError()
    return this.#readStored(def, json, cache, id, what, q, ascii) as V | undefined
  }

  /**
   * Puts `value` as the pending write of `target`: an id (the write is made
   * if missing) or a write of this transaction found already. The value is
   * encoded before anything changes, so a value that fails leaves the
   * transaction as it was.
   */
  #putValue<V, Q>(def: Def<V>, json: boolean, cache: boolean, target: string | PendingWrite, value: V, what: (q: Q) => () => string, q: Q, ascii: boolean, header: string): PendingWrite {
    this.#checkOpen()
    let bytes: Buffer | string | undefined
    let exact = false
    if (!json) bytes = encodeWith(def.codec, value, what(q))
    // A JSON primitive cannot fail to encode and cannot change: it is turned
    // into text once at commit (pendingValue) instead of at every put.
    else if (jsonExact(value)) exact = true
    else bytes = jsonText(value, what, q)
    if (typeof target === 'string') return this.#put(target, bytes, value, exact, cache, ascii, header)
    this.#bytes += sizeOf(bytes, value, exact) - sizeOf(target.value, target.decoded, target.exact)
    target.value = bytes
    target.decoded = value
    target.exact = exact
    return target
  }

  /** The value a pending write stands for. */
  #readPending<V, Q>(def: Def<V>, w: PendingWrite, what: (q: Q) => () => string, q: Q): V | undefined {
    if (w.exact) return w.decoded as V
    const v = w.value
    if (v === undefined) return undefined
    return typeof v === 'string' ? parseJson<V, Q>(v, what, q) : decodeWith(def.codec, v, what(q))
  }

  /**
   * `exact`: `decoded` is a JSON primitive, turned into text at commit; `value` is then unused.
   * `ascii`: the id is known to be ASCII (PendingWrite.ascii). Returns the write.
   */
  #put(id: string, value: Buffer | string | undefined, decoded: unknown, exact: boolean, cache: boolean, ascii: boolean, header: string): PendingWrite {
    this.#checkOpen()
    // Overwritten in place: only this transaction's own map holds it, and
    // only while it is open. `cache` never changes: an id belongs to one state.
    const w = this.#writes.get(id)
    if (w === undefined) {
      const created = { value, decoded, exact, cache, ascii, header }
      this.#writes.set(id, created)
      this.#bytes += id.length + sizeOf(value, decoded, exact)
      return created
    }
    this.#bytes += sizeOf(value, decoded, exact) - sizeOf(w.value, w.decoded, w.exact)
    w.value = value
    w.decoded = decoded
    w.exact = exact
    return w
  }

  async *#entries<V, K>(
    def: Def<V>,
    base: Buffer,
    keyType: 'string' | 'bytes',
    options: ScanOptions<K>,
    what: string,
  ): AsyncGenerator<[K, V]> {
    if (typeof options !== 'object' || options === null) throw new TypeError(`entries(options): options must be an object ({ prefix?, gt?, gte?, lt?, lte?, reverse?, limit? }), got ${describeValue(options)}`)
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
      yield [key, this.#decodeStored(def, v, () => `state ${def.name} key ${describeKey(key)}`)]
      if (++n >= limit) return
    }
  }

  /** The store's entries in range with this transaction's writes laid over them. */
  async *#merged(range: ByteRange): AsyncGenerator<[Buffer, Buffer]> {
    const dir = range.reverse ? -1 : 1
    const inRange = (k: Buffer): boolean => Buffer.compare(k, range.gte) >= 0 && (range.lt === undefined || Buffer.compare(k, range.lt) < 0)
    // Writes of the transactions this one follows (while they commit), the newest laid last.
    const older: Transaction[] = []
    for (let t = this.#after; t !== undefined; t = t.#after) older.unshift(t)
    const writes = older.length === 0 ? this.#writes : new Map([...older, this].flatMap((t) => [...t.#writes]))
    const overlay: Array<{ key: Buffer; value: Buffer | undefined }> = []
    for (const [id, w] of writes) {
      const key = keyOfId(id)
      if (inRange(key)) overlay.push({ key, value: pendingBytes(w) })
    }
    overlay.sort((a, b) => dir * Buffer.compare(a.key, b.key))
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

  /** The view made for `def` in this transaction, if any. */
  #view(def: StateDefinition): ValueView<unknown, never> | MapView<unknown, never, never> | undefined {
    if (def === this.#lastDef) return this.#lastView
    const view = this.#views.get(def)
    if (view !== undefined) {
      this.#lastDef = def
      this.#lastView = view
    }
    return view
  }

  #noteVersion(def: StateDefinition): void {
    ;(this.#versions ??= new Set()).add(def)
  }

  #clearWrites(): void {
    this.#beforeCommit = undefined
    this.#versions = undefined
    this.#writes.clear()
    this.#bytes = 0
    for (const index of this.#indexes) index.clear()
  }

  #checkOpen(): void {
    if (this.#state !== 'open') {
      throw new TidemarkError('TIDEMARK_TRANSACTION_CLOSED', this.#state === 'done' ? 'transaction already committed or aborted' : 'transaction is committing')
    }
  }
}

/** The bytes a pending value will take: text by its length, a JSON primitive (written as text at commit) by a guess of 8 unless a string. */
function sizeOf(value: Buffer | string | undefined, decoded: unknown, exact: boolean): number {
  if (exact) return typeof decoded === 'string' ? decoded.length + 2 : 8
  return value === undefined ? 0 : typeof value === 'string' ? value.length : value.byteLength
}
