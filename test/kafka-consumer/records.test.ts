import { Kafka, logLevel, type KafkaMessage } from 'kafkajs'
import { describe, expect, it, onTestFinished } from 'vitest'
import { DEAD_LETTER_HEADERS, StatefulConsumer, type DecodeErrorPolicy, type StatefulConsumerOptions } from '../../connectors/kafka/index.js'
import { isTidemarkError } from '../../src/errors.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { committedThrough, consumerOptions, fold, openProducer, produceWords, readState, type Produced, type WordEvent } from './fixture.js'

/** A topic whose partition 0 holds 10 words, a record that is not JSON (offset 10) and 10 more words; partition 1 holds 20 words. */
async function poisoned(brokers: string[]): Promise<{ topic: string; good: Produced[]; poison: bigint }> {
  const { producer } = await openProducer(brokers)
  onTestFinished(() => producer.disconnect())
  const topic = randomName('kc-poison')
  const before = await produceWords(producer, topic, [0], 10)
  const [meta] = await producer.send({ topic, acks: -1, messages: [{ key: 'bad', value: 'not json {', partition: 0, headers: { origin: 'test' } }] })
  const after = (await produceWords(producer, topic, [0], 10, 100, 5)).map((r) => ({ ...r }))
  const other = await produceWords(producer, topic, [1], 20)
  return { topic, good: [...before, ...after, ...other], poison: BigInt(meta!.baseOffset!) }
}

function start(brokers: string[], topic: string, extra: Partial<StatefulConsumerOptions<WordEvent>>): StatefulConsumer<WordEvent> {
  const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job: randomName('job'), topics: [topic], stateDir: tempDir() }, extra))
  onTestFinished(async () => {
    await consumer.close()
  })
  return consumer
}

describe('StatefulConsumer: records that do not decode', () => {
  it("onDecodeError 'stop' (the default) halts the partition at the record's offset, with the records before it committed; other partitions go on", async () => {
    const { brokers } = kafkaService()
    const { topic, good, poison } = await poisoned(brokers)
    const consumer = start(brokers, topic, {})
    const failed = new Promise<unknown>((resolve) => consumer.on('partition-failed', (f) => resolve(f.error)))
    const otherDone = committedThrough([consumer], good.filter((r) => r.partition === 1))
    await consumer.start()
    const error = await failed
    await otherDone
    expect(isTidemarkError(error, 'TIDEMARK_DECODE_FAILED')).toBe(true)
    expect((error as { details: unknown }).details).toEqual({ topic, partition: 0, offset: poison })
    const p0 = consumer.partitions().find((p) => p.partition === 0)!
    expect(p0).toMatchObject({ state: 'failed', position: poison - 1n, counts: { applied: 10, skipped: 0, deadLettered: 0 } })
    expect(consumer.store(topic, 1)).toBeDefined()
    expect(await readState(consumer.store(topic, 1)!)).toEqual(fold(good.filter((r) => r.partition === 1)))
  })

  it("onDecodeError 'skip' goes on past the record and counts it (events and counts)", async () => {
    const { brokers } = kafkaService()
    const { topic, good, poison } = await poisoned(brokers)
    const consumer = start(brokers, topic, { onDecodeError: 'skip' })
    const skipped: bigint[] = []
    consumer.on('record-skipped', (s) => skipped.push(s.offset))
    const done = committedThrough([consumer], good)
    await consumer.start()
    await done
    expect(skipped).toEqual([poison])
    expect(consumer.counts()).toEqual({ applied: 40, skipped: 1, deadLettered: 0 })
    const p0 = consumer.partitions().find((p) => p.partition === 0)!
    expect(p0.position).toBe(20n)
    expect(await readState(consumer.store(topic, 0)!)).toEqual(fold(good.filter((r) => r.partition === 0)))
  })

  it('onDecodeError { deadLetter } produces the record to the dead-letter topic with its source coordinates in headers, then goes on', async () => {
    const { brokers } = kafkaService()
    const { topic, good, poison } = await poisoned(brokers)
    const deadLetter = randomName('kc-dlq')
    const policy: DecodeErrorPolicy = { deadLetter }
    const consumer = start(brokers, topic, { onDecodeError: policy })
    const done = committedThrough([consumer], good)
    await consumer.start()
    await done
    expect(consumer.counts()).toEqual({ applied: 40, skipped: 0, deadLettered: 1 })
    // Read the dead-letter topic back.
    const kafka = new Kafka({ brokers, clientId: 'dlq-reader', logLevel: logLevel.NOTHING })
    const reader = kafka.consumer({ groupId: randomName('dlq-reader'), maxWaitTimeInMs: 50 })
    onTestFinished(() => reader.disconnect())
    await reader.connect()
    await reader.subscribe({ topic: deadLetter, fromBeginning: true })
    const message = await new Promise<KafkaMessage>((resolve) => {
      void reader.run({ eachMessage: async ({ message: m }) => resolve(m) })
    })
    expect(message.value?.toString()).toBe('not json {')
    expect(message.key?.toString()).toBe('bad')
    const headers = Object.fromEntries(Object.entries(message.headers ?? {}).map(([k, v]) => [k, v?.toString()]))
    expect(headers).toMatchObject({
      origin: 'test',
      [DEAD_LETTER_HEADERS.topic]: topic,
      [DEAD_LETTER_HEADERS.partition]: '0',
      [DEAD_LETTER_HEADERS.offset]: String(poison),
    })
    expect(headers[DEAD_LETTER_HEADERS.error]).toMatch(/JSON/)
  })

  it('checks its options once, naming the field', () => {
    const base = consumerOptions({ brokers: ['127.0.0.1:9092'], job: 'j', topics: ['t'], stateDir: '/tmp/x' })
    expect(() => new StatefulConsumer({ ...base, onDecodeError: 'ignore' as never })).toThrow(/options\.onDecodeError/)
    expect(() => new StatefulConsumer({ ...base, onDecodeError: { deadLetter: 't' } })).toThrow(/must not be one of the topics/)
    expect(() => new StatefulConsumer({ ...base, startFrom: 'middle' as never })).toThrow(/options\.startFrom/)
    expect(() => new StatefulConsumer({ ...base, handoff: { snapshot: true } })).toThrow(/needs options\.snapshots/)
    expect(() => new StatefulConsumer({ ...base, batchSize: 0 })).toThrow(RangeError)
    expect(() => new StatefulConsumer({ ...base, topics: [] })).toThrow(/options\.topics/)
    expect(() => new StatefulConsumer({ ...base, typo: 1 } as never)).toThrow(/options\.typo/)
    expect(() => new StatefulConsumer({ ...base, handoff: { minEvents: -1 } })).toThrow(RangeError)
    expect(() => new StatefulConsumer({ ...base, handoff: { minEvent: 5 } as never })).toThrow(/options\.handoff\.minEvent is not/)
  })

  it('checks warm-up options and close() options, naming the field', async () => {
    const base = consumerOptions({ brokers: ['127.0.0.1:9092'], job: 'j', topics: ['t'], stateDir: '/tmp/x', snapshotRoot: tempDir() })
    const { snapshots: _, ...noSnapshots } = base
    expect(() => new StatefulConsumer({ ...noSnapshots, warmup: true })).toThrow(/options\.warmup needs options\.snapshots/)
    expect(() => new StatefulConsumer({ ...base, warmup: 'yes' as never })).toThrow(/options\.warmup must be/)
    expect(() => new StatefulConsumer({ ...base, warmup: { maxWarmups: 0 } })).toThrow(/options\.warmup\.maxWarmups/)
    expect(() => new StatefulConsumer({ ...base, warmup: { maxLag: 1 } as never })).toThrow(/options\.warmup\.maxLag is not/)
    expect(() => new StatefulConsumer({ ...base, warmup: true, partitionAssigners: [() => ({}) as never] })).toThrow(/default assignor/)
    expect(new StatefulConsumer({ ...base, warmup: true }).options.warmup).toEqual({ maxWarmups: 2, maxLagBytes: undefined, maxLagSnapshots: 1 })
    expect(new StatefulConsumer({ ...base, warmup: { maxLagBytes: 1000 } }).options.warmup).toEqual({ maxWarmups: 2, maxLagBytes: 1000, maxLagSnapshots: undefined })
    const consumer = new StatefulConsumer(base)
    expect(() => consumer.close({ leaveGroup: 'no' } as never)).toThrow(/options\.leaveGroup must be a boolean/)
    expect(() => consumer.close({ leave: false } as never)).toThrow(/options\.leave is not an option of close/)
    await consumer.close()
  })
})
