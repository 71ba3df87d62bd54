import { describeValue, printable } from '../util/describe-value.js'
import type { Readable } from 'node:stream'
import { TidemarkError } from '../errors.js'
import { checkIntegerOption } from '../util/index.js'

/**
 * The snapshot store: a flat namespace of immutable-by-convention objects
 * addressed by '/'-separated keys. It is the only thing the snapshot layer
 * knows about a DFS, so it stays as small as S3's common subset.
 */
export interface SnapshotStore {
  /** Where the store lives; `openSnapshotStore(store.url)` opens the same store (credentials are never part of it). */
  readonly url: string
  readonly capabilities: SnapshotStoreCapabilities
  /**
   * Stores `body` under `key`, replacing an existing object unless
   * `ifNoneMatch` or `ifMatch` says otherwise. Readers never see a partly
   * written object.
   */
  put(key: string, body: Readable | Uint8Array, options?: PutOptions): Promise<PutResult>
  /**
   * Streams the object (or the byte range of it). Fails with
   * TIDEMARK_DFS_NOT_FOUND when the key does not exist. The caller must
   * consume or destroy the stream: it holds a file handle or a connection.
   */
  get(key: string, options?: GetOptions): Promise<Readable>
  /** The object's metadata (with its etag where the store has one), or undefined when the key does not exist. */
  head(key: string): Promise<ObjectInfo | undefined>
  /** Objects whose key starts with `prefix` (a plain string prefix, not only whole segments), in UTF-8 byte order of their keys. */
  list(prefix: string, options?: ListOptions): AsyncIterable<ObjectInfo>
  /** Deletes the objects; keys that do not exist are skipped. */
  deleteMany(keys: readonly string[]): Promise<void>
  /**
   * Removes what killed uploads left under `prefix` that is not an object
   * (the file-system store's temporary files, once older than its grace)
   * and returns how many it removed. Garbage collection calls it; optional,
   * since a store may have nothing of the kind.
   */
  sweepTemporaryFiles?(prefix: string): Promise<number>
  /** Refuses further calls. Streams returned by get() before should be finished first. */
  close(): Promise<void>
}

export interface SnapshotStoreCapabilities {
  /** put() honours `ifNoneMatch` atomically, so it can fence concurrent writers. */
  readonly conditionalPut: boolean
  /**
   * put() honours `ifMatch` atomically (compare-and-swap on the etag), and
   * put() and head() report etags. Partition claims (src/ownership/) need it.
   */
  readonly compareAndSwap: boolean
}

export interface PutOptions {
  /** The body's length when known; a body of another length fails with a RangeError and stores nothing. */
  contentLength?: number
  /**
   * Create only: fail with TIDEMARK_DFS_OBJECT_EXISTS if the key exists.
   * An implementation may bound the size of such a body (the S3 store: one
   * request, at most `partSize` bytes) and refuse a larger one with a RangeError.
   */
  ifNoneMatch?: boolean
  /**
   * Compare-and-swap: replace the object only if its current etag (as put()
   * or head() reported it, without quotes) is this one; otherwise, or when
   * the key does not exist, fail with TIDEMARK_DFS_PRECONDITION_FAILED and
   * store nothing. Needs `capabilities.compareAndSwap`; excludes
   * `ifNoneMatch`; bounded in size like `ifNoneMatch` (the S3 store: one
   * request of at most `partSize` bytes). Meant for small objects that only
   * conditional puts change (a claim); a plain put or a delete of the same
   * key does not wait for it.
   */
  ifMatch?: string
}

export interface PutResult {
  key: string
  size: number
  /** Opaque version tag without quotes, where the store has one; always there when `capabilities.compareAndSwap` is. */
  etag?: string
}

export interface ByteRange {
  start: number
  /** Inclusive; clamped to the last byte of the object. Open-ended when absent. */
  end?: number
}

export interface GetOptions {
  /** A `start` at or past the end of the object is a RangeError, as S3 answers 416 there. */
  range?: ByteRange
  /**
   * A small object read whole (a claim, a manifest): it takes no download
   * slot (the stores' maxConcurrentDownloads), so that an ownership check or
   * a start never queues behind the data of restores in flight.
   */
  metadata?: boolean
}

export interface ListOptions {
  /** Only keys after this one (exclusive), like S3's StartAfter. */
  startAfter?: string
  /** At most this many objects in all; pages are fetched internally. */
  limit?: number
}

export interface ObjectInfo {
  key: string
  size: number
  lastModified: Date
  etag?: string
}

/** What AbstractSnapshotStore passes to `_put`, checked. */
export interface InternalPutOptions {
  contentLength: number | undefined
  ifNoneMatch: boolean
  ifMatch: string | undefined
}

/**
 * Reserved for the file-system store's temporary files. Rejected in keys of
 * every store so that keys stay portable from one store to another.
 */
export const RESERVED_SEGMENT_PREFIX = '.tidemark-tmp'

/**
 * Checks what every implementation needs (argument types, key rules, the
 * open state) and leaves the storage to the `_method`s, the way
 * abstract-level does, so both stores fail the same way on the same input.
 */
export abstract class AbstractSnapshotStore implements SnapshotStore {
  abstract readonly url: string
  abstract readonly capabilities: SnapshotStoreCapabilities
  #closed = false

  async put(key: string, body: Readable | Uint8Array, options: PutOptions = {}): Promise<PutResult> {
    assertKey(key)
    if (!(body instanceof Uint8Array) && !isAsyncIterable(body)) {
      throw new TypeError(`body of '${key}' must be a Uint8Array or a readable stream, got ${describeValue(body)}`)
    }
    assertOptionalObject(options, 'put options')
    const { contentLength, ifNoneMatch = false, ifMatch } = options
    if (contentLength !== undefined) {
      checkIntegerOption(contentLength, 'contentLength', 0)
      if (body instanceof Uint8Array && body.byteLength !== contentLength) {
        throw new RangeError(`contentLength (${contentLength}) differs from the body's length (${body.byteLength}) for '${key}'`)
      }
    }
    if (typeof ifNoneMatch !== 'boolean') throw new TypeError(`ifNoneMatch must be a boolean, got ${describeValue(ifNoneMatch)}`)
    if (ifNoneMatch && !this.capabilities.conditionalPut) {
      throw new RangeError(`ifNoneMatch is not supported by ${this.url} (capabilities.conditionalPut is false)`)
    }
    if (ifMatch !== undefined) {
      if (typeof ifMatch !== 'string' || ifMatch === '') throw new TypeError(`ifMatch must be a non-empty etag string, got ${describeValue(ifMatch)}`)
      if (/^"|"$/.test(ifMatch)) throw new RangeError(`ifMatch (${describeValue(ifMatch)}) must be an etag without quotes, as put() and head() report it`)
      if (ifNoneMatch) throw new RangeError(`ifMatch and ifNoneMatch exclude each other (put of '${key}')`)
      if (!this.capabilities.compareAndSwap) {
        throw new RangeError(`ifMatch is not supported by ${this.url} (capabilities.compareAndSwap is false)`)
      }
    }
    this.#assertOpen()
    return this._put(key, body, { contentLength, ifNoneMatch, ifMatch })
  }

  async get(key: string, options: GetOptions = {}): Promise<Readable> {
    assertKey(key)
    assertOptionalObject(options, 'get options')
    const { range } = options
    if (range !== undefined) {
      assertOptionalObject(range, 'range')
      checkIntegerOption(range.start, 'range.start', 0)
      if (range.end !== undefined) {
        checkIntegerOption(range.end, 'range.end', 0)
        if (range.end < range.start) throw new RangeError(`range.end (${range.end}) must not be lower than range.start (${range.start})`)
      }
    }
    if (options.metadata !== undefined && typeof options.metadata !== 'boolean') throw new TypeError(`metadata must be a boolean, got ${typeof options.metadata}`)
    this.#assertOpen()
    return this._get(key, range === undefined ? undefined : { start: range.start, end: range.end }, { metadata: options.metadata === true })
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    assertKey(key)
    this.#assertOpen()
    return this._head(key)
  }

  // Not async: argument mistakes throw here, at the call, not at the first next().
  list(prefix: string, options: ListOptions = {}): AsyncIterable<ObjectInfo> {
    assertPrefix(prefix)
    assertOptionalObject(options, 'list options')
    const { startAfter, limit } = options
    if (startAfter !== undefined && typeof startAfter !== 'string') {
      throw new TypeError(`startAfter must be a string, got ${describeValue(startAfter)}`)
    }
    if (limit !== undefined) checkIntegerOption(limit, 'limit', 1)
    this.#assertOpen()
    return this._list(prefix, { startAfter, limit: limit ?? Infinity })
  }

  async deleteMany(keys: readonly string[]): Promise<void> {
    if (!Array.isArray(keys)) throw new TypeError(`keys must be an array of keys, got ${describeValue(keys)}`)
    for (const key of keys) assertKey(key)
    this.#assertOpen()
    if (keys.length === 0) return
    return this._deleteMany([...new Set(keys)])
  }

  async sweepTemporaryFiles(prefix: string): Promise<number> {
    assertPrefix(prefix)
    this.#assertOpen()
    return this._sweepTemporaryFiles(prefix)
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    await this._close()
  }

  protected abstract _put(key: string, body: Readable | Uint8Array, options: InternalPutOptions): Promise<PutResult>
  protected abstract _get(key: string, range: { start: number; end: number | undefined } | undefined, options: { metadata: boolean }): Promise<Readable>
  protected abstract _head(key: string): Promise<ObjectInfo | undefined>
  protected abstract _list(prefix: string, options: { startAfter: string | undefined; limit: number }): AsyncIterable<ObjectInfo>
  protected abstract _deleteMany(keys: string[]): Promise<void>
  protected async _close(): Promise<void> {}
  protected async _sweepTemporaryFiles(_prefix: string): Promise<number> {
    return 0
  }

  #assertOpen(): void {
    if (this.#closed) throw new TidemarkError('TIDEMARK_DFS_CLOSED', `snapshot store ${this.url} is closed`)
  }
}

/**
 * Keys are relative '/'-separated names. The rules keep them meaning the same
 * object on S3 and on a file system: no empty, '.' or '..' segment (a path
 * would normalise them away or escape the root), no leading '/', and no
 * control characters (NUL ends a path; the others break S3's XML listings).
 */
export function assertKey(key: unknown, name = 'key'): asserts key is string {
  if (typeof key !== 'string') throw new TypeError(`${name} must be a string, got ${describeValue(key)}`)
  const problem = keyProblem(key)
  if (problem !== undefined) throw new RangeError(`${name} '${printable(key)}' is not a valid key: ${problem}`)
}

/** A list prefix: like a key, except that it may be empty and its last segment may be partial (empty, '.', '..'). */
export function assertPrefix(prefix: unknown): asserts prefix is string {
  if (typeof prefix !== 'string') throw new TypeError(`prefix must be a string, got ${describeValue(prefix)}`)
  if (prefix === '') return
  const cut = prefix.lastIndexOf('/')
  const problem = cut === -1 ? charProblem(prefix) : keyProblem(prefix.slice(0, cut)) ?? charProblem(prefix.slice(cut))
  if (problem !== undefined) throw new RangeError(`prefix '${printable(prefix)}' is not a valid key prefix: ${problem}`)
}

function keyProblem(key: string): string | undefined {
  if (key === '') return 'it is empty'
  if (key.startsWith('/')) return 'it starts with \'/\''
  for (const segment of key.split('/')) {
    if (segment === '') return 'it has an empty segment'
    if (segment === '.' || segment === '..') return `it has a '${segment}' segment`
    if (segment.startsWith(RESERVED_SEGMENT_PREFIX)) return `segments starting with '${RESERVED_SEGMENT_PREFIX}' are reserved`
  }
  return charProblem(key)
}

function charProblem(text: string): string | undefined {
  // eslint-disable-next-line no-control-regex
  return /[\u0000-\u001f\u007f]/.test(text) ? 'it contains a control character' : undefined
}



function assertOptionalObject(value: unknown, name: string): void {
  if (typeof value !== 'object' || value === null) throw new TypeError(`${name} must be an object, got ${describeValue(value)}`)
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof value === 'object' && value !== null && typeof (value as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function'
}


/**
 * Yields the chunks of a put body as Uint8Arrays and checks the declared
 * length at the end, so that both stores count and refuse the same way.
 */
export async function* bodyChunks(key: string, body: Readable | Uint8Array, contentLength: number | undefined): AsyncGenerator<Uint8Array> {
  if (body instanceof Uint8Array) {
    yield body
    return
  }
  let size = 0
  for await (const chunk of body as AsyncIterable<unknown>) {
    if (!(chunk instanceof Uint8Array)) {
      throw new TypeError(`body of '${key}' must yield bytes, got ${describeValue(chunk)} (a stream in object mode or with an encoding?)`)
    }
    size += chunk.byteLength
    if (contentLength !== undefined && size > contentLength) break
    yield chunk
  }
  if (contentLength !== undefined && size !== contentLength) {
    throw new RangeError(`contentLength (${contentLength}) differs from the body's length (${size > contentLength ? `more than ${contentLength}` : size}) for '${key}'`)
  }
}

/** Orders keys the way S3 lists them: by their UTF-8 bytes, which differs from JS string order above U+FFFF. */
export function compareKeys(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'))
}
