// A partition seeked while its broker's round of batches is being handled
// (connectors/kafka/fetch/partition-fetcher.ts): it is fetched on its own
// at once, and its batch runs ahead of the round's batches that wait for a
// slot. Before, it waited for the whole round: at hundreds of partitions a
// partition just restored waited through one or two rounds. Ordered, not
// timed: a batch of the round is held until the fresh partition's batch
// came, which without the change never comes (the test then times out).
import { createRequire } from 'node:module'
import type { Kafka } from 'kafkajs'
import { afterEach, describe, expect, it, onTestFinished, vi } from 'vitest'
import { PartitionFetcher, type FetchedBatch } from '../../connectors/kafka/fetch/partition-fetcher.js'
import { groupFixture, produceWords } from './fixture.js'

afterEach(() => { vi.restoreAllMocks() })

interface FetchRequest { topics: Array<{ topic: string; partitions: Array<{ partition: number }> }> }
const Broker = createRequire(import.meta.url)('kafkajs/src/broker/index.js') as { prototype: { fetch(this: unknown, request: FetchRequest): Promise<unknown> } }

/** A promise and the function that resolves it. */
function signal(): { promise: Promise<void>; fire(): void } {
  let fire!: () => void
  const promise = new Promise<void>((resolve) => { fire = resolve })
  return { promise, fire }
}

async function fetcherOn(kafka: Kafka, concurrency: number, handle: (batch: FetchedBatch) => Promise<void>): Promise<PartitionFetcher> {
  const failures: unknown[] = []
  const fetcher = new PartitionFetcher({
    kafka, maxWaitTimeInMs: 100, maxBytesPerPartition: 1_048_576, concurrency, handle,
    outOfRange: (tp) => { failures.push(new Error(`out of range: ${tp.topic}/${tp.partition}`)) },
    fetchFailed: (error) => { failures.push(error) },
  })
  onTestFinished(async () => {
    await fetcher.stop()
    expect(failures).toEqual([])
  })
  return fetcher
}

describe('PartitionFetcher: a partition seeked during a round', () => {
  it('is fetched at once, not after the round\'s batches', async () => {
    const { kafka, producer, topic } = await groupFixture('kc-fresh')
    await produceWords(producer, topic, [0, 1], 5)
    const handled: number[] = []
    const oneCame = signal()
    const zeroHandling = signal()
    const fetcher = await fetcherOn(kafka, 2, async (batch) => {
      if (batch.partition === 0 && !handled.includes(0)) {
        zeroHandling.fire()
        // Partition 1 is seeked only now, while its broker's round (this batch) is handled.
        await oneCame.promise
      }
      if (batch.partition === 1) oneCame.fire()
      handled.push(batch.partition)
    })
    await fetcher.connect([topic])
    fetcher.seek({ topic, partition: 0 }, 0n)
    await zeroHandling.promise
    fetcher.seek({ topic, partition: 1 }, 0n)
    await oneCame.promise
    expect(handled.slice(0, 2)).toEqual([1, 0])
  })

  it('has its batch handled ahead of the round\'s batches waiting for a slot', async () => {
    const { kafka, producer, topic } = await groupFixture('kc-fresh')
    await produceWords(producer, topic, [0, 1, 2, 3], 5)
    const handled: number[] = []
    const allFour = signal()
    const roundHandling = signal()
    // Partition 1's own Fetch answered: its batch now waits for the one slot, as do 2's and 3's.
    const oneFetched = signal()
    const fetch = Broker.prototype.fetch
    vi.spyOn(Broker.prototype, 'fetch').mockImplementation(async function (this: unknown, request: FetchRequest) {
      const response = await fetch.call(this, request)
      const asked = request.topics.filter((t) => t.topic === topic).flatMap((t) => t.partitions.map((p) => p.partition))
      if (asked.length === 1 && asked[0] === 1) setImmediate(() => oneFetched.fire())
      return response
    })
    // The round's first batch (the broker answers in an order of its own) holds the one slot until then.
    let holding = false
    const fetcher = await fetcherOn(kafka, 1, async (batch) => {
      if (!holding) {
        holding = true
        roundHandling.fire()
        await oneFetched.promise
      }
      handled.push(batch.partition)
      if (handled.length === 4) allFour.fire()
    })
    await fetcher.connect([topic])
    for (const partition of [0, 2, 3]) fetcher.seek({ topic, partition }, 0n)
    await roundHandling.promise
    fetcher.seek({ topic, partition: 1 }, 0n)
    await allFour.promise
    // Right after the batch that held the slot, before the round's other two.
    expect(handled[1]).toBe(1)
    expect([...handled].sort()).toEqual([0, 1, 2, 3])
  })
})
