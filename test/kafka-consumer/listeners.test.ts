import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { tempDir } from '../helpers/tmp.js'
import { committedThrough, consumerOptions, groupFixture, produceWords, type WordEvent } from './fixture.js'

describe('StatefulConsumer: listeners', () => {
  it('a listener that throws does not stop the consumer: every record is applied, every partition keeps running', async () => {
    const { brokers, producer, topic, job, snapshotRoot } = await groupFixture('kc-listen')
    const produced = await produceWords(producer, topic, [0, 1], 200)
    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir(), snapshotRoot }))
    onTestFinished(async () => { await consumer.close() })
    const done = committedThrough([consumer], produced)
    // After committedThrough's listener: a throw stops the listeners after it, not those before.
    const thrown: string[] = []
    for (const event of ['assignment', 'partition-started', 'commit', 'snapshot', 'snapshotter', 'restore'] as const) {
      consumer.on(event, () => {
        thrown.push(event)
        throw new Error(`the ${event} listener's bug`)
      })
    }
    const failed: unknown[] = []
    consumer.on('partition-failed', (f) => failed.push(f))
    await consumer.start()
    await done
    expect(failed).toEqual([])
    for (const event of ['assignment', 'partition-started', 'commit']) expect(thrown).toContain(event)
    expect(consumer.counts()).toEqual({ applied: produced.length, skipped: 0, deadLettered: 0 })
    // Partitions with no records may still be starting; none failed or stopped.
    const states = consumer.partitions().map((p) => p.state)
    expect(states.length).toBeGreaterThanOrEqual(2)
    expect(states.filter((s) => s !== 'running' && s !== 'starting')).toEqual([])
  })
})
