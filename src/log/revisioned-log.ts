import { describeValue } from '../util/describe-value.js'
import { TidemarkError } from '../errors.js'

/**
 * The revision before the first entry of every log: the state of a reader
 * that has applied nothing, and the `expected` revision of a conditional
 * append that must be the first entry to take effect.
 */
export const NO_REVISION = -1n

export interface LogEntry {
  /** Where the entry lies in the log. Entries read later have higher revisions; they need not be consecutive. */
  readonly revision: bigint
  /** Shared with the log's read cache (the Kafka log's): copy it before changing it. */
  readonly data: Uint8Array
}

export interface ReadOptions {
  /** Stop before this revision instead of at the tail as it was when the read began. */
  end?: bigint
}

/**
 * An append-only sequence of opaque entries, each named by a 64-bit revision.
 *
 * Only entries that took effect are ever read. On the file log that is every
 * entry; on the Kafka log a conditional entry that lost, or a duplicate that
 * a producer retry wrote, stays in the partition but every reader skips it in
 * the same way (see connectors/kafka).
 */
export interface RevisionedLog {
  /** Revision of the oldest entry the log still holds; equal to tail() when it holds none. */
  oldest(): Promise<bigint>
  /** The revision below which every entry that took effect lies: the next append gets this revision or a later one. */
  tail(): Promise<bigint>
  /**
   * Streams the entries that took effect with `from <= revision < end`, where
   * `end` defaults to the tail as it was when the read began. `from` must be
   * 0n or one past the revision of an entry that took effect (a revision this
   * log returned), because a log that judges conditional entries while
   * reading needs to know that the entry before `from` counted. Fails with
   * TIDEMARK_LOG_TRUNCATED when `from` is older than oldest().
   */
  read(from: bigint, options?: ReadOptions): AsyncIterable<LogEntry>
  /**
   * The entries read() gives, in arrays as the log has them at hand (a chunk
   * of a segment file, a fetch from the broker): a reader of many small
   * entries pays for one iteration step per array instead of per entry. The
   * data of an entry may share memory with the others of its array, so a
   * reader that keeps a few entries of many arrays should copy them.
   */
  readBatches(from: bigint, options?: ReadOptions): AsyncIterable<readonly LogEntry[]>
  /** Appends without a check and resolves with the entry's revision once the entry is durable. */
  append(data: Uint8Array): Promise<bigint>
  /**
   * Appends only if the last entry that took effect is `expected` (NO_REVISION:
   * if none did). Resolves with the new entry's revision, or with undefined
   * when another entry took effect after `expected`; then nothing was applied.
   */
  appendConditionally(data: Uint8Array, expected: bigint): Promise<bigint | undefined>
  /**
   * Lets the log discard entries before `before`. It may keep more than asked
   * (the file log drops whole segments only; the Kafka log keeps its duplicate
   * window), never less. A log that cannot delete fails with
   * TIDEMARK_LOG_TRUNCATE_UNSUPPORTED and is left as it was.
   */
  truncate(before: bigint): Promise<void>
  /** Releases files and connections; reads in progress fail with TIDEMARK_LOG_CLOSED. */
  close(): Promise<void>
}

/**
 * Checks what every log needs (argument types and ranges, the open state) and
 * leaves the work to the `_method`s, so both logs refuse the same input in the
 * same way.
 */
/** Entries per array of the default readBatches(). */
const DEFAULT_READ_BATCH = 1024

export abstract class AbstractRevisionedLog implements RevisionedLog {
  /** A short description for messages: a directory, or topic/partition. */
  abstract readonly location: string
  #closed = false
  #closing: Promise<void> | undefined

  get closed(): boolean {
    return this.#closed
  }

  async oldest(): Promise<bigint> {
    this.assertOpen()
    return this._oldest()
  }

  async tail(): Promise<bigint> {
    this.assertOpen()
    return this._tail()
  }

  // Not async: argument mistakes throw at the call, not at the first next().
  read(from: bigint, options: ReadOptions = {}): AsyncIterable<LogEntry> {
    return this._read(from, this.#checkRead(from, options))
  }

  readBatches(from: bigint, options: ReadOptions = {}): AsyncIterable<readonly LogEntry[]> {
    return this._readBatches(from, this.#checkRead(from, options))
  }

  /** Validates read arguments and returns `end`. */
  #checkRead(from: bigint, options: ReadOptions): bigint | undefined {
    assertRevision(from, 'from', 0n)
    if (typeof options !== 'object' || options === null) throw new TypeError(`read options must be an object, got ${describeValue(options)}`)
    const { end } = options
    if (end !== undefined) {
      assertRevision(end, 'end', 0n)
      if (end < from) throw new RangeError(`end (${end}) must not be lower than from (${from})`)
    }
    this.assertOpen()
    return end
  }

  async append(data: Uint8Array): Promise<bigint> {
    assertData(data)
    this.assertOpen()
    return this._append(data)
  }

  async appendConditionally(data: Uint8Array, expected: bigint): Promise<bigint | undefined> {
    assertData(data)
    assertRevision(expected, 'expected', NO_REVISION)
    this.assertOpen()
    return this._appendConditionally(data, expected)
  }

  async truncate(before: bigint): Promise<void> {
    assertRevision(before, 'before', 0n)
    this.assertOpen()
    return this._truncate(before)
  }

  close(): Promise<void> {
    this.#closed = true
    this.#closing ??= this._close()
    return this.#closing
  }

  protected assertOpen(): void {
    if (this.#closed) throw new TidemarkError('TIDEMARK_LOG_CLOSED', `the log at ${this.location} is closed`)
  }

  protected abstract _oldest(): Promise<bigint>
  protected abstract _tail(): Promise<bigint>
  protected abstract _read(from: bigint, end: bigint | undefined): AsyncIterable<LogEntry>

  /** Groups _read's entries; a log that reads in batches anyway overrides it. */
  protected async *_readBatches(from: bigint, end: bigint | undefined): AsyncIterable<LogEntry[]> {
    let batch: LogEntry[] = []
    for await (const entry of this._read(from, end)) {
      batch.push(entry)
      if (batch.length >= DEFAULT_READ_BATCH) {
        yield batch
        batch = []
      }
    }
    if (batch.length > 0) yield batch
  }
  protected abstract _append(data: Uint8Array): Promise<bigint>
  protected abstract _appendConditionally(data: Uint8Array, expected: bigint): Promise<bigint | undefined>
  protected abstract _truncate(before: bigint): Promise<void>
  protected abstract _close(): Promise<void>
}

const MAX_REVISION = (1n << 63n) - 1n

export function assertRevision(value: unknown, name: string, min: bigint): asserts value is bigint {
  if (typeof value !== 'bigint') throw new TypeError(`${name} must be a bigint revision, got ${describeValue(value)}`)
  if (value < min || value > MAX_REVISION) throw new RangeError(`${name} (${value}) must be between ${min} and 2^63-1`)
}

function assertData(data: unknown): asserts data is Uint8Array {
  if (!(data instanceof Uint8Array)) throw new TypeError(`data must be a Uint8Array, got ${describeValue(data)}`)
}

