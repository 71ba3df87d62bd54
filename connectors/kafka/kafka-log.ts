import { randomBytes } from 'node:crypto'
import type { Admin, IHeaders, Producer } from 'kafkajs'
import { Kafka, Partitioners, logLevel } from './kafkajs.js'
// Before any kafkajs connection: silences kafkajs 2.2.4's negative timer on Node 24 (see the file).
import './kafkajs-fixes.js'
import { TidemarkError } from '../../src/errors.js'
import { AbstractRevisionedLog, type LogEntry } from '../../src/log/index.js'
import { HEADER_BASIS, HEADER_SEQ, HEADER_WRITER, PartitionCursor } from './cursor.js'
import { validateKafkaLogOptions, type KafkaLogOptions, type ResolvedKafkaLogOptions } from './options.js'

/** Connects and checks that the topic and partition exist (creating the topic where the cluster auto-creates topics). */
export async function openKafkaLog(options: KafkaLogOptions): Promise<KafkaLog> {
  const log = new KafkaLog(options)
  try {
    await log.connect()
  } catch (err) {
    await log.close()
    throw err
  }
  return log
}

/**
 * The revisioned log on one partition of a Kafka topic, with kafkajs.
 *
 * - Revisions are offsets. tail() is the high watermark, oldest() the low one.
 * - append() produces with acks = -1 (all in-sync replicas).
 * - Kafka cannot append conditionally, so every record carries the writer's
 *   id and a sequence number, and a conditional record the revision it was
 *   based on. Readers decide which records took effect by one rule (see
 *   record-effect.ts) and skip the others; the writer learns its verdict by
 *   reading up to its own record.
 * - truncate() deletes records with the DeleteRecords API, keeping the
 *   duplicate window before the cut. Clusters that refuse it (librdkafka's
 *   mock does) fail with TIDEMARK_LOG_TRUNCATE_UNSUPPORTED; the records then
 *   stay until the topic's retention removes them, so give the topic a
 *   retention longer than the time between two compactions, or none.
 * - The topic must not be compacted (cleanup.policy=delete) and must not be
 *   written by transactional producers: readers assume offsets without gaps.
 */
export class KafkaLog extends AbstractRevisionedLog {
  readonly options: ResolvedKafkaLogOptions
  readonly location: string
  /** Tags this instance's records; unique per instance, so sequence numbers need no persistence. */
  readonly writerId = randomBytes(8).toString('hex')
  readonly #kafka: Kafka
  readonly #producer: Producer
  readonly #admin: Admin
  readonly #cursor: PartitionCursor
  #seq = 0n

  constructor(options: KafkaLogOptions) {
    super()
    this.options = validateKafkaLogOptions(options)
    const { brokers, clientId, topic, partition, kafka } = this.options
    this.location = `Kafka topic ${topic} partition ${partition}`
    this.#kafka = new Kafka({ logLevel: logLevel.NOTHING, ...kafka, brokers, clientId })
    this.#producer = this.#kafka.producer({ allowAutoTopicCreation: true, idempotent: false, createPartitioner: Partitioners.DefaultPartitioner })
    this.#admin = this.#kafka.admin()
    this.#cursor = new PartitionCursor({
      kafka: this.#kafka,
      options: this.options,
      writerId: this.writerId,
      location: this.location,
      watermarks: () => this.#watermarks(),
      unavailable: (err, op) => this.#unavailable(err, op),
    })
  }

  async connect(): Promise<void> {
    const { topic, partition } = this.options
    let count: number
    try {
      await Promise.all([this.#producer.connect(), this.#admin.connect()])
      // A metadata request auto-creates the topic where the cluster allows it.
      const { topics } = await this.#admin.fetchTopicMetadata({ topics: [topic] })
      count = topics[0]?.partitions.length ?? 0
    } catch (err) {
      throw this.#unavailable(err, 'connect to')
    }
    if (partition >= count) throw new RangeError(`partition (${partition}) does not exist: topic ${topic} has ${count} partitions`)
  }

  protected async _oldest(): Promise<bigint> {
    return (await this.#watermarks()).low
  }

  protected async _tail(): Promise<bigint> {
    return (await this.#watermarks()).high
  }

  protected async *_read(from: bigint, end: bigint | undefined): AsyncGenerator<LogEntry> {
    const { low, high } = await this.#watermarks()
    if (from < low) {
      throw new TidemarkError('TIDEMARK_LOG_TRUNCATED', `revision ${from} was truncated from ${this.location}; it now starts at ${low}`, { details: { from, oldest: low } })
    }
    if (from > high) throw new RangeError(`from (${from}) is past the tail (${high}) of ${this.location}`)
    const stop = end === undefined || end > high ? high : end
    if (from >= stop) return
    for await (const entry of this.#cursor.entries(from, stop)) {
      this.assertOpen()
      yield entry
    }
  }

  protected async _append(data: Uint8Array): Promise<bigint> {
    return this.#produce(data, { [HEADER_WRITER]: this.writerId, [HEADER_SEQ]: String(++this.#seq) })
  }

  protected async _appendConditionally(data: Uint8Array, expected: bigint): Promise<bigint | undefined> {
    await this.#cursor.prepare(expected)
    // A conflict the cursor has already seen would lose anyway; do not write it.
    if (this.#cursor.knowsConflict(expected)) return undefined
    const seq = ++this.#seq
    this.#cursor.expect(seq)
    let offset: bigint
    try {
      offset = await this.#produce(data, { [HEADER_WRITER]: this.writerId, [HEADER_SEQ]: String(seq), [HEADER_BASIS]: String(expected) })
    } catch (err) {
      this.#cursor.forget(seq)
      throw err
    }
    if (offset === expected + 1n) {
      // Nothing lies between the basis and the record, so by the rule it
      // took effect; every reader will judge it so. The single writer's
      // common case needs no read.
      this.#cursor.forget(seq)
      return offset
    }
    const verdict = await this.#cursor.verdict(seq, offset, expected)
    return verdict.effective ? verdict.offset : undefined
  }

  protected async _truncate(before: bigint): Promise<void> {
    const { topic, partition, dedupeWindow } = this.options
    const { low, high } = await this.#watermarks()
    if (before > high) throw new RangeError(`before (${before}) is past the tail (${high}) of ${this.location}`)
    // Readers that start at `before` read the duplicate window before it.
    const cut = before - BigInt(dedupeWindow)
    if (cut <= low) return
    try {
      await this.#admin.deleteTopicRecords({ topic, partitions: [{ partition, offset: cut.toString() }] })
    } catch (err) {
      if (unsupported(err)) {
        throw new TidemarkError('TIDEMARK_LOG_TRUNCATE_UNSUPPORTED', `the cluster refused to delete records before ${cut} of ${this.location}: ${(err as Error).message}`, {
          cause: err,
          details: { topic, partition, before: cut },
        })
      }
      throw this.#unavailable(err, 'delete records of')
    }
  }

  protected async _close(): Promise<void> {
    await Promise.all([this.#cursor.close(), this.#producer.disconnect().catch(() => {}), this.#admin.disconnect().catch(() => {})])
  }

  async #produce(data: Uint8Array, headers: IHeaders): Promise<bigint> {
    const { topic, partition } = this.options
    let offset: string | undefined
    try {
      const [meta] = await this.#producer.send({
        topic,
        acks: -1,
        messages: [{ partition, value: Buffer.from(data.buffer, data.byteOffset, data.byteLength), headers }],
      })
      offset = meta?.baseOffset ?? meta?.offset
    } catch (err) {
      throw this.#unavailable(err, 'append to')
    }
    if (offset === undefined) throw this.#unavailable(new Error('the produce response carries no offset'), 'append to')
    return BigInt(offset)
  }

  async #watermarks(): Promise<{ low: bigint; high: bigint }> {
    const { topic, partition } = this.options
    let offsets
    try {
      offsets = await this.#admin.fetchTopicOffsets(topic)
    } catch (err) {
      throw this.#unavailable(err, 'list offsets of')
    }
    const mine = offsets.find((o) => o.partition === partition)
    if (mine === undefined) throw this.#unavailable(new Error(`no offsets for partition ${partition}`), 'list offsets of')
    return { low: BigInt(mine.low), high: BigInt(mine.high) }
  }

  #unavailable(err: unknown, op: string): TidemarkError {
    if (err instanceof TidemarkError) return err
    const retriable = (err as { retriable?: unknown })?.retriable
    return new TidemarkError('TIDEMARK_LOG_UNAVAILABLE', `could not ${op} ${this.location}: ${(err as Error)?.message ?? err}`, {
      cause: err,
      retriable: typeof retriable === 'boolean' ? retriable : true,
      details: { topic: this.options.topic, partition: this.options.partition },
    })
  }
}

/** Whether a DeleteRecords failure means the cluster does not offer it at all. */
function unsupported(err: unknown): boolean {
  for (let e = err as { message?: unknown; type?: unknown; name?: unknown; cause?: unknown } | undefined; e; e = e.cause as typeof e) {
    if (e.type === 'UNSUPPORTED_VERSION' || e.type === 'UNSUPPORTED_FOR_MESSAGE_FORMAT' || e.name === 'KafkaJSBrokerNotFound') return true
    if (typeof e.message === 'string' && /does not support the requested API version/i.test(e.message)) return true
  }
  return false
}
