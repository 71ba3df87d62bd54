import type { Position } from './position.js'
import type { StateDefinition } from './state.js'

/** What a transaction needs from its store; kept narrow so the two stay decoupled. */
export interface TransactionHost {
  readonly maxKeyBytes: number
  checkState(def: StateDefinition): void
  read(key: Buffer): Buffer | undefined | Promise<Buffer | undefined>
  /** A point read of a JSON state's key, by its id (see keyOfId), as UTF-8 text; `ascii`: the id is known to be ASCII (else the host looks). */
  readText(id: string, ascii: boolean): string | undefined | Promise<string | undefined>
  /** The committed value of a JSON state's key (undefined: no value) if the store holds it decoded, else NOT_CACHED. */
  /** Whether a point read is served now rather than after a quiesce. */
  readable(): boolean
  quiescedError(): Error
  /** Ids of a state's string keys, kept by the store across transactions, and how many a transaction may add it up to (its budget share). */
  keyIds(def: StateDefinition): { ids: Map<string, string>; max: number }
  /** Whether the value cache may hold this state's values: false for an uncachedState() (by the definition the store was opened with). */
  caches(def: StateDefinition): boolean
  cached(id: string): unknown
  /** Offers the store a committed value just read (in the same tick as the read). */
  remember(id: string, value: unknown): void
  scan(range: ByteRange): AsyncIterable<[Buffer, Buffer]>
  /** Whether a write of this versioned state must raise the store's record of its highest version written (commitBatch's `versions`). */
  versionBehind(def: StateDefinition): boolean
  /** `writes` is keyed by keyId(key); `versions`: versioned states whose version record the batch raises to their version. */
  commitBatch(writes: Map<string, PendingWrite>, positions: Position[], options: CommitOptions, versions?: ReadonlySet<StateDefinition>): Promise<void>
}

/** Most string-key ids a store keeps per state (TransactionHost.keyIds), however large its value cache. */
export const MAX_KEY_IDS = 16_384
/** Value cache bytes per kept key id: a store keeps valueCacheBytes / KEY_ID_BYTES ids per state, at most MAX_KEY_IDS. */
export const KEY_ID_BYTES = 256

/** Returned by TransactionHost.cached when the store does not hold the value. */
export const NOT_CACHED: unique symbol = Symbol('tidemark.notCached')

export interface PendingWrite {
  /**
   * What the key will hold: bytes, or for a JSON state the JSON text (stored
   * as UTF-8; kept as a string so that a put builds no Buffer). undefined
   * deletes the key, unless `exact` is set.
   */
  value: Buffer | string | undefined
  /** The value as put, returned to reads when `exact` (an object could be changed by the caller after the put). */
  decoded: unknown
  /**
   * decoded is a JSON primitive of a JSON state: reads may return it, and it
   * is turned into text once at commit (pendingValue), however often a batch
   * overwrites it.
   */
  exact: boolean
  /** false: the store's value cache is not told of this write (its state is an uncachedState()). */
  cache: boolean
  /** The id is known to be ASCII, so it is its own UTF-8 key bytes; false: unknown (the store looks). */
  ascii: boolean
  /**
   * The version header stored before the value (src/store/versioning.ts), ''
   * for an unversioned state. `value` and `decoded` never include it; it is
   * put in front where the stored form is made (pendingValue).
   */
  header: string
}

/** What a pending write stores: bytes, JSON text, or undefined for a delete. */
export function pendingValue(w: PendingWrite): Buffer | string | undefined {
  if (w.header === '') return w.exact ? JSON.stringify(w.decoded) : w.value
  if (w.exact) return w.header + JSON.stringify(w.decoded)
  const v = w.value
  if (v === undefined || typeof v === 'string') return v === undefined ? v : w.header + v
  return Buffer.concat([Buffer.from(w.header, 'latin1'), v])
}

/** The bytes a pending write stores, or undefined for a delete. */
export function pendingBytes(w: PendingWrite): Buffer | undefined {
  const v = pendingValue(w)
  return typeof v === 'string' ? Buffer.from(v, 'utf8') : v
}

/** The LevelDB key that a keyId stands for. */
export function keyOfId(id: string): Buffer {
  return Buffer.from(id, 'latin1')
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
  /**
   * get() without a promise. Fails with TIDEMARK_STORE_QUIESCED when the value
   * must come from LevelDB while the store is closed for a checkpoint, which
   * never happens in a PartitionProcessor handler (the processor holds the
   * store open while a handler runs; see PartitionStore.hold).
   */
  getSync(key: K): V | undefined
  put(key: K, value: V): void
  delete(key: K): void
  entries(options?: ScanOptions<K>): AsyncIterable<[K, V]>
}

export interface MapView<V, K, S> {
  get(key: K, subKey: S): Promise<V | undefined>
  /** get() without a promise; see ValueView.getSync. */
  getSync(key: K, subKey: S): V | undefined
  put(key: K, subKey: S, value: V): void
  delete(key: K, subKey: S): void
  /** Sub-key/value pairs of one key, in sub-key byte order. */
  entries(key: K, options?: ScanOptions<S>): AsyncIterable<[S, V]>
  /** Deletes every sub-key of one key. */
  clear(key: K): Promise<void>
}
