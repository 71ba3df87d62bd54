import { connect, type Socket } from 'node:net'
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { byPartition, committedThrough, consumerOptions, fold, openProducer, produceWords, snapshotState, type WordEvent } from './fixture.js'

describe('StatefulConsumer: one member', () => {
  it('applies every record of 8 partitions (two topics) exactly once, with one group member and connections that do not grow with partitions', async () => {
    const { brokers } = kafkaService()
    const { kafka, producer } = await openProducer(brokers)
    onTestFinished(() => producer.disconnect())
    const topics = [randomName('kc-a'), randomName('kc-b')]
    const job = randomName('job')
    const produced = [
      ...(await produceWords(producer, topics[0]!, [0, 1, 2, 3], 300)),
      ...(await produceWords(producer, topics[1]!, [0, 1, 2, 3], 200)),
    ]
    const snapshotRoot = tempDir()
    // Counts the sockets kafkajs opens for this consumer.
    let sockets = 0
    const socketFactory = ({ host, port, onConnect }: { host: string; port: number; onConnect: () => void }): Socket => {
      sockets++
      const socket = connect({ host, port }, onConnect)
      socket.setKeepAlive(true, 60_000)
      return socket
    }
    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics, stateDir: tempDir(), snapshotRoot }, { kafka: { socketFactory } }))
    onTestFinished(async () => { await consumer.close() })
    const started: string[] = []
    const assignments: number[] = []
    consumer.on('assignment', (a) => assignments.push(a.partitions.length))
    consumer.on('partition-started', (s) => started.push(`${s.topic}-${s.partition}:${s.source}:${s.fetchFrom}`))
    const done = committedThrough([consumer], produced)
    await consumer.start()
    await done
    // More records while it runs, and a tombstone (null value) that reaches the handler as null.
    const more = await produceWords(producer, topics[0]!, [2], 50, 25, 3)
    const [tomb] = await producer.send({ topic: topics[0]!, acks: -1, messages: [{ key: 'gone', value: null, partition: 1 }] })
    const tombstone = { topic: topics[0]!, partition: 1, offset: BigInt(tomb!.baseOffset!), value: null }
    await committedThrough([consumer], [...more, tombstone])

    expect(started.sort()).toEqual([...topics.flatMap((t) => [0, 1, 2, 3].map((p) => `${t}-${p}:empty:0`))].sort())
    const admin = kafka.admin()
    await admin.connect()
    onTestFinished(() => admin.disconnect())
    // One group member holds all 8 partitions (the mock has no DescribeGroups;
    // kafkajs's GROUP_JOIN, which the assignment event reports, says it).
    expect(assignments).toEqual([8])
    expect(consumer.memberId).toMatch(/./)
    // A consumer's connections: the seed broker and the broker (+ coordinator) it
    // fetches from, and the admin's; none per partition.
    expect(sockets).toBeLessThanOrEqual(4)
    expect(consumer.counts()).toEqual({ applied: produced.length + more.length + 1, skipped: 0, deadLettered: 0 })
    // The group's offsets follow the stores' commits (for lag tools).
    const offsets = await admin.fetchOffsets({ groupId: `tidemark-${job}`, topics: [topics[1]!] })
    expect(offsets[0]!.partitions.map((p) => p.offset).sort()).toEqual(['200', '200', '200', '200'])

    const closed = await consumer.close()
    expect(closed.partitions).toHaveLength(8)
    expect(closed.partitions.every((p) => p.reason === 'shutdown' && p.handoff !== undefined)).toBe(true)
    // Every partition's hand-off snapshot holds the independent fold of its records.
    const store = new FsSnapshotStore({ root: snapshotRoot })
    const restoreDir = tempDir()
    for (const [key, records] of byPartition([...produced, ...more, tombstone])) {
      const { topic, partition } = records[0]!
      const { state, position } = await snapshotState(store, job, topic, partition, restoreDir)
      expect(position, key).toBe(records.at(-1)!.offset)
      expect(state, key).toEqual(fold(records))
    }
  })

  it('serves 32 partitions (eight topics) with one group member and the same few connections', async () => {
    const { brokers } = kafkaService()
    const { producer } = await openProducer(brokers)
    onTestFinished(() => producer.disconnect())
    const topics = Array.from({ length: 8 }, (_, i) => randomName(`kc-${i}`))
    const job = randomName('job')
    const produced = (await Promise.all(topics.map((topic) => produceWords(producer, topic, [0, 1, 2, 3], 40)))).flat()
    let sockets = 0
    const socketFactory = ({ host, port, onConnect }: { host: string; port: number; onConnect: () => void }): Socket => {
      sockets++
      return connect({ host, port }, onConnect)
    }
    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics, stateDir: tempDir(), snapshotRoot: tempDir() }, { kafka: { socketFactory } }))
    onTestFinished(async () => { await consumer.close() })
    const assignments: number[] = []
    consumer.on('assignment', (a) => assignments.push(a.partitions.length))
    const done = committedThrough([consumer], produced)
    await consumer.start()
    await done
    expect(assignments).toEqual([32])
    expect(consumer.partitions()).toHaveLength(32)
    // The same bound as with 8 partitions: connections do not depend on the partition count.
    expect(sockets).toBeLessThanOrEqual(4)
    expect(consumer.counts().applied).toBe(produced.length)
    const closed = await consumer.close()
    expect(closed.partitions).toHaveLength(32)
  })
})
