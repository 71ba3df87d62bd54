import { isTidemarkError, TidemarkError } from '../errors.js'
import { prefixEnd } from '../store/keys.js'
import type { PartitionStore } from '../store/partition-store.js'
import type { ResolvedOutputs } from './options.js'
import { decodeOutboxChunk, frameOutboxChunk, outboxChunkSize, outboxChunkTail, outboxKeyAt, outboxRecordIdAt } from './record.js'
import { EncodedBatch } from './encoded-batch.js'
import { OUTBOX_STATE } from './states.js'
import { sleep } from '../util/index.js'
import type { OutboxRecord, OutputsEvent } from './types.js'

export interface OutboxPublisherOptions {
  store: PartitionStore
  outputs: ResolvedOutputs
  onEvent?: (event: OutputsEvent) => void
  /** Called when the store itself fails under the publisher (not the sink): the partition cannot go on. */
  onStoreFailed?: (error: unknown) => void
}

/**
 * Drains one partition store's outbox to its sink: in key order, that is in
 * (source partition, offset, index) order, a batch at a time; the delivered
 * keys are deleted in one batch after the sink confirmed them. A failed send
 * is retried with jittered exponential backoff, without end, and nothing
 * later is sent before it, so each destination partition gets an upstream
 * partition's records in order (duplicates only as a re-send of a suffix).
 *
 * It keeps the committed outbox's size (records, bytes): counted once at
 * start, grown by the runtime's committed() after each commit, shrunk by
 * each delete, so that the runtime can pause at the limit.
 */
export class OutboxPublisher {
  readonly #store: PartitionStore
  readonly #o: ResolvedOutputs
  readonly #onEvent: (event: OutputsEvent) => void
  readonly #onStoreFailed: (error: unknown) => void
  /** The sink takes records in their binary form (sendEncoded). */
  readonly #encoded: boolean
  #records = 0
  #bytes = 0
  #full = false
  #closed = false
  #wake: (() => void) | undefined
  #pending = false
  #loop: Promise<void> | undefined
  #closing: Promise<void> | undefined
  /** The send in flight: close() waits for it (up to closeTimeoutMs) and deletes what it delivered. */
  #sending: Promise<void> | undefined
  /** The delete of the last delivered batch, committing while the next send runs; false: it failed. */
  #deleting: Promise<boolean> | undefined
  /** close() stopped waiting for the send in flight: its outcome is left alone (the store is closing). */
  #abandoned = false
  readonly #roomWaiters = new Set<{ resolve: () => void; reject: (e: unknown) => void }>()
  readonly #emptyWaiters = new Set<{ resolve: () => void; reject: (e: unknown) => void }>()
  readonly #stop = new AbortController()
  /**
   * Outbox entries read and not fully delivered yet, in key order; the first
   * may be partly delivered (its `next`). The store holds them too, each
   * under its current key: what a send delivered is deleted (and the rest
   * of a partly delivered entry put again under its first record's key) in
   * one batch after the sink confirmed it.
   */
  readonly #queue: QueuedEntry[] = []
  /** Records of #queue not delivered. */
  #queued = 0
  /** Bytes of the entries in #queue. */
  #queuedBytes = 0
  /**
   * The key of the last record of the last entry read into #queue: the next
   * read starts after it. A scan from the start would walk every tombstone the deletes left
   * (until LevelDB compacts them), which made each batch slower the longer
   * delivery ran. Safe because outbox keys only grow while one publisher
   * runs (a commit's keys are (offset, index) of events after the committed
   * position), and the rest of an entry put again sorts before the next entry.
   */
  #readAfter: Uint8Array | undefined
  /**
   * The store holds no outbox entry after #readAfter that is not in #queue:
   * the last scan reached the outbox's end and no commit was announced
   * while it ran. Then committed() queues the entries a commit put as they
   * are (they need not be read back, nor checked: they were never written
   * out and read in), and #fill() has nothing to read. An entry that cannot
   * be queued so (a scan runs, the queue is at its bound) clears it: the
   * next #fill() scans again from #readAfter.
   */
  #tailing = false
  /**
   * The key of the first entry a commit of this process put (committed()):
   * entries from it on were encoded here and are only framed when read
   * back; those found at start (a restart, a restore) are checked record by
   * record (frameOutboxChunk).
   */
  #trustedFrom: Uint8Array | undefined
  #scanning = false
  /** A commit was announced while a scan ran: that scan may not have seen it. */
  #missed = false

  constructor(options: OutboxPublisherOptions) {
    this.#store = options.store
    this.#o = options.outputs
    // Called from the delivery loop: it must not throw (the processor's and
    // the consumer's emit keep their listeners' errors out, see callListener).
    this.#onEvent = options.onEvent ?? (() => undefined)
    this.#onStoreFailed = options.onStoreFailed ?? (() => undefined)
    this.#encoded = this.#o.sink.sendEncoded !== undefined
  }

  /** Records and bytes in the committed outbox, as far as this publisher knows. */
  get size(): { records: number; bytes: number } {
    return { records: this.#records, bytes: this.#bytes }
  }

  /** Whether the committed outbox is at or above its limit. */
  get full(): boolean {
    return this.#records >= this.#o.maxOutboxRecords || this.#bytes >= this.#o.maxOutboxBytes
  }

  /** Counts what the store's outbox holds (after a restart or a restore: what was not confirmed) and starts delivering it. */
  async start(): Promise<void> {
    for await (const [, value] of this.#store.scan({ gte: OUTBOX_STATE.prefix, lt: OUTBOX_END, reverse: false })) {
      const size = outboxChunkSize(value)
      this.#records += size.records
      this.#bytes += size.bytes
    }
    this.#loop = this.#run()
  }

  /**
   * A commit added records to the outbox: counts them and wakes the loop.
   * `entries`: the outbox entries it put, in key order (queued without a
   * read of the store when delivery has caught up, see #tailing).
   */
  committed(records: number, bytes: number, entries: readonly CommittedEntry[] = []): void {
    this.#records += records
    this.#bytes += bytes
    this.#checkFull()
    if (this.#scanning) this.#missed = true
    if (this.#trustedFrom === undefined && entries.length > 0) this.#trustedFrom = entries[0]!.key
    for (const e of entries) {
      if (!this.#tailing) break
      // Read already by a scan that began after this commit was written.
      if (this.#readAfter !== undefined && Buffer.compare(e.lastKey, this.#readAfter) <= 0) continue
      if (this.#queueFull()) {
        // Left in the store: the next fill reads it (and what follows).
        this.#tailing = false
        break
      }
      this.#enqueue(e.key, e.value, e.starts, e.lastKey)
    }
    this.notify()
  }

  /** Wakes the loop (something may be waiting in the outbox). */
  notify(): void {
    this.#pending = true
    this.#wake?.()
  }

  /**
   * undefined while the outbox is below its limit; else a promise that
   * resolves once delivery made room (and rejects when the publisher closes).
   */
  waitForRoom(): Promise<void> | undefined {
    if (!this.#checkFull()) return undefined
    if (this.#closed) return Promise.reject(this.#closedError('waited for room in its outbox'))
    return new Promise((resolve, reject) => this.#roomWaiters.add({ resolve, reject }))
  }

  /** Resolves when the outbox is empty (everything committed so far was delivered); rejects if the publisher closes first. */
  flush(): Promise<void> {
    if (this.#records === 0) return Promise.resolve()
    if (this.#closed) return Promise.reject(this.#closedError('waited for its outbox to empty'))
    this.notify()
    return new Promise((resolve, reject) => this.#emptyWaiters.add({ resolve, reject }))
  }

  /**
   * Stops delivering. A send in flight is waited for (up to closeTimeoutMs)
   * and what it delivered is deleted, so that a clean stop sends nothing
   * twice; past the bound a 'delivery-failed' event says so and those
   * records stay. What is not delivered stays in the outbox for the next start.
   */
  close(): Promise<void> {
    if (this.#closing !== undefined) return this.#closing
    this.#closed = true
    this.#stop.abort()
    this.#wake?.()
    for (const w of this.#roomWaiters) w.reject(this.#closedError('waited for room in its outbox'))
    this.#roomWaiters.clear()
    for (const w of this.#emptyWaiters) w.reject(this.#closedError('waited for its outbox to empty'))
    this.#emptyWaiters.clear()
    this.#closing = this.#finish()
    return this.#closing
  }

  async #finish(): Promise<void> {
    const sending = this.#sending
    if (sending !== undefined) {
      let timer: NodeJS.Timeout | undefined
      const expired = new Promise<'expired'>((resolve) => { timer = setTimeout(() => resolve('expired'), this.#o.closeTimeoutMs) })
      const outcome = await Promise.race([sending.then(() => 'settled' as const, () => 'settled' as const), expired])
      clearTimeout(timer)
      if (outcome === 'expired') {
        // The sink may hang for its own timeouts; the runtime must still be
        // able to close. Those records may or may not have arrived: they stay
        // in the outbox and the next owner sends them again, same ids.
        this.#abandoned = true
        const error = new TidemarkError(
          'TIDEMARK_OUTPUT_DELIVERY_FAILED',
          `close(): sink ${this.#o.sink.name} did not confirm a send within ${this.#o.closeTimeoutMs} ms; its records stay in the outbox and are sent again by the next start`,
          { details: { sink: this.#o.sink.name, closeTimeoutMs: this.#o.closeTimeoutMs } },
        )
        this.#onEvent({ type: 'delivery-failed', error, attempt: 0, retryInMs: 0 })
        // The delete of the batch before it may still be committing.
        await this.#deleting
        return
      }
    }
    // What remains of the loop ends without waiting on the sink: a scan, the
    // delete after the send, or a backoff (woken by the abort).
    await this.#loop
  }

  #closedError(what: string): TidemarkError {
    return new TidemarkError('TIDEMARK_PROCESSOR_CLOSED', `the outbox publisher was closed while the partition ${what}`)
  }

  #checkFull(): boolean {
    const full = this.full
    if (full && !this.#full) {
      this.#full = true
      this.#onEvent({ type: 'outbox-full', records: this.#records, bytes: this.#bytes })
    } else if (!full && this.#full) {
      this.#full = false
      this.#onEvent({ type: 'outbox-resumed', records: this.#records, bytes: this.#bytes })
      for (const w of this.#roomWaiters) w.resolve()
      this.#roomWaiters.clear()
    }
    return full
  }

  async #run(): Promise<void> {
    // The delete of the last delivered batch and the read of the next one
    // run while the sink takes the next send (the sends stay one after the
    // other): delivery costs about what the sink's sends cost.
    let ahead: Promise<unknown> | undefined
    try {
      let attempt = 0
      while (!this.#closed) {
        this.#pending = false
        try {
          const failed = await ahead
          ahead = undefined
          if (failed !== undefined) throw failed
          if (this.#queued < this.#o.maxBatchRecords) await this.#fill()
        } catch (error) {
          this.#storeFailed(error)
          return
        }
        if (this.#queue.length === 0) {
          // Counts are right once the last delete committed.
          if (this.#deleting !== undefined && !(await this.#deleting)) return
          this.#deleting = undefined
          if (this.#records !== 0 && !this.#pending) {
            // The outbox is empty and nothing committed since the scan began
            // (that would have set #pending): a count that drifted is reset.
            this.#records = 0
            this.#bytes = 0
            this.#checkFull()
          }
          for (const w of this.#emptyWaiters) w.resolve()
          this.#emptyWaiters.clear()
          // close() during the scan found no #wake to call: checked here, or
          // the loop would wait for a wake-up nobody gives.
          if (this.#closed) return
          if (!this.#pending) await new Promise<void>((resolve) => { this.#wake = resolve })
          this.#wake = undefined
          continue
        }
        // Closed during the scan: nothing new is sent after close().
        if (this.#closed) return
        const batch = this.#take()
        const sending = this.#send(batch)
        this.#sending = sending
        if (this.#queued - batch.size < this.#o.maxBatchRecords) ahead = this.#fill().then(() => undefined, (error: unknown) => error ?? new Error(String(error)))
        try {
          await sending
        } catch (cause) {
          this.#sending = undefined
          if (this.#closed) return
          attempt++
          const ceiling = Math.min(this.#o.retry.maxMs, this.#o.retry.initialMs * 2 ** Math.min(attempt - 1, 30))
          const retryInMs = Math.round(ceiling / 2 + Math.random() * ceiling / 2)
          const error = new TidemarkError(
            'TIDEMARK_OUTPUT_DELIVERY_FAILED',
            `sink ${this.#o.sink.name} failed to take ${batch.size} output record(s) (attempt ${attempt}, retry in ${retryInMs} ms): ${(cause as Error)?.message ?? cause}`,
            { cause, details: { sink: this.#o.sink.name, records: batch.size, attempt } },
          )
          this.#onEvent({ type: 'delivery-failed', error, attempt, retryInMs })
          await sleep(retryInMs, this.#stop.signal)
          continue
        }
        this.#sending = undefined
        // Delivered: deleted even when close() came meanwhile (close() waits
        // for this), else a clean stop would send the batch again next start.
        if (this.#abandoned) return
        attempt = 0
        if (this.#deleting !== undefined && !(await this.#deleting)) return
        this.#deleting = this.#delete(batch)
      }
    } finally {
      // The store closes after the loop: nothing of it may still run.
      await ahead
      await this.#deleting
    }
  }

  /** Reads entries after #readAfter into #queue until the outbox ends or the queue is full (#queueFull), unless nothing is left to read (#tailing). */
  async #fill(): Promise<void> {
    if (this.#tailing) return
    this.#scanning = true
    this.#missed = false
    try {
      this.#tailing = await this.#scan() && !this.#missed
    } finally {
      this.#scanning = false
    }
  }

  /** #fill()'s read of the store; true when it reached the outbox's end. */
  async #scan(): Promise<boolean> {
    const prefix = OUTBOX_STATE.prefix
    // The store's own range scan: a fresh transaction's entries() has no
    // writes to lay over it, and cost two more async generators and a key
    // copy per entry.
    const gte = this.#readAfter === undefined ? prefix : Buffer.concat([prefix, this.#readAfter, ZERO])
    for await (const [key, value] of this.#store.scan({ gte, lt: OUTBOX_END, reverse: false })) {
      const k = key.subarray(prefix.length)
      // A sink that takes the binary form gets the records checked, not
      // decoded: decoding was most of a delivery's cost on this thread.
      const starts = this.#encoded ? frameOutboxChunk(value, this.#trustedFrom === undefined || Buffer.compare(k, this.#trustedFrom) < 0) : undefined
      this.#enqueue(k, value, starts, undefined)
      // Read on to the end within the queue's bound, so that delivery that
      // keeps up goes on without reads (#tailing).
      if (this.#queueFull()) return false
    }
    return true
  }

  /** #queue holds what it may (QUEUE_SENDS sends' worth of records, QUEUE_BYTES): the rest waits in the store. */
  #queueFull(): boolean {
    return this.#queued >= QUEUE_SENDS * this.#o.maxBatchRecords || this.#queuedBytes >= QUEUE_BYTES
  }

  /**
   * Queues an outbox entry (starts: its checked starts[], or undefined to
   * decode it) and moves #readAfter to its last record's key (`lastKey`,
   * or read from the entry): the rest of an entry put again after a partial
   * delivery sorts at or before it, so no read takes that rest twice.
   */
  #enqueue(key: Uint8Array, value: Buffer, starts: number[] | undefined, lastKey: Uint8Array | undefined): void {
    let records: OutboxRecord[] | undefined
    if (!this.#encoded) ({ records, starts } = decodeOutboxChunk(value))
    const count = starts!.length - 1
    this.#queue.push({ key, value, records, starts: starts!, count, next: 0 })
    this.#queued += count
    this.#queuedBytes += value.length
    this.#readAfter = lastKey ?? (count === 0 ? key : restKey(key, outboxRecordIdAt(value, starts![count - 1]!)))
  }

  /** The next send: up to maxBatchRecords records from the front of #queue (left there until delivered). */
  #take(): Batch {
    const max = this.#o.maxBatchRecords
    const records: OutboxRecord[] = []
    const encoded = new EncodedBatch()
    const parts: Batch['parts'] = []
    let size = 0
    for (const entry of this.#queue) {
      if (size >= max && parts.length > 0) break
      const to = Math.min(entry.count, entry.next + max - size)
      if (entry.records === undefined) encoded.add(entry.value, entry.starts, entry.next, to)
      else for (let i = entry.next; i < to; i++) records.push(entry.records[i]!)
      size += to - entry.next
      parts.push({ entry, to })
    }
    return { size, records, encoded, parts }
  }

  /** The sink's send as a promise: one that throws instead of rejecting fails the attempt the same way (it escaped the loop, unhandled). */
  #send(batch: Batch): Promise<void> {
    const sink = this.#o.sink
    try {
      return Promise.resolve(this.#encoded ? sink.sendEncoded!(batch.encoded) : sink.send(batch.records))
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /**
   * Removes a delivered batch: from #queue at once (the next send follows
   * it), from the store in one batch: each fully delivered entry deleted,
   * the rest of a partly delivered one put again under its first record's
   * key. Resolves false when that commit failed (the publisher stops).
   */
  #delete(batch: Batch): Promise<boolean> {
    let tx
    let bytes = 0
    try {
      tx = this.#store.transaction()
      const view = tx.value(OUTBOX_STATE)
      for (const { entry, to } of batch.parts) {
        bytes += entry.starts[to]! - entry.starts[entry.next]! - 4 * (to - entry.next)
        view.delete(entry.key)
        if (to < entry.count) {
          entry.key = restKey(entry.key, outboxRecordIdAt(entry.value, entry.starts[to]!))
          view.put(entry.key, outboxChunkTail(entry.value, entry.starts[to]!, entry.count - to))
          entry.next = to
        } else {
          this.#queuedBytes -= this.#queue.shift()!.value.length
        }
      }
    } catch (error) {
      this.#storeFailed(error)
      return Promise.resolve(false)
    }
    this.#queued -= batch.size
    return tx.commitWithoutPosition().then(() => {
      this.#records = Math.max(0, this.#records - batch.size)
      this.#bytes = Math.max(0, this.#bytes - bytes)
      this.#onEvent({ type: 'delivered', records: batch.size, bytes })
      this.#checkFull()
      return true
    }, (error: unknown) => {
      // Delivered but still in the outbox: sent again by the next owner, same ids.
      this.#storeFailed(error)
      return false
    })
  }

  #storeFailed(error: unknown): void {
    // The store closed under us: the runtime is shutting down, nothing to report.
    if (this.#closed || isTidemarkError(error, 'TIDEMARK_STORE_CLOSED')) return
    this.#onStoreFailed(error)
  }
}

interface QueuedEntry {
  /** Its key in the outbox state (after the state's prefix), as the store holds it now. */
  key: Uint8Array
  /** The entry as read (its records are views of it). */
  readonly value: Buffer
  /** Decoded, for a sink without sendEncoded. */
  readonly records: OutboxRecord[] | undefined
  readonly starts: number[]
  /** Its records. */
  readonly count: number
  /** Its first record not delivered. */
  next: number
}

interface Batch {
  /** Records in the send. */
  readonly size: number
  /** The records, for send() or sendEncoded() (the other one stays empty). */
  readonly records: OutboxRecord[]
  readonly encoded: EncodedBatch
  /** Per entry the batch takes records of: its records up to `to` (exclusive). */
  readonly parts: Array<{ entry: QueuedEntry; to: number }>
}

/**
 * The outbox key of a record of the entry at `key` (outboxKey(): the same
 * source topic and partition, then u64 offset and u32 index), from the
 * record's id, whose last two fields are that offset and index.
 */
function restKey(key: Uint8Array, id: string): Buffer {
  const j = id.lastIndexOf(':')
  const i = id.lastIndexOf(':', j - 1)
  return outboxKeyAt(key, BigInt(id.slice(i + 1, j)), Number(id.slice(j + 1)))
}

/** An outbox entry as a commit put it (see committed()). */
export interface CommittedEntry {
  /** Its key in the outbox state: outboxKey() of its first record. */
  readonly key: Uint8Array
  /** outboxKey() of its last record. */
  readonly lastKey: Uint8Array
  readonly value: Buffer
  /** Its starts[] (see OutboxChunk). */
  readonly starts: number[]
}

/** #queue holds up to this many sends' worth of records and this many bytes of entries (it may pass them by one entry): per partition, so a process with many partitions keeps a few MiB of each in memory at most. */
const QUEUE_SENDS = 8
const QUEUE_BYTES = 4 * 1024 * 1024

/** Where the outbox state's keys end. */
const OUTBOX_END = prefixEnd(OUTBOX_STATE.prefix)
const ZERO = Buffer.of(0)

