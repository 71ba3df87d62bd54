// The OutputSink suite (tidemark/testing) against both of Tidemark's sinks,
// each read back where it delivered: the file log of each topic, the Kafka topic.
import { join } from 'node:path'
import { Kafka, logLevel } from 'kafkajs'
import { describe, expect, it } from 'vitest'
import { kafkaSink } from '../../connectors/kafka/index.js'
import { decodeOutboxRecord, fileLogSink, openFileLog, RECORD_ID_HEADER } from '../../src/index.js'
import { OutboxChunkWriter } from '../../src/outputs/chunk-writer.js'
import { decodeOutboxChunk } from '../../src/outputs/record.js'
import { EncodedBatch } from '../../src/outputs/encoded-batch.js'
import { outputSinkSuite, type DeliveredRecord } from '../../src/testing/index.js'
import { kafkaService } from '../helpers/services.js'
import { makeTempDir, randomName } from '../helpers/tmp.js'
import { FAST_GROUP } from '../kafka-consumer/fixture.js'

outputSinkSuite({
  test: it,
  describe,
  name: 'fileLogSink',
  factory: async () => {
    const dir = makeTempDir('tidemark-sink-')
    const sink = fileLogSink({ dir: dir.path, fileLog: { sync: false } })
    const read = async (topic: string): Promise<DeliveredRecord[]> => {
      const log = await openFileLog(join(dir.path, topic), { readOnly: true })
      try {
        const out: DeliveredRecord[] = []
        for await (const entry of log.read(0n)) out.push(decodeOutboxRecord(entry.data))
        return out
      } finally {
        await log.close()
      }
    }
    return { sink, read, cleanup: async () => { dir.cleanup() } }
  },
})

/**
 * Everything a topic holds, partition by partition in offset order: what was
 * produced before the call (send() resolved with acks from all replicas), up
 * to the high watermarks read first.
 */
async function readTopic(brokers: string[], topic: string): Promise<Array<DeliveredRecord & { partition: number }>> {
  const kafka = new Kafka({ brokers, clientId: 'sink-suite-reader', logLevel: logLevel.NOTHING })
  const admin = kafka.admin()
  await admin.connect()
  const ends = new Map<number, bigint>()
  try {
    for (const p of await admin.fetchTopicOffsets(topic)) if (BigInt(p.high) > BigInt(p.low)) ends.set(p.partition, BigInt(p.high))
  } finally {
    await admin.disconnect()
  }
  const out: Array<DeliveredRecord & { partition: number }> = []
  if (ends.size === 0) return out
  const consumer = kafka.consumer({ groupId: randomName('sink-suite'), ...FAST_GROUP })
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await new Promise<void>((resolve, reject) => {
      consumer.run({
        eachMessage: async ({ partition, message }) => {
          const headers: Record<string, Buffer> = {}
          for (const [name, value] of Object.entries(message.headers ?? {})) if (Buffer.isBuffer(value)) headers[name] = value
          out.push({ id: headers[RECORD_ID_HEADER]?.toString() ?? '', partition, key: message.key, value: message.value, headers })
          if (BigInt(message.offset) + 1n >= ends.get(partition)!) ends.delete(partition)
          if (ends.size === 0) resolve()
        },
      }).catch(reject)
    })
  } finally {
    await consumer.disconnect()
  }
  return out
}

outputSinkSuite({
  // Concurrently: each read back waits for a consumer group to join.
  test: it.concurrent,
  describe,
  name: 'kafkaSink',
  factory: async () => {
    const { brokers } = kafkaService()
    return { sink: kafkaSink({ brokers }), read: (topic) => readTopic(brokers, topic) }
  },
})

describe('kafkaSink: the publisher\'s batches', () => {
  it('produces from an outbox batch what send() produces from the decoded records: partitions, keys, values, headers, order', async () => {
    const { brokers } = kafkaService()
    const sink = kafkaSink({ brokers })
    try {
      // Two topics in one batch, each compared: explicit partitions, null keys
      // (only with one: the default partitioner places a null key at random)
      // and values, a header of the handler's besides tidemark-id.
      const topics = { encoded: [randomName('sink-encoded-a'), randomName('sink-encoded-b')], decoded: [randomName('sink-decoded-a'), randomName('sink-decoded-b')] }
      const batch = (names: string[]): { batch: EncodedBatch; records: ReturnType<typeof decodeOutboxChunk>['records'] } => {
        const writer = new OutboxChunkWriter()
        for (let i = 0; i < 40; i++) {
          const headers = i % 3 === 0 ? { h: `h${i}` } : undefined
          writer.append(`tm1:j:words:0:${i}:0`, names[i % 7 === 6 ? 1 : 0]!, i % 10 === 9 ? i % 2 : -1, i % 20 === 19 ? null : `k${i % 5}`, i % 11 === 10 ? null : `v${i}`, headers && ['h'], headers, 'tm1:j:words:0')
        }
        const bytes = Buffer.from(writer.bytes())
        const encoded = new EncodedBatch()
        encoded.add(bytes, writer.starts(), 0, 40)
        return { batch: encoded, records: decodeOutboxChunk(bytes).records }
      }
      const encoded = batch(topics.encoded)
      await sink.sendEncoded!(encoded.batch)
      await sink.send(batch(topics.decoded).records)
      for (let t = 0; t < 2; t++) {
        const got = await readTopic(brokers, topics.encoded[t]!)
        const wanted = await readTopic(brokers, topics.decoded[t]!)
        const byPartition = (records: typeof got): object[] => [...records].sort((x, y) => x.partition - y.partition).map((r) => ({ ...r, headers: { ...r.headers } }))
        expect(got.length).toBe(encoded.records.filter((r) => r.topic === topics.encoded[t]).length)
        expect(byPartition(got)).toEqual(byPartition(wanted))
      }
    } finally {
      await sink.close()
    }
  })
})
