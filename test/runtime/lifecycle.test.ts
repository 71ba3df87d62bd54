// The lifecycle contract (lifecycle.suite.ts) through both runtimes.
import { join } from 'node:path'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { openFileLog, PartitionProcessor, type TidemarkError } from '../../src/index.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { consumerOptions, openProducer, readState, states, wordHandler, type WordEvent } from '../kafka-consumer/fixture.js'
import { lifecycleSuite, type LifecycleRunner } from './lifecycle.suite.js'

/** Resolves when `reached()` holds, looked at after each event `on` subscribes it to. */
function until(on: (check: () => void) => () => void, reached: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    const off = on(check)
    function check(): void {
      if (!reached()) return
      off()
      resolve()
    }
    check()
  })
}

lifecycleSuite({
  name: 'PartitionProcessor on the file log',
  async env() {
    const log = await openFileLog(join(tempDir('tidemark-lifecycle-log-'), 'log'))
    return {
      key: '0',
      positionReadsAtStart: 0,
      async append(values) {
        const out = []
        for (const value of values) out.push({ offset: await log.append(Buffer.from(JSON.stringify(value))), value })
        return out
      },
      open({ job, stateDir, store, handler }): LifecycleRunner {
        const processor = new PartitionProcessor<WordEvent>({
          job, log, topic: 'words', partition: 0, path: join(stateDir, 'p0'), states,
          handler: (tx, event, ctx) => {
            handler?.(event)
            wordHandler(tx, { value: event, offset: ctx.offset })
          },
          batchSize: 20,
          pollIntervalMs: 5,
          snapshots: { store, onClose: true, schedule: { intervalMs: 0, everyEvents: 0 } },
          // Renewed every second: a claim taken by another owner is noticed at the next renewal.
          ownership: { leaseMs: 3000 },
        })
        const abort = new AbortController()
        let running: Promise<void> | undefined
        return {
          async start() {
            const started = await processor.start()
            running = processor.run(abort.signal)
            running.catch(() => undefined)
            return started
          },
          appliedThrough: (offset) => until((check) => {
            processor.on('commit', check)
            return () => processor.off('commit', check)
          }, () => (processor.offset ?? -1n) >= offset),
          state: () => readState(processor.store),
          stopped: () => running!.then(() => { throw new Error('run() ended without a failure') }, (error: unknown) => error as TidemarkError),
          async close() {
            abort.abort()
            await running?.catch(() => undefined)
            await processor.close()
          },
        }
      },
      close: () => log.close(),
    }
  },
})

lifecycleSuite({
  name: 'StatefulConsumer on Kafka',
  async env() {
    const { brokers } = kafkaService()
    const { producer } = await openProducer(brokers)
    const topic = randomName('lifecycle')
    return {
      key: `${topic}-0`,
      // LocalState.findOnDisk: the member's join advertises the stores it holds, with their positions.
      positionReadsAtStart: 1,
      async append(values) {
        const [meta] = await producer.send({ topic, acks: -1, messages: values.map((v) => ({ key: v.word, value: JSON.stringify(v), partition: 0 })) })
        const base = BigInt(meta!.baseOffset!)
        return values.map((value, i) => ({ offset: base + BigInt(i), value }))
      },
      open({ job, stateDir, store, handler }): LifecycleRunner {
        const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics: [topic], stateDir }, {
          snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0 } },
          handler: (tx, record) => {
            if (record.partition === 0 && record.value !== null) handler?.(record.value)
            wordHandler(tx, record)
          },
          startFrom: 'earliest',
          batchSize: 20,
        }))
        const position = (): bigint => consumer.partitions().find((p) => p.partition === 0)?.position ?? -1n
        return {
          async start() {
            const started = new Promise<{ source: string; epoch: number }>((resolve) => {
              consumer.on('partition-started', (s) => { if (s.partition === 0) resolve(s) })
            })
            await consumer.start()
            return started
          },
          appliedThrough: (offset) => until((check) => {
            consumer.on('commit', check)
            return () => consumer.off('commit', check)
          }, () => position() >= offset),
          async state() {
            const store = consumer.store(topic, 0)
            if (store === undefined) throw new Error('partition 0 is not running here')
            return readState(store)
          },
          stopped: () => new Promise((resolve) => {
            consumer.on('partition-failed', (f) => { if (f.partition === 0) resolve(f.error) })
          }),
          async close() {
            await consumer.close()
          },
        }
      },
      close: () => producer.disconnect(),
    }
  },
})
