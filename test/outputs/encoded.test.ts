import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { openFileLog, PartitionProcessor, PartitionStore, type FileLog } from '../../src/index.js'
import { DEDUPE_STATE, encodeOutboxRecord, fileLogSink, OUTBOX_STATE, outboxKey, outboxRecordCodec, readOutbox, type EncodedRecords, type OutboxRecord, type OutputSink, type OutputsOptions } from '../../src/outputs/index.js'
import { resolveOutputs } from '../../src/outputs/options.js'
import { OutboxPublisher } from '../../src/outputs/publisher.js'
import { OutboxChunkWriter } from '../../src/outputs/chunk-writer.js'
import { decodeOutboxChunk, decodeOutboxRecord } from '../../src/outputs/record.js'
import { eachEncodedRecord, EncodedBatch } from '../../src/outputs/encoded-batch.js'
import { tempDir } from '../helpers/tmp.js'
import { counts, wordLog } from './fixtures.js'

/** Emits two records per event to two topics in turn, the second with a header of its own. */
function twoTopics(dir: string, log: FileLog, outputs: OutputsOptions): PartitionProcessor<{ word: string }> {
  return new PartitionProcessor<{ word: string }>({
    job: 'encoded', topic: 'words', partition: 0, log, path: join(dir, 'store'), states: [counts], batchSize: 50,
    handler: (tx, { word }, ctx) => {
      const view = tx.value(counts)
      const n = (view.getSync(word) ?? 0) + 1
      view.put(word, n)
      ctx.emit({ topic: n % 2 === 0 ? 'even' : 'odd', key: word, value: String(n) })
      ctx.emit({ topic: 'all', key: null, value: word, headers: { n: String(n) } })
    },
    outputs,
  })
}

/** A record's fields as eachEncodedRecord() gives them. */
function withoutId(r: OutboxRecord): object {
  return { topic: r.topic, partition: r.partition, key: r.key, value: r.value, headers: { ...r.headers } }
}

/** A sink that must not be called through send(). */
function encodedOnly(sendEncoded: (records: EncodedRecords) => Promise<void>): OutputSink {
  return { name: 'encoded-only', send: () => Promise.reject(new Error('send() called on a sink with sendEncoded')), sendEncoded, close: async () => undefined }
}

describe('outputs: sinks that take the binary form (sendEncoded)', () => {
  it('get the outbox\'s records undecoded, in order, across entries and partial deliveries; each view is the record\'s encoding', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 120)
    // Fill the outbox with a sink that never confirms, and read what it holds.
    const held = twoTopics(dir, log, { sink: { name: 'stalled', send: () => new Promise(() => undefined), close: async () => undefined }, closeTimeoutMs: 1 })
    await held.start()
    await held.catchUp()
    await held.close()
    const store = await PartitionStore.open({ path: join(dir, 'store'), states: [counts, OUTBOX_STATE, DEDUPE_STATE] })
    const expected = (await readOutbox(store)).map((r) => encodeOutboxRecord(r))
    await store.close()
    expect(expected).toHaveLength(240)

    const got: Buffer[] = []
    const sizes: number[] = []
    // 240 records in entries of 100 (50 events each), sent 35 at a time: sends
    // that end inside an entry and sends that span two.
    const p = twoTopics(dir, log, {
      maxBatchRecords: 35,
      sink: encodedOnly(async (records) => {
        sizes.push(records.length)
        for (let i = 0; i < records.length; i++) {
          const record = records.record(i)
          expect(records.topic(i)).toBe(record.topic)
          expect(records.bytes(i).equals(encodeOutboxRecord(record))).toBe(true)
          got.push(Buffer.from(records.bytes(i)))
        }
        expect(() => records.topic(records.length)).toThrow(RangeError)
        expect(() => records.bytes(-1)).toThrow(RangeError)
        // What kafkaSink reads from the same batch: each record's fields but its id.
        const fields: unknown[] = []
        eachEncodedRecord(records, (topic, partition, key, value, headers) => { fields.push({ topic, partition, key, value, headers }) })
        expect(fields).toEqual(Array.from({ length: records.length }, (_, i) => withoutId(records.record(i))))
      }),
    })
    await p.start()
    await p.flushOutputs()
    await p.close()
    await log.close()
    expect(sizes).toEqual([35, 35, 35, 35, 35, 35, 30])
    expect(got).toEqual(expected)
    const after = await PartitionStore.open({ path: join(dir, 'store'), states: [counts, OUTBOX_STATE, DEDUPE_STATE] })
    expect(await readOutbox(after)).toEqual([])
    await after.close()
  })

  it('fileLogSink appends the outbox\'s bytes: its logs decode to the records emitted, per topic in order', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 60)
    const sink = fileLogSink({ dir: join(dir, 'out'), fileLog: { sync: false } })
    expect(typeof sink.sendEncoded).toBe('function')
    const p = twoTopics(dir, log, { sink, maxBatchRecords: 7 })
    await p.start()
    await p.catchUp()
    await p.flushOutputs()
    await p.close()
    await sink.close()
    await log.close()
    const codec = outboxRecordCodec()
    const read = async (topic: string): Promise<OutboxRecord[]> => {
      const out = await openFileLog(join(dir, 'out', topic))
      const records: OutboxRecord[] = []
      for await (const e of out.read(0n)) records.push(codec.decode(e.data))
      await out.close()
      return records
    }
    const all = await read('all')
    expect(all.map((r) => r.value!.toString())).toEqual(Array.from({ length: 60 }, (_, i) => ['a', 'f', 'd', 'b', 'g', 'e', 'c'][i % 7]))
    expect(all.map((r) => r.headers.n!.toString()).slice(0, 8)).toEqual(['1', '1', '1', '1', '1', '1', '1', '2'])
    const byKey = new Map<string, string[]>()
    for (const r of [...await read('even'), ...await read('odd')]) byKey.set(r.key!.toString(), [...byKey.get(r.key!.toString()) ?? [], r.value!.toString()])
    for (const [, values] of byKey) expect(values.map(Number).sort((x, y) => x - y)).toEqual(values.map((_, i) => i + 1))
    expect([...byKey.values()].flat()).toHaveLength(60)
  })

  for (const path of ['sendEncoded', 'send'] as const) {
    it(`a damaged record in an outbox entry stops delivery before any of its batch is sent (${path})`, async () => {
      const dir = tempDir()
      const store = await PartitionStore.open({ path: join(dir, 'store'), states: [OUTBOX_STATE, DEDUPE_STATE] })
      const writer = new OutboxChunkWriter()
      writer.append('tm1:j:words:0:0:0', 'out', -1, 'k', 'v1', undefined, undefined)
      writer.append('tm1:j:words:0:1:0', 'out', -1, 'k', 'v2', undefined, undefined)
      const bytes = Buffer.from(writer.bytes())
      // The second record's value length one byte too short: trailing bytes after it.
      const second = bytes.indexOf('v2') - 4
      bytes.writeInt32BE(1, second)
      const tx = store.transaction()
      tx.value(OUTBOX_STATE).put(outboxKey('words', 0, 0n, 0), bytes)
      await tx.commitWithoutPosition()
      let calls = 0
      const sink: OutputSink = { name: 'counting', send: async () => { calls++ }, close: async () => undefined }
      if (path === 'sendEncoded') sink.sendEncoded = async () => { calls++ }
      let failedWith!: (error: unknown) => void
      const failed = new Promise<unknown>((resolve) => { failedWith = resolve })
      const publisher = new OutboxPublisher({ store, outputs: resolveOutputs({ sink })!, onStoreFailed: failedWith })
      await publisher.start()
      expect(await failed).toMatchObject({ message: expect.stringMatching(/output record truncated/) })
      await publisher.close()
      expect(calls).toBe(0)
      await store.close()
    })
  }

  it('eachEncodedRecord reads any EncodedRecords as record(i) decodes them, id aside, and refuses a damaged record as decoding does', () => {
    const records: OutboxRecord[] = [
      { id: 'j:t:0:1:0', topic: 'a', partition: -1, key: Buffer.from('k'), value: Buffer.from('v'), headers: { h: Buffer.from('x'), 'tidemark-id': Buffer.from('j:t:0:1:0') } },
      { id: 'j:t:0:2:0', topic: 'b', partition: 3, key: null, value: null, headers: { 'tidemark-id': Buffer.from('j:t:0:2:0') } },
    ]
    const forms = records.map((r) => encodeOutboxRecord(r))
    const plain = (bytes: Buffer[]): EncodedRecords => ({ length: bytes.length, topic: (i) => records[i]!.topic, bytes: (i) => bytes[i]!, record: (i) => records[i]! })
    const fields: unknown[] = []
    eachEncodedRecord(plain(forms), (topic, partition, key, value, headers) => { fields.push({ topic, partition, key, value, headers }) })
    expect(fields).toEqual(records.map(withoutId))
    const damaged = forms[1]!.subarray(0, forms[1]!.length - 1)
    expect(() => decodeOutboxRecord(damaged)).toThrow(/truncated/)
    expect(() => eachEncodedRecord(plain([forms[0]!, damaged]), () => undefined)).toThrow(/truncated/)
  })

  it('the publisher\'s batches hand each record\'s fields as decoding reads them, across entries, and a damaged record\'s error after the records before it', () => {
    // Records that vary every field a reader could carry over from the one before.
    const chunk = (first: number, n: number): { bytes: Buffer; starts: number[] } => {
      const writer = new OutboxChunkWriter(64)
      for (let i = first; i < first + n; i++) {
        const names = i % 3 === 0 ? ['a', 'b'] : i % 3 === 1 ? ['b'] : undefined
        writer.append(`tm1:j:words:0:${i}:0`, ['out', 'out', 'two', 'ünï', 'x'.repeat(70)][i % 5]!, i % 5 === 0 ? i : -1,
          i % 4 === 1 ? null : i % 4 === 2 ? '' : `k${i}`, i % 6 === 5 ? null : 'v'.repeat(i % 9), names, names && { a: `A${i}`, b: Buffer.from([i, 0, 255]) }, 'tm1:j:words:0')
      }
      return { bytes: Buffer.from(writer.bytes()), starts: writer.starts() }
    }
    const chunks = [chunk(0, 13), chunk(13, 8)]
    const batch = new EncodedBatch()
    batch.add(chunks[0]!.bytes, chunks[0]!.starts, 2, 13)
    batch.add(chunks[1]!.bytes, chunks[1]!.starts, 0, 8)
    const fields: unknown[] = []
    eachEncodedRecord(batch, (topic, partition, key, value, headers) => { fields.push({ topic, partition, key, value, headers }) })
    expect(fields).toEqual(Array.from({ length: batch.length }, (_, i) => withoutId(batch.record(i))))
    expect(fields).toHaveLength(19)

    // Each damage in the second record of a batch of three (topic 'out', a
    // null key, value 'v', header b: 01 00 ff): the first record is handed
    // over, then decoding's error for the second.
    const keyAt = (r: Buffer): number => 4 + 2 + r.readUInt16BE(4) + 2 + 3 + 4
    const damages: Array<[string, (record: Buffer) => void]> = [
      ['id length past the end', (r) => { r.writeUInt16BE(0xffff, 4) }],
      ['key length below -1', (r) => { r.writeInt32BE(-5, keyAt(r)) }],
      ['value length past the end', (r) => { r.writeInt32BE(1000, keyAt(r) + 4) }],
      ['header value length of 2 GiB', (r) => { r.writeUInt32BE(0x80000000, r.indexOf(Buffer.from([1, 0, 255])) - 4) }],
      ['a value one byte short: trailing bytes', (r) => { r.writeInt32BE(0, keyAt(r) + 4) }],
      ['no magic', (r) => { r[0] = 0 }],
    ]
    for (const [what, damage] of damages) {
      const { bytes, starts } = chunk(0, 3)
      const second = bytes.subarray(starts[1]! + 4, starts[2])
      damage(second)
      const damaged = new EncodedBatch()
      damaged.add(bytes, starts, 0, 3)
      // Decoding's error, its byte positions counted in the entry.
      let decodeError: unknown
      try { damaged.record(1) } catch (error) { decodeError = error }
      expect(decodeError, what).toBeInstanceOf(Error)
      const handed: string[] = []
      expect(() => eachEncodedRecord(damaged, (_t, _p, key) => { handed.push(String(key)) }), what).toThrow((decodeError as Error).message)
      expect(handed, what).toEqual(['k0'])
    }
  })

  it('outputs.sink.sendEncoded must be a function when set', () => {
    const sink = { name: 'x', send: async () => undefined, close: async () => undefined, sendEncoded: 'yes' } as unknown as OutputSink
    expect(() => resolveOutputs({ sink })).toThrow(/outputs\.sink\.sendEncoded must be a function/)
  })

  it('an outbox entry writer copying its last topic and id prefix writes each record as encodeOutboxRecord does', () => {
    // A small first buffer: the entry grows (and moves) between records.
    const writer = new OutboxChunkWriter(256)
    const prefix = 'tm1:j%C3%A9:words:3'
    const topics = ['out', 'out', 'ünï', 'ünï', 'out', 'x'.repeat(300), 'out']
    const expected: OutboxRecord[] = []
    topics.forEach((topic, i) => {
      const id = `${prefix}:${1000n + BigInt(i)}:${i % 2}`
      // An id without the prefix given (a caller's first append of a partition): written in full.
      writer.append(id, topic, i === 2 ? 5 : -1, `k${i}`, 'v'.repeat(i * 40), i === 4 ? ['h'] : undefined, i === 4 ? { h: 'ü' } : undefined, i === 1 ? undefined : prefix)
      expected.push({ id, topic, partition: i === 2 ? 5 : -1, key: Buffer.from(`k${i}`), value: Buffer.from('v'.repeat(i * 40)), headers: { ...(i === 4 ? { h: Buffer.from('ü') } : {}), 'tidemark-id': Buffer.from(id) } })
    })
    const { records, starts } = decodeOutboxChunk(writer.bytes())
    expect(records.map((r) => ({ ...r }))).toEqual(expected)
    records.forEach((r, i) => expect(writer.bytes().subarray(starts[i]! + 4, starts[i + 1])).toEqual(encodeOutboxRecord(expected[i]!)))
  })
})
