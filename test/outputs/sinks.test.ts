// The OutputSink suite (tidemark/testing) against both of Tidemark's sinks,
// each read back where it delivered: the file log of each topic, the Kafka topic.
import { join } from 'node:path'
import { Kafka, logLevel } from 'kafkajs'
import { describe, it } from 'vitest'
import { kafkaSink } from '../../connectors/kafka/index.js'
import { decodeOutboxRecord, fileLogSink, openFileLog, RECORD_ID_HEADER } from '../../src/index.js'
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
async function readTopic(brokers: string[], topic: string): Promise<DeliveredRecord[]> {
  const kafka = new Kafka({ brokers, clientId: 'sink-suite-reader', logLevel: logLevel.NOTHING })
  const admin = kafka.admin()
  await admin.connect()
  const ends = new Map<number, bigint>()
  try {
    for (const p of await admin.fetchTopicOffsets(topic)) if (BigInt(p.high) > BigInt(p.low)) ends.set(p.partition, BigInt(p.high))
  } finally {
    await admin.disconnect()
  }
  const out: DeliveredRecord[] = []
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
          out.push({ id: headers[RECORD_ID_HEADER]?.toString() ?? '', key: message.key, value: message.value, headers })
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
