import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { FsSnapshotStore, openFileLog, PartitionStore } from '../../src/index.js'
import { DEDUPE_STATE, fileLogSink, formatRecordId, OUTBOX_STATE, outboxKey, outboxRecordCodec, parseRecordId, readOutbox, type OutboxRecord, type OutputSink, type OutputsOptions } from '../../src/outputs/index.js'
import { decodeOutboxChunk, outboxRecordBytes } from '../../src/outputs/record.js'
import { consumerOptions, openProducer, produceWords, type WordEvent } from '../kafka-consumer/fixture.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { catchUpFailingAtWrite, counter, counts, wordLog } from './fixtures.js'

/** A sink that never confirms: everything stays in the outbox (and close() stops waiting for it at once). */
const stalledSink = (): OutputSink => ({ name: 'stalled', send: () => new Promise(() => undefined), close: async () => undefined })
const stalled = (): OutputsOptions => ({ sink: stalledSink(), closeTimeoutMs: 1 })

/** The records a fileLogSink in `dir` delivered to topic `counts`, in order. */
async function delivered(dir: string): Promise<OutboxRecord[]> {
  const out = await openFileLog(join(dir, 'out', 'counts'))
  const codec = outboxRecordCodec()
  const records: OutboxRecord[] = []
  for await (const e of out.read(0n)) records.push(codec.decode(e.data))
  await out.close()
  return records
}

/** Per record the outbox holds, in outbox order: its outbox key and its bytes (an entry holds a transaction's records; how they group is no part of the comparison). */
async function outboxOf(path: string): Promise<Buffer[]> {
  const store = await PartitionStore.open({ path, states: [counts, OUTBOX_STATE, DEDUPE_STATE] })
  const out: Buffer[] = []
  for await (const [, value] of store.transaction().value(OUTBOX_STATE).entries()) {
    for (const r of decodeOutboxChunk(value).records) {
      const { topic, partition, offset, index } = parseRecordId(r.id)
      out.push(Buffer.concat([outboxKey(topic, partition, offset, index), outboxRecordBytes(r)]))
    }
  }
  await store.close()
  return out
}

describe('outbox', () => {
  it('delivers every emitted record after its commit, in order, with its id as a header, and empties the outbox', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 500)
    const sink = fileLogSink({ dir: join(dir, 'out'), fileLog: { sync: false } })
    const p = counter(dir, log, { sink })
    await p.start()
    expect(await p.catchUp()).toBe(500)
    await p.flushOutputs()
    expect(await readOutbox(p.store)).toEqual([])
    await p.close()
    await sink.close()
    const records = await delivered(dir)
    for (const r of records) expect(r.headers['tidemark-id']!.toString()).toBe(r.id)
    expect(records.map((r) => r.id)).toEqual(Array.from({ length: 500 }, (_, i) => formatRecordId({ job: 'counter', topic: 'words', partition: 0, offset: BigInt(i), index: 0 })))
    await log.close()
  })

  it('an emit kept past its batch (a handler\'s closure called later) is refused with TIDEMARK_TRANSACTION_CLOSED, and what the batch emitted commits whole', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 30)
    const sink = fileLogSink({ dir: join(dir, 'out'), fileLog: { sync: false } })
    let kept: ((record: { topic: string; value: string }) => string) | undefined
    const p = counter(dir, log, { sink }, {
      // Three records per event: the outbox entry of a batch grows with each.
      handler: (_tx, { word }, ctx) => {
        for (let i = 0; i < 3; i++) ctx.emit({ topic: 'counts', key: word, value: `${word}-${i}` })
        kept = ctx.emit
      },
    })
    await p.start()
    expect(await p.catchUp()).toBe(30)
    expect(() => kept!({ topic: 'counts', value: 'late' })).toThrow(expect.objectContaining({ code: 'TIDEMARK_TRANSACTION_CLOSED' }))
    await p.flushOutputs()
    await p.close()
    await sink.close()
    expect((await delivered(dir)).map((r) => r.id)).toEqual(Array.from({ length: 90 }, (_, i) => formatRecordId({ job: 'counter', topic: 'words', partition: 0, offset: BigInt(Math.floor(i / 3)), index: i % 3 })))
    await log.close()
  })

  it('a record exists if and only if its batch committed: a failed commit and a failed handler leave none of theirs', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 300)
    // The third batch write (events 100..149) fails: as a crash before the commit would.
    await catchUpFailingAtWrite(counter(dir, log, stalled(), { snapshots: undefined }), 3)
    const store = await PartitionStore.open({ path: join(dir, 'counter'), states: [counts, OUTBOX_STATE, DEDUPE_STATE] })
    expect(store.position('words', 0)).toBe(99n)
    expect((await readOutbox(store)).map((r) => r.id)).toEqual(Array.from({ length: 100 }, (_, i) => `tm1:counter:words:0:${i}:0`))
    await store.close()

    const failing = counter(dir, log, stalled(), {
      snapshots: undefined,
      handler: (tx, { word }, ctx) => {
        ctx.emit({ topic: 'counts', key: word, value: 'x' })
        if (ctx.offset === 130n) throw new Error('bad event')
      },
    })
    await failing.start()
    await expect(failing.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_HANDLER_FAILED' })
    await failing.close()
    expect(await outboxOf(join(dir, 'counter'))).toHaveLength(100)
    await log.close()
  })

  it('a replay produces byte-identical records, and a new owner restoring a snapshot holds the same outbox', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 300)
    const first = counter(join(dir, 'a'), log, stalled(), { snapshots: undefined })
    await first.start()
    await first.catchUp()
    await first.close()
    const a = await outboxOf(join(dir, 'a', 'counter'))
    expect(a).toHaveLength(300)

    // An owner that snapshots at 199 and goes on; the next restores that
    // snapshot (outbox included) and replays 200..299.
    const old = counter(join(dir, 'b'), log, stalled())
    await old.start()
    await old.catchUp({ end: 200n })
    await old.snapshot()
    await old.catchUp()
    await old.close()
    const snapshots = new FsSnapshotStore({ root: join(dir, 'b', 'snapshots') })
    const next = counter(join(dir, 'c'), log, stalled(), { snapshots: { store: snapshots }, ownership: { takeover: 'force' } })
    expect(await next.start()).toMatchObject({ source: 'snapshot', offset: 199n })
    expect(await next.catchUp()).toBe(100)
    await next.close()
    expect(await outboxOf(join(dir, 'c', 'counter'))).toEqual(a)
    expect(await outboxOf(join(dir, 'b', 'counter'))).toEqual(a)
    await log.close()
  })

  it('sends smaller than a batch: a stop after some of them keeps exactly the rest, the next start sends it once, in order', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 300)
    const ids = Array.from({ length: 300 }, (_, i) => formatRecordId({ job: 'counter', topic: 'words', partition: 0, offset: BigInt(i), index: 0 }))
    const sent: string[] = []
    // Takes three sends of 7 (each outbox entry holds a batch of 50, so the
    // third ends inside one), then never confirms the fourth.
    let stuck!: () => void
    const reachedFourth = new Promise<void>((resolve) => { stuck = resolve })
    const threeSends: OutputSink = {
      name: 'three-sends',
      send: async (records) => {
        if (sent.length >= 21) {
          stuck()
          return new Promise(() => undefined)
        }
        sent.push(...records.map((r) => r.id))
      },
      close: async () => undefined,
    }
    const first = counter(dir, log, { sink: threeSends, maxBatchRecords: 7, closeTimeoutMs: 1 }, { snapshots: undefined })
    await first.start()
    await first.catchUp()
    await reachedFourth
    await first.close()
    expect(sent).toEqual(ids.slice(0, 21))
    expect(await outboxOf(join(dir, 'counter'))).toHaveLength(279)

    const store = await PartitionStore.open({ path: join(dir, 'counter'), states: [counts, OUTBOX_STATE, DEDUPE_STATE] })
    expect((await readOutbox(store)).map((r) => r.id)).toEqual(ids.slice(21))
    await store.close()

    const all: OutputSink = { name: 'all', send: async (records) => { sent.push(...records.map((r) => r.id)) }, close: async () => undefined }
    const next = counter(dir, log, { sink: all, maxBatchRecords: 7 }, { snapshots: undefined })
    await next.start()
    await next.flushOutputs()
    expect(await readOutbox(next.store)).toEqual([])
    await next.close()
    expect(sent).toEqual(ids)
    await log.close()
  })

  it('a handler may take topic, partition, offset and emit out of its context (the README\'s handler form)', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 3)
    const sink = fileLogSink({ dir: join(dir, 'out'), fileLog: { sync: false } })
    const p = counter(dir, log, { sink }, {
      handler: (_tx, { word }, { topic, partition, offset, emit }) => {
        emit({ topic: 'counts', key: word, value: `${topic}/${partition}@${offset}` })
        emit({ topic: 'counts', key: word, value: 'second' })
      },
    })
    await p.start()
    expect(await p.catchUp()).toBe(3)
    await p.flushOutputs()
    await p.close()
    await sink.close()
    const got = (await delivered(dir)).map((r) => `${r.id} ${r.value!.toString()}`)
    const id = (offset: bigint, index: number): string => formatRecordId({ job: 'counter', topic: 'words', partition: 0, offset, index })
    expect(got).toEqual([0n, 1n, 2n].flatMap((o) => [`${id(o, 0)} words/0@${o}`, `${id(o, 1)} second`]))
    await log.close()
  })

  it('StatefulConsumer: a handler may take emit out of its context', async () => {
    const { brokers } = kafkaService()
    const { producer } = await openProducer(brokers)
    onTestFinished(() => producer.disconnect())
    const topic = randomName('emit-detached')
    await produceWords(producer, topic, [0], 5)
    const sink = fileLogSink({ dir: tempDir(), fileLog: { sync: false } })
    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job: randomName('job'), topics: [topic], stateDir: tempDir() }, {
      outputs: { sink },
      handler: (_tx, record, { emit }) => { emit({ topic: 'counts', key: record.key, value: '1' }) },
    }))
    onTestFinished(async () => {
      await consumer.close()
      await sink.close()
    })
    const outcome = new Promise<unknown>((resolve) => {
      let n = 0
      consumer.on('outputs', ({ event }) => { if (event.type === 'delivered' && (n += event.records) === 5) resolve('delivered') })
      consumer.on('partition-failed', (f) => resolve(f.error))
    })
    await consumer.start()
    expect(await outcome).toBe('delivered')
  })

  it('the outbox and dedupe states stay out of the store\'s value cache', () => {
    expect(OUTBOX_STATE.uncached).toBe(true)
    expect(DEDUPE_STATE.uncached).toBe(true)
  })
})
