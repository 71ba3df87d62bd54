import { join } from 'node:path'
import { Kafka, logLevel } from 'kafkajs'
import { expect, it } from 'vitest'
import { openKafkaLog } from '../../connectors/kafka/index.js'
import { fileLogSink } from '../../src/index.js'
import { replayJob, type ReplayJobOptions } from '../../src/replay/index.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { fold, handler, saleAt, states, type Sale } from './fixtures/operator.js'
import { digestOf, distinct, outputs, store } from './helpers.js'

const EVENTS = 1000

it('replays a Kafka partition: stopped and resumed, the same outputs and digest as a run in one go', async () => {
  const root = tempDir()
  const topic = randomName('replay-src')
  const { brokers } = kafkaService()
  // Plain records of another producer, as a source topic has them.
  const kafka = new Kafka({ brokers, logLevel: logLevel.NOTHING })
  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic, acks: -1, messages: Array.from({ length: EVENTS }, (_, i) => ({ partition: 0, value: JSON.stringify(saleAt(i)) })) })
  await producer.disconnect()
  // librdkafka's mock answers a fetch at the tail only when its wait is over.
  const log = await openKafkaLog({ brokers, topic, partition: 0, fetchWaitMs: 5 })
  try {
    const options = async (env: string): Promise<ReplayJobOptions<Sale>> => ({
      job: 'kafka-whatif', source: { log, topic, partition: 0, from: 200n, to: BigInt(EVENTS - 1) }, start: 'empty',
      handler, states, output: fileLogSink({ dir: join(root, env, 'out'), fileLog: { sync: false } }),
      path: join(root, env, 'store'), snapshots: await store(join(root, env, 'snapshots')), batchSize: 100,
    })

    const stop = new AbortController()
    const stopped = await options('b')
    await expect(replayJob({ ...stopped, signal: stop.signal, onProgress: (p) => { if (p.phase === 'commit' && p.offset >= 500n) stop.abort(new Error('stopped')) } })).rejects.toThrow('stopped')
    await stopped.output!.close()
    const resumedOptions = await options('b')
    const resumed = await replayJob(resumedOptions)
    await resumedOptions.output!.close()
    const onceOptions = await options('a')
    const once = await replayJob(onceOptions)
    await onceOptions.output!.close()

    expect(resumed).toMatchObject({ source: 'local', offset: BigInt(EVENTS - 1) })
    expect(resumed.events).toBeLessThan(EVENTS - 200)
    expect(once).toMatchObject({ source: 'new', events: EVENTS - 200, from: 200n })
    expect(resumed.digest).toBe(once.digest)
    expect(once.digest).toBe(await digestOf(fold(200, EVENTS - 1)))
    const a = await outputs(join(root, 'a', 'out'))
    expect(a).toHaveLength(EVENTS - 200)
    expect(a[0]!.id).toBe(`tm1:kafka-whatif:${topic}:0:200:0`)
    expect(distinct(await outputs(join(root, 'b', 'out')))).toEqual(a)
  } finally {
    await log.close()
  }
})
