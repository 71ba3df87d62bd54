// start() resolves after the first join, also when that join crashes and
// kafkajs's restart makes it (librdkafka's mock answers a racing SyncGroup
// with INVALID_REQUEST now and then; here the leader's assignor throws once,
// which crashes the join the same way). In the group suite: the restart's
// join waits about 10 s for the crashed join's member to leave the group.
import { PartitionAssigners, type PartitionAssigner } from 'kafkajs'
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer, type TopicPartition } from '../../../connectors/kafka/index.js'
import { tempDir } from '../../helpers/tmp.js'
import { consumerOptions, groupFixture, produceWords, type WordEvent } from '../fixture.js'

/** kafkajs's round-robin assignor whose assign() throws the first `failures` times. */
function failingAssigner(failures: number): { assigner: PartitionAssigner; calls: () => number } {
  let calls = 0
  const assigner: PartitionAssigner = (config) => {
    const inner = PartitionAssigners.roundRobin(config)
    return {
      ...inner,
      async assign(group) {
        calls++
        if (calls <= failures) throw new Error(`assign() failure ${calls} (injected)`)
        return inner.assign(group)
      },
    }
  }
  return { assigner, calls: () => calls }
}

describe('StatefulConsumer: start() and the first join', () => {
  it('a first join that crashes: start() resolves only after the restart joined and the assignment was emitted', async () => {
    const { brokers, producer, topic, job } = await groupFixture('kc-first-join')
    await produceWords(producer, topic, [0, 1, 2, 3], 8)
    const { assigner, calls } = failingAssigner(1)
    const c = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir() }, { partitionAssigners: [assigner] }))
    onTestFinished(async () => { await c.close() })
    const seen: string[] = []
    c.on('crash', ({ restart }) => seen.push(`crash restart=${restart}`))
    const assigned: TopicPartition[][] = []
    c.on('assignment', ({ partitions }) => { seen.push('assignment'); assigned.push(partitions) })
    await c.start()
    seen.push('started')
    expect(calls()).toBe(2)
    expect(seen).toEqual(['crash restart=true', 'assignment', 'started'])
    expect(assigned[0]!.map((tp) => tp.partition).sort()).toEqual([0, 1, 2, 3])
  })

  it('close() while start() waits for a join that keeps crashing: both resolve, and nothing joins afterwards', async () => {
    const { brokers, producer, topic, job } = await groupFixture('kc-first-join-close')
    await produceWords(producer, topic, [0, 1], 4)
    const { assigner } = failingAssigner(Number.POSITIVE_INFINITY)
    const c = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir() }, { partitionAssigners: [assigner] }))
    const crashed = new Promise<boolean>((resolve) => c.on('crash', ({ restart }) => resolve(restart)))
    let assignments = 0
    c.on('assignment', () => { assignments++ })
    const starting = c.start()
    expect(await crashed).toBe(true)
    await c.close()
    await starting
    expect(assignments).toBe(0)
    expect(c.partitions()).toEqual([])
  })
})
