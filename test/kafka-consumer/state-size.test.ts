import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { resolveConsumerOptions } from '../../connectors/kafka/consumer/options.js'
import { METRICS_CHANNELS, type StateSizeMessage } from '../../src/index.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { committedThrough, consumerOptions, openProducer, produceWords, type WordEvent } from './fixture.js'

describe('StatefulConsumer: a partition\'s state size and its soft limit', () => {
  it('each partition publishes its state size, and one above stateSizeLimit reports it once (event and warn line) and goes on', async () => {
    const { brokers } = kafkaService()
    const { producer } = await openProducer(brokers)
    onTestFinished(() => producer.disconnect())
    const topic = randomName('kc-size')
    const job = randomName('job')
    const produced = await produceWords(producer, topic, [0, 1, 2, 3], 50)
    const messages: StateSizeMessage[] = []
    const onMessage = (m: unknown): void => { if ((m as StateSizeMessage).job === job) messages.push(m as StateSizeMessage) }
    subscribe(METRICS_CHANNELS.stateSize, onMessage)
    onTestFinished(() => { unsubscribe(METRICS_CHANNELS.stateSize, onMessage) })
    const warned: Array<Record<string, unknown>> = []
    const logger = {
      debug: () => undefined, info: () => undefined, error: () => undefined,
      warn: (fields: Record<string, unknown>, message: string) => { if (message.includes('soft limit')) warned.push(fields) },
    }
    // Every store holds more than a byte from its start: each partition crosses the limit as it starts.
    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir() }, { stateSizeLimit: 1, logger }))
    onTestFinished(async () => { await consumer.close() })
    const exceeded: Array<{ topic: string; partition: number; bytes: number; limit: number }> = []
    consumer.on('state-size-exceeded', (e) => exceeded.push(e))
    const done = committedThrough([consumer], produced)
    await consumer.start()
    await done
    await consumer.close()

    expect(exceeded.map((e) => e.partition).sort()).toEqual([0, 1, 2, 3])
    for (const e of exceeded) {
      expect(e).toMatchObject({ topic, limit: 1 })
      expect(e.bytes).toBeGreaterThan(1)
    }
    expect(warned.map((w) => w.partition).sort()).toEqual([0, 1, 2, 3])
    expect(warned[0]).toMatchObject({ job, topic, limit: 1 })
    // The gauge's labels: the source partition, as the commits' series have them.
    expect(new Set(messages.map((m) => `${m.topic}/${m.partition}`))).toEqual(new Set([0, 1, 2, 3].map((p) => `${topic}/${p}`)))
    expect(messages.every((m) => m.bytes > 0 && m.limit === 1)).toBe(true)
  })

  it('stateSizeLimit is a positive safe integer of bytes: anything else is refused with the option and the value named', () => {
    const base = { job: 'j', brokers: ['127.0.0.1:1'], topics: ['t'], stateDir: tempDir(), states: [], handler: () => undefined }
    for (const bad of [0, -5, 0.5, Number.NaN, 2 ** 53]) {
      expect(() => resolveConsumerOptions({ ...base, stateSizeLimit: bad }), String(bad)).toThrow(new RangeError(`options.stateSizeLimit must be a positive safe integer (bytes), got ${bad}`))
    }
    expect(() => resolveConsumerOptions({ ...base, stateSizeLimit: null as never })).toThrow(new TypeError('options.stateSizeLimit must be a number of bytes, got null'))
    expect(resolveConsumerOptions({ ...base, stateSizeLimit: 2 ** 30 }).stateSizeLimit).toBe(2 ** 30)
    expect(resolveConsumerOptions(base).stateSizeLimit).toBeUndefined()
  })
})
