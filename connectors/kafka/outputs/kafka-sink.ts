import type { KafkaConfig, Message, Producer } from 'kafkajs'
import { Kafka, Partitioners, logLevel } from '../kafkajs.js'
// Before any kafkajs connection: silences kafkajs 2.2.4's negative timer on Node 24 (see the file).
import '../kafkajs-fixes.js'
import { eachEncodedRecord, type EncodedRecords, type OutboxRecord, type OutputSink } from '../../../src/outputs/index.js'

export interface KafkaSinkOptions {
  /** Bootstrap brokers of the output cluster, `host:port`. */
  brokers: string[]
  clientId?: string
  /** -1 (all in-sync replicas, default) or 1 (the leader). */
  acks?: -1 | 1
  /** kafkajs client options (ssl, sasl, retry, connectionTimeout, requestTimeout, logLevel, ...). */
  kafka?: Omit<KafkaConfig, 'brokers' | 'clientId'>
}

// Kafka's legal topic names (its Topic.validate): the broker refuses others
// on every send, so they are refused at emit instead.
const TOPIC = /^[A-Za-z0-9._-]+$/
const MAX_TOPIC_LENGTH = 249

function validateTopic(topic: string): void {
  if (typeof topic !== 'string' || !TOPIC.test(topic) || topic === '.' || topic === '..' || topic.length > MAX_TOPIC_LENGTH) {
    throw new RangeError(`kafkaSink: topic ${JSON.stringify(typeof topic === 'string' && topic.length > 100 ? `${topic.slice(0, 100)}...` : topic)} is not a legal Kafka topic name: 1 to ${MAX_TOPIC_LENGTH} letters, digits, '.', '_' or '-', and not '.' or '..'`)
  }
}

/**
 * An output sink on Kafka: one kafkajs producer for the whole process (make
 * one sink and give it to every processor or consumer), not one per
 * partition. Not idempotent and not transactional (the outbox and the ids
 * make delivery safe without them), with one request in flight per broker,
 * so that a retry never reorders a partition's records.
 */
export function kafkaSink(options: KafkaSinkOptions): OutputSink {
  if (options === null || typeof options !== 'object') throw new TypeError('kafkaSink: options must be an object')
  if (!Array.isArray(options.brokers) || options.brokers.length === 0 || !options.brokers.every((b) => typeof b === 'string' && b !== '')) {
    throw new TypeError(`kafkaSink: options.brokers must be a non-empty array of host:port strings, got ${JSON.stringify(options.brokers)}`)
  }
  const acks = options.acks ?? -1
  if (acks !== -1 && acks !== 1) throw new RangeError(`kafkaSink: options.acks must be -1 or 1, got ${JSON.stringify(acks)}`)
  const kafka = new Kafka({ logLevel: logLevel.NOTHING, ...options.kafka, brokers: [...options.brokers], clientId: options.clientId ?? 'tidemark-outputs' })
  let producer: Promise<Producer> | undefined
  let closed = false
  const connected = (): Promise<Producer> => {
    producer ??= (async () => {
      const p = kafka.producer({ allowAutoTopicCreation: true, idempotent: false, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner })
      await p.connect()
      return p
    })()
    // A failed connect is tried again by the next send.
    producer.catch(() => { producer = undefined })
    return producer
  }
  return {
    name: `kafka:${options.brokers.join(',')}`,
    validateTopic,
    async send(records: readonly OutboxRecord[]): Promise<void> {
      if (closed) throw new Error('the Kafka sink is closed')
      if (records.length === 0) return
      const batch = new TopicBatch()
      for (const r of records) batch.add(r.topic, r.partition, r.key, r.value, r.headers)
      await batch.send(await connected(), acks)
    },
    // The publisher's call: the records' fields are read straight from the
    // outbox's bytes into kafkajs messages, without an OutboxRecord and an
    // id string per record (decoding was a fifth of the job's delivery CPU).
    async sendEncoded(records: EncodedRecords): Promise<void> {
      if (closed) throw new Error('the Kafka sink is closed')
      if (records.length === 0) return
      const batch = new TopicBatch()
      eachEncodedRecord(records, batch.add)
      await batch.send(await connected(), acks)
    },
    async close(): Promise<void> {
      closed = true
      const p = producer
      producer = undefined
      await p?.then((x) => x.disconnect(), () => undefined)
    },
  }
}

/** One send's messages: one request, topics in first-seen order, each topic's records in outbox order. */
class TopicBatch {
  readonly #byTopic = new Map<string, Message[]>()

  // A field: handed to eachEncodedRecord() as it is.
  readonly add = (topic: string, partition: number, key: Buffer | null, value: Buffer | null, headers: Readonly<Record<string, Buffer>>): void => {
    let messages = this.#byTopic.get(topic)
    if (messages === undefined) this.#byTopic.set(topic, messages = [])
    // The record's headers object as it is (kafkajs only reads it), and
    // one object per message: no copy and no spread per record, which a
    // plain producer sending ready messages does not pay either.
    const message: Message = { key, value, headers: headers as Message['headers'] }
    if (partition >= 0) message.partition = partition
    messages.push(message)
  }

  send(producer: Producer, acks: -1 | 1): Promise<unknown> {
    return producer.sendBatch({ acks, topicMessages: [...this.#byTopic].map(([topic, messages]) => ({ topic, messages })) })
  }
}
