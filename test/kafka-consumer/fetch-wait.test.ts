import { createRequire } from 'node:module'
import { afterEach, describe, expect, it, onTestFinished, vi } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { tempDir } from '../helpers/tmp.js'
import { committedThrough, consumerOptions, FAST_GROUP, groupFixture, produceWords, type WordEvent } from './fixture.js'

afterEach(() => { vi.restoreAllMocks() })

const ConsumerGroup = createRequire(import.meta.url)('kafkajs/src/consumer/consumerGroup.js') as { prototype: { resume(this: unknown, topicPartitions: unknown): void } }

describe('StatefulConsumer: fetch wait', () => {
  // kafkajs sleeps its whole fetch wait (its default: 5000 ms) when every
  // assigned partition is paused, as they all are while a new member
  // restores them; so the first record after the restore came up to 5 s
  // late (seen as 4.6 s in `npm run bench -- rebalance`). The resume ends
  // that sleep now (connectors/kafka/kafkajs-fixes.ts, tested in
  // test/log/kafkajs-fixes.test.ts), and the consumer's default fetch wait,
  // 250 ms, bounds the other delay: a fetch in flight when it resumes.
  // Counted, not timed: which fetch waits were armed, and whether one that
  // was sleeping when a partition resumed ran to its end anyway.
  it('fetches the first records after its partitions are restored without sleeping out a fetch wait, with the default fetch wait', async () => {
    const { brokers, producer, topic, job } = await groupFixture('kc-wait')
    const produced = await produceWords(producer, topic, [0, 1, 2, 3], 20)
    // The group timings of the other tests, without their 50 ms fetch wait.
    const { maxWaitTimeInMs: _, ...group } = FAST_GROUP

    // A fetch wait is a timer of the fetch wait's length: kafkajs's own 5000, or the consumer's default 250.
    const armed: number[] = []
    const sleeping = new Set<{ fired: boolean }>()
    const realSetTimeout = globalThis.setTimeout // ok: kept to pass timers through while counting them
    vi.spyOn(globalThis, 'setTimeout').mockImplementation(((fn: (...a: unknown[]) => void, ms?: number, ...rest: unknown[]) => { // ok: counts kafkajs's fetch-wait timers, sleeps nothing
      if (ms !== 250 && ms !== 5000) return realSetTimeout(fn, ms, ...rest)
      armed.push(ms)
      const sleep = { fired: false }
      sleeping.add(sleep)
      const timer = realSetTimeout((...a: unknown[]) => {
        sleep.fired = true
        sleeping.delete(sleep)
        fn(...a)
      }, ms, ...rest)
      return timer
    }) as typeof setTimeout) // ok: the spy above
    // The sleeps in progress when a partition resumes: each must end then, not at its timer.
    const atResume: Array<{ fired: boolean }> = []
    const resume = ConsumerGroup.prototype.resume
    vi.spyOn(ConsumerGroup.prototype, 'resume').mockImplementation(function (this: unknown, topicPartitions: unknown) {
      atResume.push(...sleeping)
      sleeping.clear()
      resume.call(this, topicPartitions)
    })

    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir() }, { consumer: group }))
    onTestFinished(async () => { await consumer.close() })
    const done = committedThrough([consumer], produced)
    await consumer.start()
    await done
    await consumer.close()
    // Only the consumer's default was armed, never kafkajs's 5000 ...
    expect(armed.filter((ms) => ms !== 250)).toEqual([])
    // ... and no fetch that slept while the partitions were restored slept on after one resumed.
    expect(atResume.filter((s) => s.fired)).toEqual([])
  })
})
