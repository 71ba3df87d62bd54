// Long file: PartitionStore is the one owner of a LevelDB handle, its value
// cache, positions and metadata, and the commit that writes them together;
// its options (store-options.ts) and transactions (transaction*.ts) live
// beside it.
import type { ClassicLevel } from 'classic-level'
import { TidemarkError } from '../errors.js'
import { levelCause, openLevel, openStoreDir } from './store-dir.js'
import {
  decodeOffset, decodePositionKey, encodeOffset, metadataKey, positionKey,
  POSITIONS_PREFIX, prefixEnd, REGISTRY_PREFIX, registryKey,
} from './keys.js'
import { formatPosition, sourceId, validatePosition, type Position } from './position.js'
import type { StateDefinition } from './state.js'
import { checkDeclaredStates, decodeStateRecord, encodeStateRecord, type RecordedState, type StateRecord } from './state-registry.js'
import { resolveStoreOptions, type PartitionStoreOptions, type ResolvedOptions } from './store-options.js'
import { Transaction, type TransactionOptions } from './transaction.js'
import { keyOfId, NOT_CACHED, pendingValue, type ByteRange, type CommitOptions, type PendingWrite, type TransactionHost } from './transaction-types.js'

/** Rough bytes of a value cache entry beyond its key and value (Map slot, object headers). */
const CACHE_ENTRY_OVERHEAD = 64

/**
 * utf8 keys and values by default, so that reads and writes of JSON states
 * with ASCII keys take abstract-level's fast path and build no Buffer; every
 * other access names the buffer encoding.
 */
type Level = ClassicLevel<string, string>
const BUFFERS = Object.freeze({ keyEncoding: 'buffer' as const, valueEncoding: 'buffer' as const })
const BUFFER_KEY = Object.freeze({ keyEncoding: 'buffer' as const })
const BUFFER_VALUE = Object.freeze({ valueEncoding: 'buffer' as const })
const EMPTY = Object.freeze({})
// Matches strings whose UTF-16 units are all below 0x80.
const ASCII = /^[^\u0080-\uffff]*$/
const FLUSH_RANGE = Buffer.of(0xff)
const SYNC = Object.freeze({ sync: true })

/**
 * One partition's state, its source positions and metadata in one LevelDB
 * directory. State changes and positions are committed in one atomic batch,
 * which is what lets a replay after a crash apply every event exactly once.
 */
export class PartitionStore implements TransactionHost {
  readonly path: string
  readonly maxKeyBytes: number
  readonly #options: ResolvedOptions
  readonly #states = new Map<string, StateDefinition>()
  readonly #positions = new Map<string, Position>()
  /** The state registry as stored (state-registry.ts), by name: the declared states and any the program no longer lists. */
  readonly #records = new Map<string, StateRecord>()
  #db: Level
  #closed = false
  /** Set when the reopen after a quiesce failed: the database is closed for good, and every call says why. */
  #failed: TidemarkError | undefined
  /** Set while the store is quiesced: reads and commits wait for it. */
  #gate: Promise<void> | undefined
  /** Serializes commits, quiesce and close. */
  #queue: Promise<unknown> = Promise.resolve()
  #activeReads = 0
  /** Sections in which the database stays open (hold()); counted in #activeReads too. */
  #holds = 0
  /** From the moment quiesce() has drained and closes the database until it is open again. */
  #quiescing = false
  #readsDrained: (() => void) | undefined
  /** By state name: a key's id depends only on the name and the key. */
  readonly #keyIds = new Map<string, Map<string, string>>()
  /** The state definition that last passed checkState(). */
  #lastChecked: StateDefinition | undefined
  /** Committed values by key id (see PartitionStoreOptions.valueCacheBytes); insertion order is eviction order. */
  readonly #values = new Map<string, unknown>()
  #valueBytes = 0
  /** Position keys by sourceId (see #positionKey). */
  readonly #positionKeys = new Map<string, Buffer>()

  private constructor(path: string, db: Level, options: ResolvedOptions, states: Map<string, StateDefinition>) {
    this.path = path
    this.#db = db
    this.#options = options
    this.maxKeyBytes = options.maxKeyBytes
    this.#states = states
  }

  static async open(options: PartitionStoreOptions): Promise<PartitionStore> {
    const { path, create, resolved, byName } = resolveStoreOptions(options)
    const db = await openStoreDir(path, resolved, create)
    const store = new PartitionStore(path, db, Object.freeze(resolved), byName)
    try {
      await store.#loadPositions()
      await store.#registerStates()
    } catch (err) {
      await db.close()
      throw err
    }
    return store
  }

  /** A new transaction; see Transaction and TransactionOptions. */
  transaction(options?: TransactionOptions): Transaction {
    this.#checkOpen()
    return new Transaction(this, options)
  }

  /** The stored offset for a source partition, or undefined if none was committed. */
  position(topic: string, partition: number): bigint | undefined {
    return this.#positions.get(sourceId(topic, partition))?.offset
  }

  /** Every stored position. */
  positions(): Position[] {
    return [...this.#positions.values()]
  }

  /**
   * Every state the store holds, as its registry records it: kind and the
   * highest version a value was written at (absent for unversioned states),
   * in name order. It includes states the program did not declare.
   */
  recordedStates(): RecordedState[] {
    return [...this.#records].map(([name, r]) => ({ name, ...r })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  }

  /** Reads a metadata document written by setMetadata. */
  async getMetadata<T = unknown>(name: string): Promise<T | undefined> {
    const bytes = await this.read(metadataKey(checkMetaName(name)))
    return bytes === undefined ? undefined : (JSON.parse(bytes.toString('utf8')) as T)
  }

  /** Writes a metadata document (owner epoch, job name, ...) in its own atomic batch. */
  async setMetadata(name: string, value: unknown): Promise<void> {
    const key = metadataKey(checkMetaName(name))
    const text = JSON.stringify(value)
    if (text === undefined) throw new TypeError(`metadata ${name} has no JSON form`)
    await this.#serialized(async () => {
      this.#checkOpen()
      await this.#db.put<Buffer, Buffer>(key, Buffer.from(text, 'utf8'), { ...BUFFERS, sync: this.#options.sync })
    })
  }

  /**
   * Writes LevelDB's in-memory table to a table file now, while reads and
   * commits go on. A checkpoint calls it before quiesce(): the reopen then
   * has only the commits made since to replay, which keeps the stall short.
   */
  async flush(): Promise<void> {
    this.#checkOpen()
    if (this.#gate !== undefined) {
      await this.#gate
      this.#checkOpen()
    }
    // A compaction of a range that no table file overlaps flushes the
    // memtable and compacts nothing: every key of the store sorts below 0xff.
    await this.#db.compactRange<Buffer>(FLUSH_RANGE, FLUSH_RANGE, BUFFER_KEY)
  }

  /**
   * Runs fn while the store is closed and nothing can write to it, then
   * reopens it: the moment in which a checkpoint can hard-link LevelDB's
   * files. Reads and commits issued meanwhile wait and then proceed.
   *
   * With keepOpen, fn runs between commits with the database open: commits
   * wait, reads and LevelDB's compactions go on. A checkpoint that takes the
   * files LevelDB appends to (write-ahead logs, MANIFEST) up to their sizes
   * at this moment needs no more, and commits then wait for a few file-system
   * calls instead of a close and a reopen (which writes and syncs a new
   * MANIFEST and CURRENT: tens of milliseconds on a busy disk).
   */
  async quiesce<T>(fn: (path: string) => Promise<T>, options: { keepOpen?: boolean } = {}): Promise<T> {
    if (options.keepOpen === true) {
      return this.#serialized(async () => {
        this.#checkOpen()
        return fn(this.path)
      })
    }
    return this.#serialized(async () => {
      this.#checkOpen()
      let release!: () => void
      this.#gate = new Promise<void>((resolve) => { release = resolve })
      try {
        // A scan may begin between the drain and this continuation.
        while (this.#activeReads > 0) await this.#drainReads()
        this.#quiescing = true
        // fn may change the files; the reopened store is read afresh.
        this.#clearValues()
        await this.#db.close()
        try {
          return await fn(this.path)
        } finally {
          await this.#reopen()
        }
      } finally {
        this.#quiescing = false
        this.#gate = undefined
        release()
      }
    })
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    await this.#queue.catch(() => undefined)
    await this.#drainReads()
    await this.#db.close()
  }

  get closed(): boolean {
    return this.#closed
  }

  // ---- TransactionHost: used by Transaction, not part of the public surface ----

  /** @internal */
  checkState(def: StateDefinition): void {
    this.#checkOpen()
    // Definitions are frozen: the one that passed last passes again (a
    // handler asks for its state's view on every event).
    if (def === this.#lastChecked && def !== undefined) return
    if (typeof def !== 'object' || def === null || typeof def.name !== 'string') {
      throw new TypeError(`expected a state definition (made by valueState() or mapState()), got ${def === null ? 'null' : Array.isArray(def) ? 'an array' : typeof def}`)
    }
    const known = this.#states.get(def.name)
    if (known === undefined) {
      throw new TidemarkError('TIDEMARK_UNKNOWN_STATE', `state ${JSON.stringify(def?.name)} is not one of this store's states (${[...this.#states.keys()].join(', ') || 'none'}); pass it in options.states`)
    }
    if (known.kind !== def.kind) {
      throw new TidemarkError('TIDEMARK_STATE_CONFLICT', `state ${JSON.stringify(def.name)} is a ${known.kind} state in this store, not a ${def.kind} state`)
    }
    const v = (d: StateDefinition): string => (d.version === undefined ? 'no version' : `version ${d.version}`)
    if (known.version !== def.version) throw new TidemarkError('TIDEMARK_STATE_CONFLICT', `state ${JSON.stringify(def.name)} was opened with ${v(known)}; this definition has ${v(def)}`)
    this.#lastChecked = def
  }

  /**
   * @internal
   * Point reads are synchronous (LevelDB's getSync): they are served from the
   * block cache or the page cache in microseconds, and a hop to the thread
   * pool per read would cost more than the read. Only while the store is
   * quiesced does a read wait.
   */
  read(key: Buffer): Buffer | undefined | Promise<Buffer | undefined> {
    this.#checkOpen()
    if (!this.readable()) return this.#gate!.then(() => this.read(key))
    try {
      return this.#db.getSync<Buffer, Buffer>(key, BUFFERS)
    } catch (cause) {
      throw this.#translate(cause, 'read')
    }
  }

  /**
   * @internal
   * A point read that LevelDB returns as a UTF-8 string: for JSON states this
   * skips a Buffer per read, which is most of what a read costs beyond LevelDB.
   */
  readText(id: string, ascii: boolean): string | undefined | Promise<string | undefined> {
    this.#checkOpen()
    if (!this.readable()) return this.#gate!.then(() => this.readText(id, ascii))
    try {
      // An ASCII id is its own UTF-8 key bytes: no Buffer for the key either,
      // and the read takes abstract-level's fast path for default encodings.
      return ascii || ASCII.test(id) ? this.#db.getSync(id) : this.#db.getSync<Buffer, string>(keyOfId(id), BUFFER_KEY)
    } catch (cause) {
      throw this.#translate(cause, 'read')
    }
  }

  /** @internal */
  keyIds(def: StateDefinition): Map<string, string> {
    let ids = this.#keyIds.get(def.name)
    if (ids === undefined) {
      ids = new Map()
      this.#keyIds.set(def.name, ids)
    }
    return ids
  }

  /**
   * @internal
   * Whether a point read can be served now. While a quiesce waits for held
   * sections (hold()) the database is still open, and reads must go on: a
   * held section that waited for the quiesce would never end.
   */
  readable(): boolean {
    return this.#gate === undefined || this.#holds > 0
  }

  /** @internal */
  quiescedError(): TidemarkError {
    return new TidemarkError('TIDEMARK_STORE_QUIESCED', `partition store ${this.path} is closed for a checkpoint; use get(), which waits, or read inside a section the store holds open (a PartitionProcessor handler)`)
  }

  /**
   * Keeps the database open until the returned function is called: a
   * quiesce() (a checkpoint) that begins meanwhile waits for it, and reads,
   * synchronous ones too, are served throughout. The PartitionProcessor holds
   * the store while a handler runs, which is why getSync() never fails there.
   * The section must not wait for a commit or a quiesce of this store.
   */
  async hold(): Promise<() => void> {
    for (;;) {
      const release = this.tryHold()
      if (release !== undefined) return release
      await this.#gate
    }
  }

  /** hold() without waiting: undefined while a quiesce has the database closed (or is closing it). */
  tryHold(): (() => void) | undefined {
    this.#checkOpen()
    if (this.#quiescing) return undefined
    this.#holds++
    this.#activeReads++
    let released = false
    return () => {
      if (released) return
      released = true
      this.#holds--
      this.#readDone()
    }
  }

  /** @internal */
  caches(def: StateDefinition): boolean {
    return this.#options.valueCacheBytes > 0 && this.#states.get(def.name)?.uncached !== true
  }

  /** @internal */
  cached(id: string): unknown {
    const v = this.#values.get(id)
    return v !== undefined ? (v === ABSENT ? undefined : v) : NOT_CACHED
  }

  /** @internal */
  remember(id: string, value: unknown): void {
    if (this.#options.valueCacheBytes === 0 || this.#gate !== undefined || this.#values.has(id)) return
    this.#setValue(id, value === undefined ? ABSENT : value)
  }

  /** @internal */
  async *scan(range: ByteRange): AsyncGenerator<[Buffer, Buffer]> {
    this.#checkOpen()
    if (!this.readable()) {
      await this.#gate
      this.#checkOpen()
    }
    this.#activeReads++
    const options = range.lt === undefined ? { ...BUFFERS, gte: range.gte, reverse: range.reverse } : { ...BUFFERS, gte: range.gte, lt: range.lt, reverse: range.reverse }
    const it = this.#db.iterator<Buffer, Buffer>(options)
    try {
      while (true) {
        const entries = await it.nextv(256)
        if (entries.length === 0) return
        for (const entry of entries) yield entry as [Buffer, Buffer]
      }
    } catch (cause) {
      throw this.#translate(cause, 'scan')
    } finally {
      await it.close()
      this.#readDone()
    }
  }

  /** @internal After dropState removed a state's keys and its registry record. */
  forgetState(name: string): void { this.#records.delete(name) }

  /** Whether the store was opened with state `name` (PartitionStoreOptions.states). */
  isDeclared(name: string): boolean {
    return this.#states.has(name)
  }

  /** @internal */
  versionBehind(def: StateDefinition): boolean {
    return (this.#records.get(def.name)?.version ?? 0) < (def.version ?? 0)
  }

  /** @internal */
  async commitBatch(writes: Map<string, PendingWrite>, positions: Position[], options: CommitOptions, versions?: ReadonlySet<StateDefinition>): Promise<void> {
    this.#checkOpen()
    const checked = positions.map((p, i) => validatePosition(p, positions.length === 1 ? 'position' : `position[${i}]`))
    const seen = new Set<string>()
    for (const p of checked) {
      const id = sourceId(p.topic, p.partition)
      if (seen.has(id)) throw new RangeError(`position lists ${p.topic}/${p.partition} twice`)
      seen.add(id)
    }
    await this.#serialized(async () => {
      this.#checkOpen()
      if (options.allowRewind !== true) {
        for (const p of checked) {
          const stored = this.#positions.get(sourceId(p.topic, p.partition))
          if (stored !== undefined && p.offset <= stored.offset) {
            throw new TidemarkError(
              'TIDEMARK_POSITION_NOT_ADVANCING',
              `commit at ${formatPosition(p)} is not after the stored position ${formatPosition(stored)}; the events up to it are already in the store (pass { allowRewind: true } to rewind on purpose)`,
              { details: { topic: p.topic, partition: p.partition, offset: p.offset, storedOffset: stored.offset } },
            )
          }
        }
      }
      if (writes.size === 0 && checked.length === 0) return
      // A chained batch: each operation goes to LevelDB's native batch as it
      // is added, which costs the event loop about a third of what an array
      // batch costs (abstract-level copies every operation of an array, and
      // the binding reads them back). An ASCII id is its own UTF-8 key bytes,
      // and strings go in without a Buffer; utf8 is the database's default
      // encoding, so only Buffers name theirs.
      const batch = this.#db.batch()
      try {
        for (const [id, w] of writes) {
          const value = pendingValue(w)
          if (w.ascii || ASCII.test(id)) {
            if (value === undefined) batch.del(id)
            else if (typeof value === 'string') batch.put(id, value)
            else batch.put<string, Buffer>(id, value, BUFFER_VALUE)
          } else {
            const key = keyOfId(id)
            if (value === undefined) batch.del<Buffer>(key, BUFFER_KEY)
            else if (typeof value === 'string') batch.put<Buffer, string>(key, value, BUFFER_KEY)
            else batch.put<Buffer, Buffer>(key, value, BUFFERS)
          }
        }
        for (const p of checked) batch.put<Buffer, Buffer>(this.#positionKey(p), encodeOffset(p.offset), BUFFERS)
        // The first values at a new version and the record that says so are one write.
        if (versions !== undefined) for (const def of versions) batch.put<Buffer, Buffer>(registryKey(def.name), encodeStateRecord({ kind: def.kind, version: def.version! }), BUFFERS)
        await batch.write(this.#options.sync ? SYNC : EMPTY)
      } catch (cause) {
        await batch.close().catch(() => undefined)
        throw new TidemarkError('TIDEMARK_COMMIT_FAILED', `commit of ${writes.size + checked.length} writes to ${this.path} failed: ${(cause as Error)?.message}`, { cause })
      }
      for (const p of checked) this.#positions.set(sourceId(p.topic, p.partition), p)
      if (versions !== undefined) for (const def of versions) this.#records.set(def.name, { kind: def.kind, version: def.version! })
      if (this.#options.valueCacheBytes > 0) this.#noteCommitted(writes)
    })
  }

  // ---- internals ----

  /** A source's position key, made once: LevelDB copies a key into the batch, so one Buffer serves every commit. */
  #positionKey(p: Position): Buffer {
    const id = sourceId(p.topic, p.partition)
    let key = this.#positionKeys.get(id)
    if (key === undefined) {
      key = positionKey(p.topic, p.partition)
      this.#positionKeys.set(id, key)
    }
    return key
  }

  async #loadPositions(): Promise<void> {
    for await (const [key, value] of this.#db.iterator<Buffer, Buffer>({ ...BUFFERS, gte: POSITIONS_PREFIX, lt: prefixEnd(POSITIONS_PREFIX)! })) {
      const { topic, partition } = decodePositionKey(key)
      this.#positions.set(sourceId(topic, partition), { topic, partition, offset: decodeOffset(value) })
    }
  }

  /**
   * Records each state's kind so that reopening with a different kind is
   * caught instead of misreading bytes, and refuses a state that a newer
   * program wrote at a higher version (TIDEMARK_STATE_VERSION_AHEAD) before
   * anything is written.
   */
  async #registerStates(): Promise<void> {
    for await (const [key, value] of this.#db.iterator<Buffer, Buffer>({ ...BUFFERS, gte: REGISTRY_PREFIX, lt: prefixEnd(REGISTRY_PREFIX)! })) {
      this.#records.set(key.subarray(REGISTRY_PREFIX.length).toString('utf8'), decodeStateRecord(value))
    }
    const added = await checkDeclaredStates(this.#records, this.#states, this.path, (def) => this.#hasValues(def))
    if (added.size === 0) return
    const ops = [...added].map(([name, record]) => ({ type: 'put' as const, key: registryKey(name), value: encodeStateRecord(record) }))
    await this.#db.batch<Buffer, Buffer>(ops, { ...BUFFERS, sync: this.#options.sync })
    for (const [name, record] of added) this.#records.set(name, record)
  }

  /** Whether a state holds at least one value: one seek. */
  async #hasValues(def: StateDefinition): Promise<boolean> {
    const it = this.#db.iterator<Buffer, Buffer>({ ...BUFFERS, gte: def.prefix, lt: prefixEnd(def.prefix)!, limit: 1, values: false })
    try {
      return (await it.next()) !== undefined
    } finally {
      await it.close()
    }
  }

  #serialized<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(async () => {
      if (this.#gate !== undefined) await this.#gate
      return fn()
    })
    this.#queue = run.catch(() => undefined)
    return run
  }

  /**
   * The cache follows a commit: decoded primitives and deletes are kept,
   * anything else is dropped. Writes of an uncachedState() are passed over:
   * none of its keys is ever in the cache.
   */
  #noteCommitted(writes: Map<string, PendingWrite>): void {
    for (const [id, w] of writes) {
      if (!w.cache) continue
      if (w.exact) this.#setValue(id, w.decoded)
      else if (w.value === undefined) this.#setValue(id, ABSENT)
      else this.#dropValue(id)
    }
  }

  #setValue(id: string, value: unknown): void {
    const limit = this.#options.valueCacheBytes
    const size = entryBytes(id, value)
    const old = this.#values.get(id)
    if (old !== undefined) this.#valueBytes -= entryBytes(id, old)
    if (size > limit) {
      if (old !== undefined) this.#values.delete(id)
      return
    }
    // An update keeps the entry's place in the eviction order.
    this.#values.set(id, value)
    this.#valueBytes += size
    if (this.#valueBytes <= limit) return
    for (const [old, v] of this.#values) {
      this.#values.delete(old)
      this.#valueBytes -= entryBytes(old, v)
      if (this.#valueBytes <= limit) return
    }
  }

  #dropValue(id: string): void {
    // A store of objects keeps no values at all: no lookup per committed write.
    if (this.#values.size === 0) return
    const old = this.#values.get(id)
    if (old === undefined) return
    this.#values.delete(id)
    this.#valueBytes -= entryBytes(id, old)
  }

  #clearValues(): void {
    this.#values.clear()
    this.#valueBytes = 0
  }

  #readDone(): void {
    if (--this.#activeReads === 0 && this.#readsDrained !== undefined) {
      this.#readsDrained()
      this.#readsDrained = undefined
    }
  }

  async #drainReads(): Promise<void> {
    if (this.#activeReads === 0) return
    await new Promise<void>((resolve) => { this.#readsDrained = resolve })
  }

  #checkOpen(): void {
    if (this.#closed) throw new TidemarkError('TIDEMARK_STORE_CLOSED', `partition store ${this.path} is closed`)
    if (this.#failed !== undefined) throw this.#failure()
  }

  /** A fresh error per call (its own stack), with the reopen's failure as cause. */
  #failure(): TidemarkError {
    const failed = this.#failed!
    return new TidemarkError(failed.code, failed.message, { cause: failed.cause })
  }

  /**
   * After a quiesce. Never with createIfMissing: had the store's files gone
   * meanwhile, a new empty store would silently take its place. A failure (a
   * full disk, a lost directory) is kept, so that every later call says what
   * happened instead of LevelDB's "Database is not open".
   */
  async #reopen(): Promise<void> {
    try {
      this.#db = await openLevel(this.path, this.#options, false)
    } catch (err) {
      const cause = levelCause(err)
      this.#failed = new TidemarkError(
        'TIDEMARK_STORE_OPEN_FAILED',
        `partition store ${this.path} could not be reopened after a checkpoint: ${(cause as Error)?.message ?? cause}; it is unusable until it is closed and opened again`,
        { cause },
      )
      throw this.#failure()
    }
  }

  #translate(cause: unknown, op: string): Error {
    if (cause instanceof TidemarkError) return cause
    if (this.#closed) return new TidemarkError('TIDEMARK_STORE_CLOSED', `partition store ${this.path} closed during ${op}`, { cause })
    if (this.#failed !== undefined) return this.#failure()
    return cause as Error
  }
}

/** Stands for "no value" in the value cache, whose misses are undefined. */
const ABSENT: unique symbol = Symbol('tidemark.absent')

function entryBytes(id: string, value: unknown): number {
  return CACHE_ENTRY_OVERHEAD + id.length + (typeof value === 'string' ? 2 * value.length : 8)
}

function checkMetaName(name: unknown): string {
  if (typeof name !== 'string' || name.length === 0) throw new TypeError(`metadata name must be a non-empty string, got ${JSON.stringify(name)}`)
  return name
}
