import { isTidemarkError, TidemarkError } from '../errors.js'
import { prefixEnd } from '../store/keys.js'
import type { PartitionStore } from '../store/partition-store.js'
import type { ResolvedOutputs } from './options.js'
import { decodeOutboxRecord } from './record.js'
import { OUTBOX_STATE } from './states.js'
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
  /** close() stopped waiting for the send in flight: its outcome is left alone (the store is closing). */
  #abandoned = false
  readonly #roomWaiters = new Set<{ resolve: () => void; reject: (e: unknown) => void }>()
  readonly #emptyWaiters = new Set<{ resolve: () => void; reject: (e: unknown) => void }>()
  readonly #stop = new AbortController()
  /**
   * The last key this publisher deleted: the next scan starts after it.
   * A scan from the start would walk every tombstone the deletes left (until
   * LevelDB compacts them), which made each batch slower the longer delivery
   * ran. Safe because outbox keys only grow while one publisher runs: a
   * commit's keys are (offset, index) of events after the committed position.
   */
  #after: Uint8Array | undefined

  constructor(options: OutboxPublisherOptions) {
    this.#store = options.store
    this.#o = options.outputs
    this.#onEvent = options.onEvent ?? (() => undefined)
    this.#onStoreFailed = options.onStoreFailed ?? (() => undefined)
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
      this.#records++
      this.#bytes += value.byteLength
    }
    this.#loop = this.#run()
  }

  /** A commit added records to the outbox: counts them and wakes the loop. */
  committed(records: number, bytes: number): void {
    this.#records += records
    this.#bytes += bytes
    this.#checkFull()
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
    let attempt = 0
    while (!this.#closed) {
      this.#pending = false
      let batch: Array<{ key: Uint8Array; bytes: number; record: OutboxRecord }>
      try {
        batch = await this.#read()
      } catch (error) {
        this.#storeFailed(error)
        return
      }
      if (batch.length === 0) {
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
      const sending = this.#o.sink.send(batch.map((b) => b.record))
      this.#sending = sending
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
          `sink ${this.#o.sink.name} failed to take ${batch.length} output record(s) (attempt ${attempt}, retry in ${retryInMs} ms): ${(cause as Error)?.message ?? cause}`,
          { cause, details: { sink: this.#o.sink.name, records: batch.length, attempt } },
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
      try {
        const tx = this.#store.transaction()
        const view = tx.value(OUTBOX_STATE)
        for (const b of batch) view.delete(b.key)
        await tx.commitWithoutPosition()
      } catch (error) {
        // Delivered but still in the outbox: sent again by the next owner, same ids.
        this.#storeFailed(error)
        return
      }
      this.#after = batch.at(-1)!.key
      let bytes = 0
      for (const b of batch) bytes += b.bytes
      this.#records = Math.max(0, this.#records - batch.length)
      this.#bytes = Math.max(0, this.#bytes - bytes)
      this.#onEvent({ type: 'delivered', records: batch.length, bytes })
      this.#checkFull()
    }
  }

  async #read(): Promise<Array<{ key: Uint8Array; bytes: number; record: OutboxRecord }>> {
    const out: Array<{ key: Uint8Array; bytes: number; record: OutboxRecord }> = []
    const prefix = OUTBOX_STATE.prefix
    // The store's own range scan: a fresh transaction's entries() has no
    // writes to lay over it, and cost two more async generators and a key
    // copy per record. After #after: its key followed by a zero byte.
    const gte = this.#after === undefined ? prefix : Buffer.concat([prefix, this.#after, ZERO])
    for await (const [key, value] of this.#store.scan({ gte, lt: OUTBOX_END, reverse: false })) {
      out.push({ key: key.subarray(prefix.length), bytes: value.byteLength, record: decodeOutboxRecord(value) })
      if (out.length >= this.#o.maxBatchRecords) break
    }
    return out
  }

  #storeFailed(error: unknown): void {
    // The store closed under us: the runtime is shutting down, nothing to report.
    if (this.#closed || isTidemarkError(error, 'TIDEMARK_STORE_CLOSED')) return
    this.#onStoreFailed(error)
  }
}

/** Where the outbox state's keys end. */
const OUTBOX_END = prefixEnd(OUTBOX_STATE.prefix)
const ZERO = Buffer.of(0)

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve()
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms)
    function done(): void {
      clearTimeout(timer)
      signal.removeEventListener('abort', done)
      resolve()
    }
    signal.addEventListener('abort', done, { once: true })
  })
}
