import { createRequire } from 'node:module'
import { afterEach, describe, expect, it, onTestFinished, vi } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { tempDir } from '../helpers/tmp.js'
import { committedThrough, consumerOptions, FAST_GROUP, groupFixture, produceWords, type WordEvent } from './fixture.js'

afterEach(() => { vi.restoreAllMocks() })

interface FetchRequest { maxWaitTime: number; topics: Array<{ topic: string; partitions: Array<{ partition: number }> }> }
const Broker = createRequire(import.meta.url)('kafkajs/src/broker/index.js') as { prototype: { fetch(this: unknown, request: FetchRequest): Promise<unknown> } }

describe('StatefulConsumer: fetch wait', () => {
  // A new member's partitions are all paused while their state is restored.
  // kafkajs's consumer slept its fetch wait in a loop meanwhile (its default:
  // 5000 ms), so the first records after a restore came up to that late.
  // The member's fetcher (connectors/kafka/fetch/) runs no fetch while it
  // has nothing to fetch: the first partition that resumes is fetched at
  // once, and every Fetch waits at most the consumer's default, 250 ms.
  // Counted, not timed: which Fetch requests went out, and when.
  it('fetches nothing while its partitions are restored, then at once, with the default fetch wait', async () => {
    const { brokers, producer, topic, job } = await groupFixture('kc-wait')
    const produced = await produceWords(producer, topic, [0, 1, 2, 3], 20)
    // The group timings of the other tests, without their 50 ms fetch wait.
    const { maxWaitTimeInMs: _, ...group } = FAST_GROUP

    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir() }, { consumer: group }))
    onTestFinished(async () => { await consumer.close() })
    // Each Fetch of the test's topic, in order, with how many partitions had started when it went out.
    let started = 0
    consumer.on('partition-started', () => { started++ })
    const fetches: Array<{ maxWaitTime: number; startedBefore: number }> = []
    const fetch = Broker.prototype.fetch
    vi.spyOn(Broker.prototype, 'fetch').mockImplementation(function (this: unknown, request: FetchRequest) {
      if (request.topics.some((t) => t.topic === topic)) fetches.push({ maxWaitTime: request.maxWaitTime, startedBefore: started })
      return fetch.call(this, request)
    })
    const done = committedThrough([consumer], produced)
    await consumer.start()
    await done
    await consumer.close()
    expect(fetches.length).toBeGreaterThan(0)
    // Only the consumer's default wait, never kafkajs's 5000 ...
    expect(fetches.filter((f) => f.maxWaitTime !== 250)).toEqual([])
    // ... and no Fetch of the topic before a partition of it was restored: none was in flight to wait for.
    expect(fetches[0]!.startedBefore).toBeGreaterThan(0)
  })
})
