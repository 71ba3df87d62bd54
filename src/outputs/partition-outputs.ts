import { TidemarkError } from '../errors.js'
import type { PartitionStore } from '../store/partition-store.js'
import type { StateDefinition } from '../store/state.js'
import type { Transaction } from '../store/transaction.js'
import { formatRecordId, parseRecordId, RECORD_ID_HEADER, upstreamKey } from './id.js'
import type { ResolvedOutputs } from './options.js'
import { OutboxPublisher, type CommittedEntry } from './publisher.js'
import { OutboxChunkWriter } from './chunk-writer.js'
import { decodeOutboxChunk, outboxKey, outboxKeyAt } from './record.js'
import { DEDUPE_STATE, OUTBOX_STATE, RESERVED_STATE_NAMES } from './states.js'
import type { DedupeMode, EmitContext, OutboxRecord, OutputRecord, OutputSink, OutputsEvent } from './types.js'
import { describeValue } from '../util/describe-value.js'

const RESERVED_HEADER_PREFIX = 'tidemark-'
const MAX_U32 = 2 ** 32 - 1

export interface PartitionOutputsOptions {
  /** The job: the first field of every id this partition emits. */
  job: string
  /** The source partition: the second and third fields. */
  topic: string
  partition: number
  outputs: ResolvedOutputs | undefined
  dedupe: DedupeMode
  onEvent?: (event: OutputsEvent) => void
  onStoreFailed?: (error: unknown) => void
  /** The outbox's depth (records committed, not delivered): at attach, after each commit and each delivery. The runtimes give it to PartitionMetrics.outbox (tidemark_outbox_depth). */
  onDepth?: (records: number) => void
}

/**
 * A partition's outputs and dedupe, as a runtime (PartitionProcessor,
 * the consumer's PartitionTask) uses them:
 *
 * - states(): the user's states plus the reserved outbox and dedupe states;
 * - scope(tx, offset): the handler's emit for one event, which puts records
 *   into the outbox state through `tx` (so they commit with the batch);
 * - accept(tx, id): dedupe, read and moved in `tx` too;
 * - committed(offset) after each commit, and waitForRoom() before one;
 * - attach(store) once the store is open, close() before it closes.
 */
export class PartitionOutputs {
  readonly #o: PartitionOutputsOptions
  #publisher: OutboxPublisher | undefined
  /** The outbox entries (one per transaction, or more past MAX_CHUNK_BYTES) not committed yet, oldest first. */
  readonly #uncommitted: Pending[] = []
  /** The outbox entry that the transaction being processed emits into. */
  #chunk: Chunk | undefined
  /** The last topic that passed the topic checks (a job emits to few topics: checked once each in a row). */
  #checkedTopic: string | undefined
  /** upstreamKey() of this partition, the start of every id it emits: set by the first put, once formatRecordId() accepted the fields. */
  #idPrefix: string | undefined
  /**
   * The size of the last entry committed: a new entry's first capacity.
   * Batches emit about alike, and an entry grown from a small buffer was
   * copied at each doubling (five times for a 1000-record batch).
   */
  #chunkBytes = MIN_CHUNK_CAPACITY

  constructor(options: PartitionOutputsOptions) {
    this.#o = options
  }

  get enabled(): boolean {
    return this.#o.outputs !== undefined || this.#o.dedupe !== 'off'
  }

  get dedupe(): boolean {
    return this.#o.dedupe === 'tidemark-ids'
  }

  get publisher(): OutboxPublisher | undefined {
    return this.#publisher
  }

  /** The states to open the store with. */
  states(user: readonly StateDefinition[]): StateDefinition[] {
    if (!this.enabled) return [...user]
    for (const s of user) {
      if (RESERVED_STATE_NAMES.includes(s.name)) throw new RangeError(`state name ${JSON.stringify(s.name)} is reserved for Tidemark's outbox and dedupe`)
    }
    return [...user, OUTBOX_STATE as StateDefinition, DEDUPE_STATE as StateDefinition]
  }

  /** Starts delivery of what the store's outbox holds. */
  async attach(store: PartitionStore): Promise<void> {
    if (this.#o.outputs === undefined) return
    this.#publisher = new OutboxPublisher({
      store,
      outputs: this.#o.outputs,
      onEvent: (event) => {
        if (event.type === 'delivered') this.#depth()
        this.#o.onEvent?.(event)
      },
      ...(this.#o.onStoreFailed === undefined ? {} : { onStoreFailed: this.#o.onStoreFailed }),
    })
    await this.#publisher.start()
    // What a restart or restore found undelivered.
    this.#depth()
  }

  /** The emit of the event at `offset`, writing through `tx`. */
  scope(tx: Transaction, offset: bigint): EmitContext {
    // Without outputs every event shares one: its emit only throws.
    if (this.#o.outputs === undefined) return WITHOUT_OUTPUTS
    return new EmitScope(this, tx, offset)
  }

  /**
   * A handler that gets `emit` in its context and runs only for records
   * dedupe accepts; `idOf` reads an event's `tidemark-id` header. Without
   * outputs and dedupe the handler is returned as it is.
   */
  wrap<E>(
    handler: (tx: Transaction, event: E, context: HandlerContext & EmitContext) => void | Promise<void>,
    idOf: (event: E) => unknown,
  ): (tx: Transaction, event: E, context: HandlerContext) => void | Promise<void> {
    if (!this.enabled) {
      // Without outputs the context still has an emit, one that says what is
      // missing (a bare "ctx.emit is not a function" names nothing to fix).
      // A context of its own per event (one small object), never one reused:
      // a handler may keep its context past its return (a closure, an async
      // step) and must still see its own event's coordinates.
      return (tx, event, context) => handler(tx, event, new ContextWithoutOutputs(context.topic, context.partition, context.offset))
    }
    return (tx, event, context) => {
      if (this.dedupe && !this.accept(tx, idOf(event))) return undefined
      // The context and its emit in one object per event.
      return handler(tx, event, new HandlerScope(this, tx, context))
    }
  }

  /** @internal Puts one record into the outbox of `tx`; returns its id. */
  put(tx: Transaction, offset: bigint, index: number, record: OutputRecord): string {
    if (this.#o.outputs === undefined) emitWithoutOutputs()
    let id: string
    if (this.#idPrefix !== undefined) {
      // What formatRecordId() returns, without its checks and its two
      // encodeURIComponent() per emit: job, topic and partition passed them,
      // offsets come from the log and EmitScope bounds the index.
      id = `${this.#idPrefix}:${offset}:${index}`
    } else {
      id = formatRecordId({ job: this.#o.job, topic: this.#o.topic, partition: this.#o.partition, offset, index })
      this.#idPrefix = upstreamKey(this.#o.job, this.#o.topic, this.#o.partition)
    }
    const outputs = this.#o.outputs!
    if (record === null || typeof record !== 'object') throw new TypeError(`emit(record): record must be an object, got ${describeValue(record)}`)
    // A misspelt field (valeu) would otherwise emit a tombstone or an unkeyed record without a word.
    for (const name in record) {
      if (!RECORD_FIELDS.has(name) && Object.hasOwn(record, name)) throw new RangeError(`emit(record): unknown field record.${name}; known: ${[...RECORD_FIELDS].join(', ')}`)
    }
    const topic = record.topic
    if (topic !== this.#checkedTopic || topic === undefined) {
      checkTopic(topic, outputs.sink)
      this.#checkedTopic = topic
    }
    const partition = record.partition === undefined ? -1 : record.partition
    if (!Number.isInteger(partition) || partition < -1 || partition > 2 ** 31 - 1) throw new RangeError(`emit(record): record.partition must be an integer from 0 to 2147483647, or -1 (or absent) to let the sink choose by key, got ${partition}`)
    const headers = record.headers
    let names: string[] | undefined
    if (headers !== undefined) {
      names = checkHeaders(headers)
      if (names.length === 0) names = undefined
    }
    const key = record.key === undefined ? null : record.key
    checkPart(key, 'key')
    const value = record.value
    checkPart(value, 'value')
    // The entry is put into the transaction as its commit begins, so a
    // record appended after that would be lost without a word: refused here.
    if (!tx.isOpen) throw new TidemarkError('TIDEMARK_TRANSACTION_CLOSED', 'ctx.emit(): the batch of this event is committing or done; emit while the handler runs (before it returns, or before the promise it returns settles)')
    let chunk = this.#chunk
    if (chunk === undefined || chunk.tx !== tx || chunk.pending.writer.byteLength >= MAX_CHUNK_BYTES) {
      const key = outboxKey(this.#o.topic, this.#o.partition, offset, index)
      const writer = new OutboxChunkWriter(this.#chunkBytes)
      const pending: Pending = { key, writer, offset, index, records: 0, bytes: 0 }
      this.#uncommitted.push(pending)
      const view = tx.value(OUTBOX_STATE)
      // Put once, whole, when the batch commits (at each attempt).
      tx.beforeCommit(() => { view.put(key, writer.bytes()) })
      const created: Chunk = { tx, pending }
      chunk = this.#chunk = created
    }
    const bytes = chunk.pending.writer.append(id, topic, partition, key, value, names, headers, this.#idPrefix)
    chunk.pending.offset = offset
    chunk.pending.index = index
    chunk.pending.records++
    chunk.pending.bytes += bytes
    return id
  }

  /**
   * Dedupe: true when the record should be applied (and then its id is the
   * new watermark of its upstream partition, in `tx`), false when an id at
   * or after it was applied already. Records without an id pass.
   */
  accept(tx: Transaction, header: unknown): boolean {
    if (!this.dedupe) return true
    const raw = Array.isArray(header) ? header[0] : header
    if (raw === undefined || raw === null) return true
    // Junk of another type stops the partition as junk text does (parseRecordId).
    const id = parseRecordId(typeof raw === 'string' || raw instanceof Uint8Array ? raw : `${typeof raw} ${String(raw)}`)
    const key = upstreamKey(id.job, id.topic, id.partition)
    const view = tx.value(DEDUPE_STATE)
    const seen = view.getSync(key)
    if (seen !== undefined) {
      const offset = BigInt(seen[0])
      if (id.offset < offset || (id.offset === offset && id.index <= seen[1])) {
        this.#o.onEvent?.({ type: 'duplicate-skipped', id: typeof raw === 'string' ? raw : Buffer.from(raw).toString('utf8') })
        return false
      }
    }
    view.put(key, [String(id.offset), id.index])
    return true
  }

  /** After a commit of the batch whose last event is `offset`: its records count in the outbox and delivery starts. */
  committed(offset: bigint): void {
    let records = 0
    let bytes = 0
    const entries: CommittedEntry[] = []
    while (this.#uncommitted.length > 0 && this.#uncommitted[0]!.offset <= offset) {
      const e = this.#uncommitted.shift()!
      records += e.records
      bytes += e.bytes
      // The entry as the commit put it (no append follows: its transaction
      // closed), so that the publisher need not read it back from the store.
      entries.push({ key: e.key, lastKey: outboxKeyAt(e.key, e.offset, e.index), value: e.writer.bytes(), starts: e.writer.starts() })
      this.#chunkBytes = Math.min(MAX_CHUNK_BYTES, Math.max(MIN_CHUNK_CAPACITY, e.writer.byteLength + (e.writer.byteLength >> 3)))
    }
    if (records > 0) this.#publisher?.committed(records, bytes, entries)
    this.#depth()
  }

  #depth(): void {
    if (this.#publisher !== undefined) this.#o.onDepth?.(this.#publisher.size.records)
  }

  /** A batch was abandoned: what it emitted never reaches the outbox. */
  aborted(): void {
    this.#uncommitted.length = 0
    this.#chunk = undefined
  }

  /** undefined while the outbox is below its limit, else a promise of room (see OutboxPublisher.waitForRoom). */
  waitForRoom(): Promise<void> | undefined {
    return this.#publisher?.waitForRoom()
  }

  get full(): boolean {
    return this.#publisher?.full ?? false
  }

  /** Stops delivery; the outbox stays in the store. */
  async close(): Promise<void> {
    await this.#publisher?.close()
  }
}

function emitWithoutOutputs(): never {
  throw new TypeError('ctx.emit(): options.outputs is not set; emit needs outputs: { sink } in the job\'s options (docs/outputs.md)')
}

/** The context a runtime gives a handler (the runtime's EventContext). */
export interface HandlerContext {
  readonly topic: string
  readonly partition: number
  readonly offset: bigint
}

const WITHOUT_OUTPUTS: EmitContext = Object.freeze({ emit: emitWithoutOutputs })

/** A handler's context without outputs: the fields are set per event, emit throws. */
class ContextWithoutOutputs implements HandlerContext, EmitContext {
  constructor(
    readonly topic: string,
    readonly partition: number,
    readonly offset: bigint,
  ) {}

  emit(): never {
    return emitWithoutOutputs()
  }
}

/** The emit of one event: ids are (job, source partition, offset, index) with index counting this event's emits. */
class EmitScope implements EmitContext {
  readonly #outputs: PartitionOutputs
  readonly #tx: Transaction
  readonly #offset: bigint
  #index = 0

  // A field, not a method: a handler may take emit out of its context
  // (README: `(tx, event, { offset, emit }) => ...`). Assigned in the
  // constructor, where the arrow gets no name: a named one cost a
  // defineProperty per event under tsx/esbuild's keepNames.
  readonly emit: (record: OutputRecord) => string

  constructor(outputs: PartitionOutputs, tx: Transaction, offset: bigint) {
    this.#outputs = outputs
    this.#tx = tx
    this.#offset = offset
    this.emit = (record) => this.#emit(record)
  }

  #emit(record: OutputRecord): string {
    if (this.#index > MAX_U32) throw new RangeError(`an event may emit at most ${MAX_U32 + 1} records`)
    const id = this.#outputs.put(this.#tx, this.#offset, this.#index, record)
    this.#index++
    return id
  }
}

/** A handler's context with the emit of its event. */
class HandlerScope extends EmitScope implements HandlerContext {
  readonly topic: string
  readonly partition: number
  readonly offset: bigint

  constructor(outputs: PartitionOutputs, tx: Transaction, context: HandlerContext) {
    super(outputs, tx, context.offset)
    this.topic = context.topic
    this.partition = context.partition
    this.offset = context.offset
  }
}

/** The outbox entry that one transaction's emits go to: its entry in #uncommitted. */
interface Chunk {
  readonly tx: Transaction
  readonly pending: Pending
}

/** An outbox entry emitted and not committed yet (see OutboxChunkWriter): (offset, index) of its last record, its records and their bytes. */
interface Pending {
  /** outboxKey() of its first record. */
  readonly key: Buffer
  readonly writer: OutboxChunkWriter
  offset: bigint
  index: number
  records: number
  bytes: number
}

/** A transaction's emits past this many bytes go on in a new outbox entry, so that no entry (nor a delivery's rewrite of one) grows without bound. */
const MAX_CHUNK_BYTES = 1024 * 1024
const MIN_CHUNK_CAPACITY = 16 * 1024

const RECORD_FIELDS = new Set(['topic', 'key', 'value', 'headers', 'partition'])

function checkTopic(topic: unknown, sink: OutputSink): asserts topic is string {
  if (typeof topic !== 'string' || topic === '' || Buffer.byteLength(topic) > 0xffff) throw new TypeError(`emit(record): record.topic must be a non-empty string, got ${JSON.stringify(topic)}`)
  // A topic the sink can never deliver to would be committed and retried without end.
  try {
    sink.validateTopic?.(topic)
  } catch (err) {
    if (err instanceof RangeError || err instanceof TypeError) throw new RangeError(`emit(record): record.topic: ${err.message}`, { cause: err })
    throw err
  }
}

function checkPart(v: unknown, field: string): asserts v is string | Uint8Array | null {
  if (v !== null && typeof v !== 'string' && !(v instanceof Uint8Array)) throw new TypeError(`emit(record): record.${field} must be a string, a Uint8Array or null, got ${v === undefined ? 'undefined' : typeof v}`)
}

/** The header names, each checked with its value. */
function checkHeaders(headers: unknown): string[] {
  if (headers === null || typeof headers !== 'object') throw new TypeError('emit(record): record.headers must be an object of string or Uint8Array values')
  const names = Object.keys(headers)
  for (const name of names) {
    const v = (headers as Record<string, unknown>)[name]
    // The binary form holds a header name's length in a u16.
    if (Buffer.byteLength(name) > 0xffff) throw new RangeError(`emit(record): header name ${JSON.stringify(name.slice(0, 50))}... is ${Buffer.byteLength(name)} bytes; at most 65535`)
    if (name.startsWith(RESERVED_HEADER_PREFIX)) throw new RangeError(`emit(record): header ${JSON.stringify(name)} is reserved (names starting with ${RESERVED_HEADER_PREFIX})`)
    if (typeof v !== 'string' && !(v instanceof Uint8Array)) throw new TypeError(`emit(record): header ${JSON.stringify(name)} must be a string or a Uint8Array`)
  }
  return names
}

/** The dedupe watermarks a store holds: per upstream partition key, the highest (offset, index) applied. */
export async function readDedupeWatermarks(store: PartitionStore): Promise<Map<string, { offset: bigint; index: number }>> {
  checkStore(store, 'readDedupeWatermarks')
  const out = new Map<string, { offset: bigint; index: number }>()
  for await (const [key, [offset, index]] of store.transaction().value(DEDUPE_STATE).entries()) out.set(key, { offset: BigInt(offset), index })
  return out
}

/** The outbox's records in delivery order (for tools and tests). */
export async function readOutbox(store: PartitionStore): Promise<OutboxRecord[]> {
  checkStore(store, 'readOutbox')
  const out: OutboxRecord[] = []
  for await (const [, value] of store.transaction().value(OUTBOX_STATE).entries()) out.push(...decodeOutboxChunk(value).records)
  return out
}

function checkStore(store: unknown, fn: string): void {
  if (typeof (store as PartitionStore | null | undefined)?.transaction !== 'function') {
    throw new TypeError(`${fn}(store): store must be an open PartitionStore, got ${describeValue(store)}`)
  }
}

/** The `tidemark-id` header of an event that has headers (an OutboxRecord from outboxRecordCodec(), a Kafka record). */
export function eventIdHeader(event: unknown): unknown {
  const headers = (event as { headers?: Record<string, unknown> } | null | undefined)?.headers
  return headers === undefined || headers === null ? undefined : headers[RECORD_ID_HEADER]
}
