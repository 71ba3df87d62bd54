import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { METRICS_CHANNELS } from '../../src/index.js'
import type { OutboxMessage } from '../../src/metrics/channels.js'
import { fileLogSink, type OutputSink } from '../../src/outputs/index.js'
import { consumerOptions, openProducer, produceWords, type WordEvent } from '../kafka-consumer/fixture.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { counter, wordLog } from './fixtures.js'

/** Every message of the outbox channel while the current test runs. */
function outboxMessages(): OutboxMessage[] {
  const messages: OutboxMessage[] = []
  const listener = (m: unknown): void => { messages.push(m as OutboxMessage) }
  subscribe(METRICS_CHANNELS.outbox, listener)
  onTestFinished(() => { unsubscribe(METRICS_CHANNELS.outbox, listener) })
  return messages
}

describe('outputs: tidemark_outbox_depth', () => {
  it('PartitionProcessor publishes the outbox depth after each commit and each delivery, and at start what a restart found', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 120)
    const stalled: OutputSink = { name: 'stalled', send: () => new Promise(() => undefined), close: async () => undefined }
    const messages = outboxMessages()

    // Nothing delivered: the depth grows by a batch (50 events, one emit each) per commit.
    const p = counter(dir, log, { sink: stalled, closeTimeoutMs: 1 }, { snapshots: undefined })
    await p.start()
    await p.catchUp()
    await p.close()
    const labels = { job: 'counter', topic: 'words', partition: 0 }
    expect(messages).toEqual([0, 50, 100, 120].map((depth) => ({ ...labels, depth })))

    // A restart: the depth it found first, then down to 0 as delivery goes on.
    messages.length = 0
    const sink = fileLogSink({ dir: join(dir, 'out'), fileLog: { sync: false } })
    const q = counter(dir, log, { sink, maxBatchRecords: 40 }, { snapshots: undefined })
    await q.start()
    await q.flushOutputs()
    await q.close()
    await sink.close()
    await log.close()
    expect(messages[0]).toEqual({ ...labels, depth: 120 })
    expect(messages.at(-1)).toEqual({ ...labels, depth: 0 })
    expect(messages.map((m) => m.depth)).toEqual([120, 80, 40, 0])
  })

  it('StatefulConsumer publishes the outbox depth of each partition, down to 0 once delivered', async () => {
    const { brokers } = kafkaService()
    const { producer } = await openProducer(brokers)
    onTestFinished(() => producer.disconnect())
    const topic = randomName('outbox-depth')
    await produceWords(producer, topic, [0], 30)
    const messages = outboxMessages()
    const job = randomName('job')
    const sink = fileLogSink({ dir: tempDir() })
    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir() }, {
      outputs: { sink },
      handler: (_tx, record, ctx) => { ctx.emit({ topic: 'counts', key: record.key, value: '1' }) },
    }))
    onTestFinished(async () => {
      await consumer.close()
      await sink.close()
    })
    const delivered = new Promise<void>((resolve) => {
      let n = 0
      consumer.on('outputs', ({ event }) => {
        if (event.type === 'delivered' && (n += event.records) === 30) resolve()
      })
    })
    await consumer.start()
    await delivered
    // The topic's other partitions (no records) publish their depth 0 at attach.
    const mine = messages.filter((m) => m.job === job && m.topic === topic && m.partition === 0)
    expect(mine.length).toBeGreaterThan(1)
    expect(Math.max(...mine.map((m) => m.depth))).toBeGreaterThan(0)
    expect(mine.at(-1)!.depth).toBe(0)
  })
})
