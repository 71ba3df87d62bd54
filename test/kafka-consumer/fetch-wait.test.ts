import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { committedThrough, consumerOptions, FAST_GROUP, openProducer, produceWords, type WordEvent } from './fixture.js'

describe('StatefulConsumer: fetch wait', () => {
  // kafkajs sleeps its whole fetch wait (its default: 5000 ms) when every
  // assigned partition is paused, as they all are while a new member
  // restores them; so the first record after the restore came up to 5 s
  // late (seen as 4.6 s in `npm run bench -- rebalance`). The resume ends
  // that sleep now (connectors/kafka/kafkajs-fixes.ts, tested in
  // test/log/kafkajs-fixes.test.ts), and the consumer's default fetch wait,
  // 250 ms, bounds the other delay: a fetch in flight when it resumes.
  it('fetches the first records soon after its partitions are restored, with the default fetch wait', async () => {
    const { brokers } = kafkaService()
    const { producer } = await openProducer(brokers)
    onTestFinished(() => producer.disconnect())
    const topic = randomName('kc-wait')
    const produced = await produceWords(producer, topic, [0, 1, 2, 3], 20)
    // The group timings of the other tests, without their 50 ms fetch wait.
    const { maxWaitTimeInMs: _, ...group } = FAST_GROUP
    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job: randomName('job'), topics: [topic], stateDir: tempDir() }, { consumer: group }))
    onTestFinished(async () => { await consumer.close() })
    let lastStarted = 0
    let firstCommit: number | undefined
    consumer.on('partition-started', () => { lastStarted = performance.now() })
    consumer.on('commit', () => { firstCommit ??= performance.now() })
    const done = committedThrough([consumer], produced)
    await consumer.start()
    await done
    expect(firstCommit).toBeDefined()
    // 5000 ms without the default; 250 ms with it, and room for a slow machine.
    expect(firstCommit! - lastStarted).toBeLessThan(3000)
  })
})
