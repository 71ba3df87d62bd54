// Long file: PartitionStore is the one owner of a LevelDB handle, its value
// cache, positions and metadata, and the commit that writes them together;
// its options (store-options.ts) and transactions (transaction*.ts) live
// beside it.
import type { ClassicLevel } from 'classic-level'
import { TidemarkError } from '../errors.js'
import type { BudgetMember } from './budget/store-budget.js'
import type { StoreShare } from './budget/budget-options.js'
import { checkLeveldbProperty, levelCause, openLevel, openStoreDir, type LevelOptions } from './store-dir.js'
import { checkMetaName, encodeOffset, metadataKey, registryKey } from './keys.js'
import { checkAdvancing, checkCommitPositions, PositionKeys, sourceId, type Position } from './position.js'
import type { StateDefinition } from './state.js'
import { checkDeclared, encodeStateRecord, type RecordedState, type StateRecord } from './state-registry.js'
import { loadPositions, registerStates } from './store-load.js'
import { LINEAGE_METADATA, lineageIdOf, loadLineage } from './lineage.js'
import { budgetedBytes, levelOptionsOf, resolveStoreOptions, type PartitionStoreOptions, type ResolvedOptions } from './store-options.js'
import { Transaction, type TransactionOptions } from './transaction.js'
import { KEY_ID_BYTES, keyOfId, MAX_KEY_IDS, NOT_CACHED, pendingValue, type ByteRange, type CommitOptions, type PendingWrite, type TransactionHost } from './transaction-types.js'
import { ABSENT, ValueCache } from './value-cache.js'
import { ReusedBatch } from './reused-batch.js'

/**
 * utf8 keys and values by default, so that reads and writes of JSON states
 * with ASCII keys take abstract-level's fast path and build no Buffer; every
 * other access names the buffer encoding.
 */
type Level = ClassicLevel<string, string>
const BUFFERS = Object.freeze({ keyEncoding: 'buffer' as const, valueEncoding: 'buffer' as const })
const BUFFER_KEY = Object.freeze({ keyEncoding: 'buffer' as const })
// Matches strings whose UTF-16 units are all below 0x80.
const ASCII = /^[^\u0080-\uffff]*$/
const FLUSH_RANGE = Buffer.of(0xff)

/**
 * One partition's state, its source positions and metadata in one LevelDB
 * directory. State changes and positions are committed in one atomic batch,
 * which is what lets a replay after a crash apply every event exactly once.
 *
 * Its LevelDB sizes are its share of a process budget (StoreBudget), which
 * may close its LevelDB while it is idle: the next read or commit opens it
 * again, and reads and commits issued meanwhile wait for that.
 */
export class PartitionStore implements TransactionHost {
  readonly path: string
  readonly maxKeyBytes: number
  readonly #options: ResolvedOptions
  readonly #states = new Map<string, StateDefinition>()
  readonly #positions = new Map<string, Position>()
  #lineage: string | undefined
  /** The state registry as stored (state-registry.ts), by name: the declared states and any the program no longer lists. */
  readonly #records = new Map<string, StateRecord>()
  #db: Level
  /** The batch of #db that commits reuse; made again for a reopened LevelDB. */
  #batch: ReusedBatch | undefined
  #closed = false
  /** Set when the reopen after a quiesce failed: the database is closed for good, and every call says why. */
  #failed: TidemarkError | undefined
  /** Set while the store is quiesced or idle-closed: reads and commits wait for it. */
  #gate: Promise<void> | undefined
  /** Opens the gate of an idle-closed store. */
  #openGate: (() => void) | undefined
  /** The LevelDB is closed for being idle (or above the budget's share) until the next read or commit. */
  #asleep = false
  /** The reopen of an idle-closed store that a read asked for. */
  #waking: Promise<void> | undefined
  /** Reads and commits so far: the budget's idle check compares it between its sweeps. */
  #activity = 0
  readonly #member: BudgetMember
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
  /** Committed values by key id (see PartitionStoreOptions.valueCacheBytes); #values is its map, read on the hot path. */
  readonly #cache: ValueCache
  readonly #values: Map<string, unknown>
  readonly #positionKeys = new PositionKeys()

  private constructor(path: string, db: Level, options: ResolvedOptions, states: Map<string, StateDefinition>, member: BudgetMember) {
    this.path = path
    this.#db = db
    this.#options = options
    this.maxKeyBytes = options.maxKeyBytes
    this.#states = states
    this.#member = member
    this.#cache = new ValueCache(options.explicit.valueCacheBytes ?? options.budget.share.valueCacheBytes)
    this.#values = this.#cache.values
  }

  static async open(options: PartitionStoreOptions): Promise<PartitionStore> {
    const { path, create, resolved, byName } = resolveStoreOptions(options)
    const budget = resolved.budget
    // The budget knows the store before it exists: the share it opens with counts it.
    let store: PartitionStore | undefined
    const member: BudgetMember = {
      activity: () => (store === undefined ? 0 : store.#activity),
      sleep: (ifActivity) => (store === undefined ? Promise.resolve(false) : store.#sleep(ifActivity)),
      reshare: (share) => { if (store !== undefined) store.#reshare(share) },
    }
    const level = levelOptionsOf(resolved.explicit, budget.join(member))
    try {
      const db = await openStoreDir(path, level, create)
      store = new PartitionStore(path, db, resolved, byName, member)
      try {
        await loadPositions(db, store.#positions)
        await registerStates(db, byName, path, resolved.sync, store.#records)
        store.#lineage = await loadLineage(db)
      } catch (err) {
        await db.close()
        throw err
      }
    } catch (err) {
      budget.leave(member)
      throw err
    }
    budget.opened(member, budgetedBytes(resolved.explicit, level))
    return store
  }

  /** @internal Write bytes after which a commit loop closes the batch it starts: its budget's batchBytes() (counting it as writing), or writeBufferSize when given (docs/partition-store.md). */
  get batchBytes(): number { return this.#options.explicit.writeBufferSize ?? this.#options.budget.batchBytes(this.#member) }

  /** Whether the LevelDB is closed for being idle (its budget's idleCloseMs) or above its budget share; the next read or commit opens it. */
  get idle(): boolean { return this.#asleep }

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

  /** One of LevelDB's own figures (docs/partition-store.md); undefined while the store is closed (a checkpoint, idle). */
  leveldbProperty(name: string): string | undefined {
    checkLeveldbProperty(name)
    this.#checkOpen()
    return this.#gate !== undefined ? undefined : this.#db.getProperty(name)
  }

  /** The lineage id (src/store/lineage.ts) this store holds, kept from its open on. */
  get lineage(): string | undefined { return this.#lineage }

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
      if (name === LINEAGE_METADATA) this.#lineage = lineageIdOf(value)
    })
  }

  /**
   * Writes LevelDB's in-memory table to a table file now, while reads and
   * commits go on. A checkpoint calls it before quiesce(): the reopen then
   * has only the commits made since to replay, which keeps the stall short.
   */
  async flush(): Promise<void> {
    this.#checkOpen()
    if (this.#gate !== undefined && !this.#asleep) {
      await this.#gate
      this.#checkOpen()
    }
    // Idle-closed, what its memtable held is in the write-ahead log, which a checkpoint copies.
    if (this.#asleep) return
    // Counted as a read: the budget does not close the database under it.
    this.#activeReads++
    try {
      // A compaction of a range that no table file overlaps flushes the
      // memtable and compacts nothing: every key of the store sorts below 0xff.
      await this.#db.compactRange<Buffer>(FLUSH_RANGE, FLUSH_RANGE, BUFFER_KEY)
    } finally {
      this.#readDone()
    }
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
    // An idle-closed store stays closed: its files do not change while fn
    // runs, and nothing can open it before fn has finished (a reopen waits
    // in the same queue).
    if (options.keepOpen === true) {
      return this.#serialized(async () => {
        this.#checkOpen()
        return fn(this.path)
      }, false)
    }
    return this.#serialized(async () => {
      this.#checkOpen()
      if (this.#asleep) return fn(this.path)
      let release!: () => void
      this.#gate = new Promise<void>((resolve) => { release = resolve })
      try {
        // A scan may begin between the drain and this continuation.
        while (this.#activeReads > 0) await this.#drainReads()
        this.#quiescing = true
        // fn may change the files; the reopened store is read afresh.
        this.#cache.clear()
        await this.#db.close()
        try {
          return await fn(this.path)
        } finally {
          await this.#openLevel('after a checkpoint')
        }
      } finally {
        this.#quiescing = false
        this.#gate = undefined
        release()
      }
    }, false)
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    try {
      await this.#queue.catch(() => undefined)
      await this.#drainReads()
      // A no-op when it is idle-closed.
      await this.#db.close()
    } finally {
      this.#options.budget.leave(this.#member)
    }
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
    checkDeclared(this.#states, def)
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
    if (!this.readable()) return this.#ready().then(() => this.read(key))
    this.#activity++
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
    if (!this.readable()) return this.#ready().then(() => this.readText(id, ascii))
    this.#activity++
    try {
      // An ASCII id is its own UTF-8 key bytes: no Buffer for the key either,
      // and the read takes abstract-level's fast path for default encodings.
      return ascii || ASCII.test(id) ? this.#db.getSync(id) : this.#db.getSync<Buffer, string>(keyOfId(id), BUFFER_KEY)
    } catch (cause) {
      throw this.#translate(cause, 'read')
    }
  }

  /** @internal */
  keyIds(def: StateDefinition): { ids: Map<string, string>; max: number } {
    let ids = this.#keyIds.get(def.name)
    if (ids === undefined) {
      ids = new Map()
      this.#keyIds.set(def.name, ids)
    }
    return { ids, max: Math.min(MAX_KEY_IDS, Math.floor(this.#cache.limit / KEY_ID_BYTES)) }
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
    return new TidemarkError('TIDEMARK_STORE_QUIESCED', `partition store ${this.path} is closed ${this.#asleep ? 'while idle' : 'for a checkpoint'}; use get(), which waits (and reopens it), or read inside a section the store holds open (a PartitionProcessor handler)`)
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
      await this.#ready()
    }
  }

  /** hold() without waiting: undefined while a quiesce or the idle close has the database closed (or is closing it). */
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
    return this.#cache.limit > 0 && this.#states.get(def.name)?.uncached !== true
  }

  /** @internal */
  cached(id: string): unknown {
    this.#activity++
    const v = this.#values.get(id)
    return v !== undefined ? (v === ABSENT ? undefined : v) : NOT_CACHED
  }

  /** @internal */
  remember(id: string, value: unknown): void {
    if (this.#cache.limit === 0 || this.#gate !== undefined || this.#values.has(id)) return
    this.#cache.set(id, value === undefined ? ABSENT : value)
  }

  /** @internal */
  async *scan(range: ByteRange): AsyncGenerator<[Buffer, Buffer]> {
    this.#checkOpen()
    if (!this.readable()) {
      await this.#ready()
      this.#checkOpen()
    }
    this.#activity++
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
    this.#activity++
    this.#options.budget.wrote(this.#member)
    const checked = checkCommitPositions(positions)
    await this.#serialized(async () => {
      this.#checkOpen()
      if (options.allowRewind !== true) checkAdvancing(checked, this.#positions)
      if (writes.size === 0 && checked.length === 0) return
      // A chained batch, reused (reused-batch.ts): each operation goes to
      // LevelDB's native batch as it is added, which costs the event loop
      // about a third of what an array batch costs (abstract-level copies
      // every operation of an array, and the binding reads them back). An
      // ASCII id is its own UTF-8 key bytes, and strings go in without a Buffer.
      if (this.#batch?.db !== this.#db) this.#batch = new ReusedBatch(this.#db)
      const batch = this.#batch
      try {
        for (const [id, w] of writes) {
          const value = pendingValue(w)
          const key = w.ascii || ASCII.test(id) ? id : keyOfId(id)
          if (value === undefined) batch.del(key)
          else batch.put(key, value)
        }
        for (const p of checked) batch.put(this.#positionKeys.of(p), encodeOffset(p.offset))
        // The first values at a new version and the record that says so are one write.
        if (versions !== undefined) for (const def of versions) batch.put(registryKey(def.name), encodeStateRecord({ kind: def.kind, version: def.version! }))
        // What stays with the store is at most twice its share's memtable.
        if (!await this.#options.budget.writes.run(() => batch.write(this.#options.sync, 2 * (this.#options.explicit.writeBufferSize ?? this.#options.budget.share.writeBufferSize)))) this.#batch = undefined
      } catch (cause) {
        batch.clear()
        throw new TidemarkError('TIDEMARK_COMMIT_FAILED', `commit of ${writes.size + checked.length} writes to ${this.path} failed: ${(cause as Error)?.message}`, { cause })
      }
      for (const p of checked) this.#positions.set(sourceId(p.topic, p.partition), p)
      if (versions !== undefined) for (const def of versions) this.#records.set(def.name, { kind: def.kind, version: def.version! })
      if (this.#cache.limit > 0) this.#cache.noteCommitted(writes)
    })
  }

  // ---- internals ----

  /**
   * Runs fn after what is queued, an idle-closed store opened first unless
   * `wake` is false (the idle close, the reopen, a quiesce: it uses the files).
   */
  #serialized<T>(fn: () => Promise<T>, wake = true): Promise<T> {
    const run = this.#queue.then(async () => {
      if (this.#gate !== undefined) {
        if (!this.#asleep) await this.#gate
        else if (wake) await this.#wakeNow()
      }
      return fn()
    })
    this.#queue = run.catch(() => undefined)
    return run
  }

  /** What a read or hold waits for outside the queue: an idle-closed store's reopen, or a quiesce's end. */
  #ready(): Promise<void> {
    return this.#asleep ? this.#wake() : this.#gate ?? Promise.resolve()
  }

  /** The value cache and kept key ids follow the share unless the store was given its size (ids are cleared: a view keeps its map). */
  #reshare(share: StoreShare): void {
    if (this.#options.explicit.valueCacheBytes !== undefined) return
    this.#cache.resize(share.valueCacheBytes)
    const max = Math.floor(share.valueCacheBytes / KEY_ID_BYTES)
    for (const ids of this.#keyIds.values()) if (ids.size > max) ids.clear()
  }

  /**
   * The budget's idle close (BudgetMember.sleep), after what is queued; not
   * while a read, scan, flush or held section is open (it does not wait for
   * them), nor, with `ifActivity`, after a read or commit since the budget looked.
   */
  #sleep(ifActivity: number | undefined): Promise<boolean> {
    return this.#serialized(async () => {
      if (this.#closed || this.#asleep || this.#failed !== undefined || this.#activeReads > 0) return false
      if (ifActivity !== undefined && ifActivity !== this.#activity) return false
      this.#gate = new Promise<void>((resolve) => { this.#openGate = resolve })
      this.#asleep = true
      this.#quiescing = true
      this.#cache.clear()
      for (const ids of this.#keyIds.values()) ids.clear()
      this.#options.budget.closedLevel(this.#member)
      await this.#db.close()
      return true
    }, false)
  }

  /** Opens an idle-closed store behind what is queued; reads and holds wait for it. */
  #wake(): Promise<void> {
    this.#waking ??= this.#serialized(() => this.#wakeNow(), false).finally(() => { this.#waking = undefined })
    return this.#waking
  }

  /** In the queue: opens an idle-closed store. */
  async #wakeNow(): Promise<void> {
    if (!this.#asleep) return
    try {
      // A failure is kept in #failed.
      if (!this.#closed) await this.#openLevel('after it was closed while idle').catch(() => undefined)
    } finally {
      this.#asleep = false
      this.#quiescing = false
      this.#gate = undefined
      this.#openGate?.()
      this.#openGate = undefined
    }
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
   * After a quiesce or an idle close, at the budget's share of the moment
   * (or the explicit sizes). Never with createIfMissing: had the store's
   * files gone meanwhile, a new empty store would silently take its place. A
   * failure (a full disk, a lost directory) is kept, so that every later call
   * says what happened instead of LevelDB's "Database is not open".
   */
  async #openLevel(after: string): Promise<void> {
    const { budget, explicit } = this.#options
    const level: LevelOptions = levelOptionsOf(explicit, budget.share)
    try {
      this.#db = await openLevel(this.path, level, false)
    } catch (err) {
      const cause = levelCause(err)
      this.#failed = new TidemarkError(
        'TIDEMARK_STORE_OPEN_FAILED',
        `partition store ${this.path} could not be reopened ${after}: ${(cause as Error)?.message ?? cause}; it is unusable until it is closed and opened again`,
        { cause },
      )
      throw this.#failure()
    }
    budget.opened(this.#member, budgetedBytes(explicit, level))
  }

  #translate(cause: unknown, op: string): Error {
    if (cause instanceof TidemarkError) return cause
    if (this.#closed) return new TidemarkError('TIDEMARK_STORE_CLOSED', `partition store ${this.path} closed during ${op}`, { cause })
    if (this.#failed !== undefined) return this.#failure()
    return cause as Error
  }
}
