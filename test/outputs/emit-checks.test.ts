import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { kafkaSink } from '../../connectors/kafka/index.js'
import { fileLogSink, openFileLog, PartitionProcessor, type OutputRecord } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { counts, wordLog } from './fixtures.js'

/**
 * Runs a one-event processor whose handler emits `record` into a file-log
 * sink; resolves with the error its handler failed with (the cause of
 * TIDEMARK_HANDLER_FAILED), or undefined once the record was delivered.
 */
async function emitOne(record: unknown): Promise<unknown> {
  const dir = tempDir()
  const log = await wordLog(join(dir, 'log'), 1)
  const sink = fileLogSink({ dir: join(dir, 'out') })
  const p = new PartitionProcessor<{ word: string }>({
    job: 'emit', topic: 'words', partition: 0, log, path: join(dir, 'store'), states: [counts],
    outputs: { sink, retry: { initialMs: 10, maxMs: 10 } },
    handler: (_tx, _event, ctx) => { ctx.emit(record as OutputRecord) },
  })
  await p.start()
  try {
    const failed = await p.catchUp().then(() => undefined, (e: unknown) => e)
    if (failed === undefined) {
      await p.flushOutputs()
      return undefined
    }
    expect(failed).toMatchObject({ code: 'TIDEMARK_HANDLER_FAILED' })
    return (failed as { cause: unknown }).cause
  } finally {
    await p.close()
    await sink.close()
    await log.close()
  }
}

describe('emit refuses a record it could never deliver', () => {
  it('a topic the file-log sink cannot name is a RangeError at emit, not a send retried without end', async () => {
    for (const topic of ['a/b', 'a b', '..', '.', 'x'.repeat(256)]) {
      const error = await emitOne({ topic, value: 'v' })
      expect(error, topic).toBeInstanceOf(RangeError)
      expect((error as Error).message).toMatch(/record\.topic: fileLogSink: topic/)
    }
    expect(await emitOne({ topic: 'a.b_c-1', value: 'v' })).toBeUndefined()
  })

  it('kafkaSink.validateTopic: Kafka\'s legal topic names only', async () => {
    const sink = kafkaSink({ brokers: ['127.0.0.1:1'] })
    for (const topic of ['a b', 'a/b', '.', '..', 'é', 'x'.repeat(250), '']) {
      expect(() => sink.validateTopic!(topic), JSON.stringify(topic)).toThrow(RangeError)
    }
    for (const topic of ['a.b_c-1', 'x'.repeat(249), '...']) sink.validateTopic!(topic)
    await sink.close()
  })

  it('record.partition: -1 or absent lets the sink choose; anything else outside 0..2^31-1 is a RangeError saying so', async () => {
    for (const partition of [-2, 1.5, 2 ** 31, Number.NaN]) {
      const error = await emitOne({ topic: 'o', value: 'v', partition })
      expect(error, String(partition)).toBeInstanceOf(RangeError)
      expect((error as Error).message).toBe(`emit(record): record.partition must be an integer from 0 to 2147483647, or -1 (or absent) to let the sink choose by key, got ${partition}`)
    }
    for (const partition of [-1, 0, 2 ** 31 - 1, undefined]) expect(await emitOne({ topic: 'o', value: 'v', partition }), String(partition)).toBeUndefined()
  })

  it('an unknown field and a header name over 65535 bytes are RangeErrors naming them', async () => {
    const unknown = await emitOne({ topic: 'o', valeu: 'x' })
    expect(unknown).toBeInstanceOf(RangeError)
    expect((unknown as Error).message).toMatch(/record\.valeu/)
    const header = await emitOne({ topic: 'o', value: 'v', headers: { ['h'.repeat(70_000)]: 'x' } })
    expect(header).toBeInstanceOf(RangeError)
    expect((header as Error).message).toMatch(/header name "h+"\.\.\. is 70000 bytes; at most 65535/)
  })
})

describe('dedupe', () => {
  it('a tidemark-id header that is no string or bytes stops the partition with TIDEMARK_OUTPUT_ID_INVALID', async () => {
    for (const header of [5, true, { id: 'tm1:a:t:0:0:0' }]) {
      const dir = tempDir()
      const log = await openFileLog(join(dir, 'log'), { sync: false })
      await log.append(Buffer.from(JSON.stringify({ n: 1, headers: { 'tidemark-id': 'tm1:a:t:0:0:0' } })))
      await log.append(Buffer.from(JSON.stringify({ n: 2, headers: { 'tidemark-id': header } })))
      const applied: number[] = []
      const p = new PartitionProcessor<{ n: number }>({
        job: 'down', topic: 'in', partition: 0, log, path: join(dir, 'store'), states: [counts], dedupe: 'tidemark-ids',
        handler: (_tx, event) => { applied.push(event.n) },
      })
      await p.start()
      const error = await p.catchUp().then(() => undefined, (e: unknown) => e)
      expect(error, JSON.stringify(header)).toMatchObject({ code: 'TIDEMARK_OUTPUT_ID_INVALID' })
      expect(applied).toEqual([1])
      await p.close()
      await log.close()
    }
  })
})
