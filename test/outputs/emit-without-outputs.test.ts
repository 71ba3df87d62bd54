import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { PartitionProcessor } from '../../src/index.js'
import { consumerOptions, openProducer, produceWords, type WordEvent } from '../kafka-consumer/fixture.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { counts, wordLog } from './fixtures.js'

const NOT_SET = /options\.outputs is not set/

/** The error a handler's ctx.emit() threw, from the TIDEMARK_HANDLER_FAILED that carries it. */
function emitError(error: unknown): unknown {
  expect(error).toMatchObject({ code: 'TIDEMARK_HANDLER_FAILED' })
  return (error as { cause: unknown }).cause
}

describe('ctx.emit without options.outputs', () => {
  it('PartitionProcessor: a TypeError saying options.outputs is not set, with dedupe off and on', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 10)
    for (const dedupe of ['off', 'tidemark-ids'] as const) {
      const p = new PartitionProcessor<{ word: string }>({
        job: 'no-outputs', topic: 'words', partition: 0, log, path: join(dir, dedupe), states: [counts], dedupe,
        handler: (_tx, { word }, ctx) => { ctx.emit({ topic: 'counts', key: word, value: '1' }) },
      })
      await p.start()
      const error = emitError(await p.catchUp().then(() => undefined, (e: unknown) => e))
      expect(error).toBeInstanceOf(TypeError)
      expect((error as Error).message).toMatch(NOT_SET)
      await p.close()
    }
    await log.close()
  })

  it('PartitionProcessor: each event\'s context holds its topic, partition and offset, and an emit taken out of it throws the same TypeError', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 3)
    const seen: string[] = []
    const kept: { offset: bigint }[] = []
    const p = new PartitionProcessor<{ word: string }>({
      job: 'no-outputs', topic: 'words', partition: 0, log, path: join(dir, 'store'), states: [counts],
      handler: async (_tx, { word }, ctx) => {
        kept.push(ctx)
        const { topic, partition, offset, emit } = ctx
        // Across an await inside the handler the context still describes its event.
        await Promise.resolve()
        seen.push(`${topic}/${partition}@${offset} ${ctx.offset}`)
        if (offset === 2n) emit({ topic: 'counts', key: word, value: '1' })
      },
    })
    await p.start()
    const error = emitError(await p.catchUp().then(() => undefined, (e: unknown) => e))
    expect(error).toBeInstanceOf(TypeError)
    expect((error as Error).message).toMatch(NOT_SET)
    expect(seen).toEqual(['words/0@0 0', 'words/0@1 1', 'words/0@2 2'])
    // A context kept past its handler's return still describes its own event.
    expect(kept.map((c) => c.offset)).toEqual([0n, 1n, 2n])
    await p.close()
    await log.close()
  })

  it('StatefulConsumer: the partition fails with a TypeError saying options.outputs is not set', async () => {
    const { brokers } = kafkaService()
    const { producer } = await openProducer(brokers)
    onTestFinished(() => producer.disconnect())
    const topic = randomName('emit-no-outputs')
    await produceWords(producer, topic, [0], 1)
    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job: randomName('job'), topics: [topic], stateDir: tempDir() }, {
      handler: (_tx, record, ctx) => { ctx.emit({ topic: 'counts', key: record.key, value: '1' }) },
    }))
    onTestFinished(async () => { await consumer.close() })
    const failed = new Promise<unknown>((resolve) => consumer.on('partition-failed', (f) => resolve(f.error)))
    await consumer.start()
    const error = emitError(await failed)
    expect(error).toBeInstanceOf(TypeError)
    expect((error as Error).message).toMatch(NOT_SET)
  })
})
