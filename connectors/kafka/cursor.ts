import type { Consumer, EachBatchPayload, IHeaders, Kafka, KafkaMessage, PartitionAssigner } from 'kafkajs'
import { AssignerProtocol } from './kafkajs.js'
import { TidemarkError, isTidemarkError } from '../../src/errors.js'
import type { LogEntry } from '../../src/log/index.js'
import { RecordEffectRule, type RecordMeta } from './record-effect.js'
import type { ResolvedKafkaLogOptions } from './options.js'

export const HEADER_WRITER = 'tidemark.writer'
export const HEADER_SEQ = 'tidemark.seq'
export const HEADER_BASIS = 'tidemark.basis'

export interface CursorContext {
  kafka: Kafka
  options: ResolvedKafkaLogOptions
  writerId: string
  location: string
  /** The partition's low and high watermarks, from a ListOffsets request. */
  watermarks(): Promise<{ low: bigint; high: bigint }>
  /** Wraps a client failure into TIDEMARK_LOG_UNAVAILABLE. */
  unavailable(err: unknown, op: string): TidemarkError
}

export interface Verdict {
  offset: bigint
  effective: boolean
}

/**
 * Reads one partition forward with a kafkajs consumer and judges every record
 * (see record-effect.ts). Effective entries are kept in a cache that readers
 * serve themselves from, so that a writer that reads up to its own record to
 * learn its verdict leaves behind exactly the entries the next fetchUpdates()
 * needs.
 *
 * kafkajs only consumes through consumer groups. The cursor joins a group of
 * its own (a random id, offsets never committed) with an assigner that hands
 * it only its partition, and positions itself with seek(). A group's first
 * join waits for the broker's group.initial.rebalance.delay.ms (3 s by
 * default, also in librdkafka's mock), so the consumer starts on the first
 * read that needs it and then follows the tail until close().
 */
export class PartitionCursor {
  readonly #ctx: CursorContext
  #consumer: Consumer | undefined
  #starting: Promise<Consumer> | undefined
  #joined = false
  /** The next offset to take. */
  #position = 0n
  /** Set by a seek until the record at #position arrives; records after it from an earlier fetch are dropped meanwhile. */
  #seekPending = false
  #rule: RecordEffectRule | undefined
  /** Records below it are read only to fill the duplicate window. */
  #primeUntil = 0n
  /** Every effective entry with a revision in [#cacheFrom, #position), in order. */
  #cache: LogEntry[] = []
  #cacheFrom = 0n
  #cacheBytes = 0
  readonly #readers = new Set<{ next: bigint }>()
  /** Verdicts of this writer's own conditional records, by sequence number, until collected. */
  readonly #own = new Map<bigint, Verdict | undefined>()
  #wake: (() => void) | undefined
  #changed: Promise<void> | undefined
  #failure: Error | undefined
  #closed = false

  constructor(ctx: CursorContext) {
    this.#ctx = ctx
  }

  /**
   * Whether an entry that took effect after `expected` is already known, so
   * that a conditional append based on it would lose without being written.
   */
  knowsConflict(expected: bigint): boolean {
    return this.#rule !== undefined && this.#rule.lastEffective > expected && this.#position > expected + 1n
  }

  /**
   * Makes sure the cursor judges every record from `expected + 1` on with the
   * right context: `expected` must be a revision that took effect (or -1n).
   */
  async prepare(expected: bigint): Promise<void> {
    const from = expected + 1n
    if (this.#rule === undefined || from < this.#cacheFrom || from > this.#position + this.#rule.window) {
      await this.#reposition(expected)
    }
  }

  /** Registers a conditional record of this writer before it is produced, since the cursor may judge it before send() returns. */
  expect(seq: bigint): void {
    this.#own.set(seq, undefined)
  }

  forget(seq: bigint): void {
    this.#own.delete(seq)
  }

  /** Reads up to `offset` (the last copy of the record) and returns the verdict of its first copy. */
  async verdict(seq: bigint, offset: bigint, expected: bigint): Promise<Verdict> {
    try {
      for (let attempt = 0; ; attempt++) {
        await this.#until(() => this.#position > offset, offset)
        const verdict = this.#own.get(seq)
        if (verdict !== undefined) return verdict
        // Another read moved the cursor past the record without judging it
        // (it repositioned); judge again from the basis, which took effect.
        if (attempt > 0) {
          throw new TidemarkError('TIDEMARK_LOG_UNAVAILABLE', `could not judge record ${offset} of ${this.#ctx.location}: the reader passed it twice without seeing it`, {
            details: { offset, writer: this.#ctx.writerId },
          })
        }
        try {
          await this.#reposition(expected)
        } catch (err) {
          // The record is written and its verdict unknown: TIDEMARK_LOG_TRUNCATED
          // would tell the caller that nothing was written (as prepare() does).
          if (!isTidemarkError(err, 'TIDEMARK_LOG_TRUNCATED')) throw err
          throw new TidemarkError('TIDEMARK_LOG_UNAVAILABLE', `could not judge record ${offset} of ${this.#ctx.location}: its basis ${expected} was truncated before the reader reached it`, {
            cause: err,
            details: { offset, writer: this.#ctx.writerId },
          })
        }
      }
    } finally {
      this.#own.delete(seq)
    }
  }

  /** The effective entries with `from <= revision < end`; `from - 1` must have taken effect, unless the cache holds `from`. */
  async *entries(from: bigint, end: bigint): AsyncGenerator<LogEntry> {
    const reader = { next: from }
    this.#readers.add(reader)
    try {
      if (this.#rule === undefined || from < this.#cacheFrom || from > this.#position + this.#rule.window) {
        await this.#reposition(from - 1n)
      }
      let lastYielded = from - 1n
      while (reader.next < end) {
        if (reader.next < this.#cacheFrom) {
          // Another read repositioned the cursor under this one: continue
          // after the last entry this one yielded, which took effect.
          await this.#reposition(lastYielded)
        }
        const entry = this.#cache[lowerBound(this.#cache, reader.next)]
        if (entry !== undefined) {
          if (entry.revision >= end) break
          reader.next = entry.revision + 1n
          lastYielded = entry.revision
          yield entry
          continue
        }
        // Everything before the position is judged and cached: nothing else took effect there.
        if (this.#position > reader.next) {
          reader.next = this.#position
          this.#signal()
          continue
        }
        const next = reader.next
        await this.#until(() => this.#position > next || this.#cacheFrom > next, end - 1n)
      }
    } finally {
      this.#readers.delete(reader)
      this.#signal()
    }
  }

  async close(): Promise<void> {
    this.#closed = true
    this.#signal()
    const consumer = this.#consumer ?? (await this.#starting?.catch(() => undefined))
    await consumer?.disconnect().catch(() => {})
  }

  async #reposition(lastEffective: bigint): Promise<void> {
    const from = lastEffective + 1n
    const { low } = await this.#ctx.watermarks()
    if (from < low) {
      throw new TidemarkError('TIDEMARK_LOG_TRUNCATED', `revision ${from} was truncated from ${this.#ctx.location}; it now starts at ${low}`, {
        details: { from, oldest: low },
      })
    }
    const window = BigInt(this.#ctx.options.dedupeWindow)
    const start = from - window > low ? from - window : low
    this.#rule = new RecordEffectRule(lastEffective, this.#ctx.options.dedupeWindow)
    this.#primeUntil = from
    this.#position = start
    this.#seekPending = true
    this.#cache = []
    this.#cacheFrom = from
    this.#cacheBytes = 0
    const consumer = await this.#start()
    consumer.seek({ topic: this.#ctx.options.topic, partition: this.#ctx.options.partition, offset: start.toString() })
    this.#signal()
  }

  #start(): Promise<Consumer> {
    this.#starting ??= (async () => {
      const { kafka, options } = this.#ctx
      const consumer = kafka.consumer({
        groupId: `tidemark-log-${this.#ctx.writerId}`,
        partitionAssigners: [onePartition(options.topic, options.partition)],
        maxWaitTimeInMs: options.fetchWaitMs,
        allowAutoTopicCreation: false,
      })
      consumer.on(consumer.events.GROUP_JOIN, () => {
        // After a rebalance kafkajs restarts from the committed offset, and
        // this group commits none: point it back at where the cursor is.
        if (this.#joined && this.#rule !== undefined) {
          this.#seekPending = true
          consumer.seek({ topic: options.topic, partition: options.partition, offset: this.#position.toString() })
        }
        this.#joined = true
      })
      consumer.on(consumer.events.CRASH, (event) => {
        if (!event.payload.restart) {
          this.#failure = this.#ctx.unavailable(event.payload.error, 'consume')
          this.#signal()
        }
      })
      try {
        await consumer.connect()
        await consumer.subscribe({ topics: [options.topic], fromBeginning: true })
        await consumer.run({ autoCommit: false, eachBatch: (payload) => this.#onBatch(payload) })
      } catch (err) {
        await consumer.disconnect().catch(() => {})
        this.#starting = undefined
        throw this.#ctx.unavailable(err, 'start the consumer of')
      }
      this.#consumer = consumer
      return consumer
    })()
    return this.#starting
  }

  async #onBatch({ batch, isStale, heartbeat }: EachBatchPayload): Promise<void> {
    if (batch.partition !== this.#ctx.options.partition || this.#rule === undefined) return
    // A batch fetched from the seek target is the seek's own answer, so a
    // gap at its start (a transaction marker, removed records) is real.
    // kafkajs keeps the fetch offset on the batch without typing it.
    const fetched = (batch as { fetchedOffset?: unknown }).fetchedOffset
    if (this.#seekPending && !isStale() && typeof fetched === 'string' && fetched === this.#position.toString()) this.#seekPending = false
    for (const message of batch.messages) {
      if (this.#closed || isStale()) return
      const offset = BigInt(message.offset)
      if (offset < this.#position) continue
      if (offset > this.#position && this.#seekPending) continue
      // A gap without a pending seek: records removed by retention or
      // control records; what is not there cannot have taken effect.
      this.#seekPending = false
      this.#take(offset, message)
      this.#position = offset + 1n
    }
    this.#signal()
    // Back-pressure: a reader that is behind keeps what it still needs.
    while (this.#cacheBytes > this.#ctx.options.cacheBytes && !this.#trim() && !this.#closed) {
      await Promise.race([this.#nextChange(), new Promise((resolve) => setTimeout(resolve, 1000))])
      await heartbeat()
    }
  }

  #take(offset: bigint, message: KafkaMessage): void {
    const meta = readMeta(offset, message.headers)
    if (offset < this.#primeUntil) {
      this.#rule!.remember(meta)
      return
    }
    const effective = this.#rule!.takesEffect(meta)
    if (meta.writer === this.#ctx.writerId && meta.seq !== undefined && this.#own.has(meta.seq) && this.#own.get(meta.seq) === undefined) {
      this.#own.set(meta.seq, { offset, effective })
    }
    if (!effective) return
    const data = message.value ?? Buffer.alloc(0)
    this.#cache.push({ revision: offset, data })
    this.#cacheBytes += data.byteLength
    if (this.#cacheBytes > this.#ctx.options.cacheBytes) this.#trim()
  }

  /** Drops cached entries no reader still needs until the cache fits; says whether it fits. */
  #trim(): boolean {
    let needed = this.#position
    for (const reader of this.#readers) if (reader.next < needed) needed = reader.next
    let drop = 0
    while (this.#cacheBytes > this.#ctx.options.cacheBytes && drop < this.#cache.length && this.#cache[drop]!.revision < needed) {
      this.#cacheBytes -= this.#cache[drop]!.data.byteLength
      drop++
    }
    if (drop > 0) {
      this.#cacheFrom = this.#cache[drop - 1]!.revision + 1n
      this.#cache = this.#cache.slice(drop)
    }
    return this.#cacheBytes <= this.#ctx.options.cacheBytes
  }

  /** Resolves when `done()` holds; fails on close, on a consumer crash, or after readTimeoutMs without progress. */
  async #until(done: () => boolean, target: bigint): Promise<void> {
    let position = this.#position
    let since = Date.now()
    for (;;) {
      if (this.#closed) throw new TidemarkError('TIDEMARK_LOG_CLOSED', `the log at ${this.#ctx.location} is closed`)
      if (this.#failure !== undefined) throw this.#failure
      if (done()) return
      if (this.#position !== position) {
        position = this.#position
        since = Date.now()
      }
      const left = since + this.#ctx.options.readTimeoutMs - Date.now()
      if (left <= 0) {
        throw new TidemarkError('TIDEMARK_LOG_UNAVAILABLE', `reading ${this.#ctx.location} made no progress for ${this.#ctx.options.readTimeoutMs} ms (at offset ${this.#position}, waiting for ${target})`, {
          details: { position: this.#position, target },
        })
      }
      let timer: NodeJS.Timeout | undefined
      await Promise.race([this.#nextChange(), new Promise<void>((resolve) => (timer = setTimeout(resolve, left)))])
      clearTimeout(timer)
    }
  }

  #nextChange(): Promise<void> {
    this.#changed ??= new Promise<void>((resolve) => (this.#wake = resolve))
    return this.#changed
  }

  #signal(): void {
    const wake = this.#wake
    this.#wake = undefined
    this.#changed = undefined
    wake?.()
  }
}

/** Hands the one partition to the group's single member (the lowest member id if there were several). */
function onePartition(topic: string, partition: number): PartitionAssigner {
  return () => ({
    name: 'TidemarkOnePartition',
    version: 1,
    async assign({ members }) {
      const ids = members.map((m) => m.memberId).sort()
      return ids.map((memberId, i) => ({
        memberId,
        memberAssignment: AssignerProtocol.MemberAssignment.encode({
          version: 1,
          assignment: i === 0 ? { [topic]: [partition] } : {},
          userData: Buffer.alloc(0),
        }),
      }))
    },
    protocol({ topics }) {
      return { name: 'TidemarkOnePartition', metadata: AssignerProtocol.MemberMetadata.encode({ version: 1, topics, userData: Buffer.alloc(0) }) }
    },
  })
}

function readMeta(offset: bigint, headers: IHeaders | undefined): RecordMeta {
  const writer = header(headers, HEADER_WRITER)
  const seq = decimal(header(headers, HEADER_SEQ))
  const basis = decimal(header(headers, HEADER_BASIS))
  // Malformed headers make a plain record: still one verdict for everyone.
  if (writer === undefined || seq === undefined) return { offset, writer: undefined, seq: undefined, basis: undefined }
  return { offset, writer, seq, basis: header(headers, HEADER_BASIS) === undefined ? undefined : basis ?? offset }
}

function header(headers: IHeaders | undefined, name: string): string | undefined {
  const value = headers?.[name]
  if (value === undefined) return undefined
  const one = Array.isArray(value) ? value[0] : value
  return one === undefined ? undefined : one.toString()
}

function decimal(text: string | undefined): bigint | undefined {
  return text !== undefined && /^-?\d{1,19}$/.test(text) ? BigInt(text) : undefined
}

function lowerBound(entries: readonly LogEntry[], revision: bigint): number {
  let lo = 0
  let hi = entries.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (entries[mid]!.revision < revision) lo = mid + 1
    else hi = mid
  }
  return lo
}
