// The fetcher's watermark lookups (connectors/kafka/fetch/watermarks.ts):
// the partitions asked for in one turn share one ListOffsets pair, a call
// is never answered from a request sent before it, and a partition the
// topic lacks fails alone. A kafkajs cluster on the Kafka mock, with its
// fetchTopicsOffset wrapped to count the requests.
import { describe, expect, it, onTestFinished } from 'vitest'
import { kafkajsInternals, type KafkajsCluster } from '../../connectors/kafka/fetch/kafkajs-cluster.js'
import { WatermarkLookup } from '../../connectors/kafka/fetch/watermarks.js'
import { groupFixture, produceWords } from './fixture.js'

async function lookupOn(kafka: Parameters<typeof kafkajsInternals>[0]): Promise<{ lookup: WatermarkLookup; requests: number[] }> {
  const internals = kafkajsInternals(kafka)
  if ('missing' in internals) throw new Error(internals.missing)
  const cluster: KafkajsCluster = internals.cluster()
  await cluster.connect()
  onTestFinished(() => cluster.disconnect())
  const requests: number[] = []
  const fetch = cluster.fetchTopicsOffset.bind(cluster)
  cluster.fetchTopicsOffset = (topics) => {
    requests.push(topics.reduce((n, t) => n + t.partitions.length, 0))
    return fetch(topics)
  }
  const lookup = new WatermarkLookup({
    ready: async (topics) => {
      await cluster.addMultipleTargetTopics([...topics])
      await cluster.refreshMetadataIfNecessary()
    },
    cluster: () => cluster,
  })
  return { lookup, requests }
}

describe('WatermarkLookup', () => {
  it('answers the partitions of one turn with one request pair, and a later call with a new one', async () => {
    const { kafka, producer, topic } = await groupFixture('kc-watermarks')
    const other = `${topic}-other`
    await produceWords(producer, topic, [0, 1, 2, 3], 3)
    await produceWords(producer, other, [0, 1, 2, 3], 5)
    const { lookup, requests } = await lookupOn(kafka)
    const all = await Promise.all([topic, other].flatMap((t) => [0, 1, 2, 3].map((p) => lookup.get(t, p))))
    expect(requests).toEqual([8, 8])
    expect(all).toEqual([...[0, 1, 2, 3].map(() => ({ low: 0n, high: 3n })), ...[0, 1, 2, 3].map(() => ({ low: 0n, high: 5n }))])

    await produceWords(producer, topic, [1], 2, 3)
    expect(await lookup.get(topic, 1)).toEqual({ low: 0n, high: 5n })
    expect(requests).toEqual([8, 8, 1, 1])
  })

  it('fails a partition the topic lacks with TIDEMARK_LOG_UNAVAILABLE, and answers the others of its turn', async () => {
    const { kafka, producer, topic } = await groupFixture('kc-watermarks')
    await produceWords(producer, topic, [0, 1, 2, 3], 2)
    const { lookup } = await lookupOn(kafka)
    const [known, missing] = await Promise.allSettled([lookup.get(topic, 0), lookup.get(topic, 9)])
    expect(known).toEqual({ status: 'fulfilled', value: { low: 0n, high: 2n } })
    expect(missing.status).toBe('rejected')
    expect((missing as PromiseRejectedResult).reason).toMatchObject({ code: 'TIDEMARK_LOG_UNAVAILABLE' })
  })
})
