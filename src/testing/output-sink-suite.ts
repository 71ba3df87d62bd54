// The OutputSink contract, run against every sink: Tidemark's (fileLogSink,
// kafkaSink) and yours. It holds a sink to what delivery relies on
// (docs/outputs.md): records arrive with their ids and bytes, in order per
// destination, and a send repeated after a failure is safe. See
// docs/testing.md.
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { formatRecordId, RECORD_ID_HEADER } from '../outputs/id.js'
import { encodeOutboxRecord } from '../outputs/record.js'
import type { EncodedRecords, OutboxRecord, OutputSink } from '../outputs/types.js'
import { checkRunner, Registrar, throwsSync, type SuiteRunner, type TestScope } from './runner.js'

/** A record as it was delivered, read back from where the sink put it. */
export interface DeliveredRecord {
  /** The record's id: its `tidemark-id` header (or where else your sink keeps it). */
  id: string
  key: Uint8Array | null
  value: Uint8Array | null
  headers: Readonly<Record<string, Uint8Array>>
}

export interface OutputSinkSuiteOptions extends SuiteRunner {
  /** Names the group of tests. */
  name: string
  /**
   * A fresh sink for each test, and `read(topic, count)`: what the sink
   * delivered to `topic`, at least `count` records (wait for them if
   * delivery shows up later), in the order they were delivered to each
   * destination partition (records of one key share one). The suite closes
   * the sink; `cleanup` runs after.
   */
  factory: () => Promise<{ sink: OutputSink; read(topic: string, count: number): Promise<DeliveredRecord[]>; cleanup?: () => Promise<void> }>
}

interface Opened {
  sink: OutputSink
  read(topic: string, count: number): Promise<DeliveredRecord[]>
  /** Closes the sink within the test (the clean-up then does not). */
  close(): Promise<void>
}

/**
 * Registers the OutputSink contract's tests on your runner. Topics are made
 * up per test (`tm-suite-<hex>-<n>`: letters, digits and '-', as Kafka and
 * the file log take), so a shared cluster needs no clean-up between tests.
 */
export function outputSinkSuite(options: OutputSinkSuiteOptions): void {
  const runner = checkRunner(options, 'outputSinkSuite')
  if (typeof options.name !== 'string') throw new TypeError('outputSinkSuite: options.name must be a string')
  if (typeof options.factory !== 'function') throw new TypeError('outputSinkSuite: options.factory must be a function returning { sink, read, cleanup? }')
  const r = new Registrar(runner)
  const it = r.test.bind(r)
  const describe = r.group.bind(r)

  async function open(scope: TestScope): Promise<Opened> {
    const { sink, read, cleanup } = await options.factory()
    let closed = false
    scope.defer(async () => {
      if (!closed) await sink.close()
      await cleanup?.()
    })
    return { sink, read, close: async () => { closed = true; await sink.close() } }
  }

  describe(`OutputSink suite: ${options.name}`, () => {
    it('has a name, and validateTopic (if it has one) takes the suite\'s topics and refuses \'..\' with a RangeError', async (t) => {
      const { sink } = await open(t)
      assert.equal(typeof sink.name, 'string')
      assert.notEqual(sink.name, '')
      assert.equal(typeof sink.send, 'function')
      assert.equal(typeof sink.close, 'function')
      if (sink.validateTopic === undefined) return
      sink.validateTopic(topics(1)[0]!)
      throwsSync(() => sink.validateTopic!('..'), RangeError)
    })

    it('resolves a send of no records', async (t) => {
      const { sink } = await open(t)
      await sink.send([])
    })

    it('delivers every record with its id, key, value and headers, tombstones and binary bytes included', async (t) => {
      const { sink, read } = await open(t)
      const [topic] = topics(1)
      const records = [
        record(topic!, 0, { key: 'k1', value: 'plain text' }),
        record(topic!, 1, { key: null, value: 'no key' }),
        record(topic!, 2, { key: 'k1', value: null }),
        record(topic!, 3, { key: randomBytes(16), value: randomBytes(3000), headers: { trace: 'abc', bin: Buffer.from([0, 255, 7]) } }),
        record(topic!, 4, { key: 'k2', value: '', headers: { empty: '' } }),
      ]
      await sink.send(records)
      const delivered = await read(topic!, records.length)
      assert.equal(delivered.length, records.length, 'records delivered')
      for (const sent of records) {
        const got = delivered.find((d) => d.id === sent.id)
        assert.ok(got !== undefined, `record ${sent.id} was not delivered`)
        assertSameRecord(got, sent)
      }
    })

    it('keeps the order of the records bound for one destination, within a send and across sends', async (t) => {
      const { sink, read } = await open(t)
      const [topic] = topics(1)
      const sent: OutboxRecord[] = []
      let offset = 0
      for (let batch = 0; batch < 4; batch++) {
        const records = Array.from({ length: 40 }, () => record(topic!, offset++, { key: `key-${offset % 3}`, value: `value ${offset}` }))
        // Records of an explicit partition too.
        records.push(record(topic!, offset++, { key: 'fixed', value: `value ${offset}`, partition: 0 }))
        await sink.send(records)
        sent.push(...records)
      }
      const delivered = await read(topic!, sent.length)
      assert.equal(delivered.length, sent.length, 'records delivered')
      for (const key of ['key-0', 'key-1', 'key-2', 'fixed']) {
        const wanted = sent.filter((s) => s.key?.toString() === key).map((s) => s.id)
        assert.deepEqual(delivered.filter((d) => d.key !== null && Buffer.from(d.key).toString() === key).map((d) => d.id), wanted, `the order of key ${key}`)
      }
    })

    it('delivers a send that spans topics to each, each in its order', async (t) => {
      const { sink, read } = await open(t)
      const [a, b] = topics(2)
      const records = Array.from({ length: 30 }, (_, i) => record(i % 3 === 0 ? a! : b!, i, { key: 'same', value: `v${i}` }))
      await sink.send(records)
      for (const topic of [a!, b!]) {
        const wanted = records.filter((x) => x.topic === topic)
        const delivered = await read(topic, wanted.length)
        assert.deepEqual(delivered.map((d) => d.id), wanted.map((w) => w.id), `the records of ${topic}`)
      }
    })

    it('takes a send repeated after a failure: copies carry the same id and bytes, and the first copies stay in order', async (t) => {
      // What the publisher does when a send rejects after the sink took some
      // of its records: it sends them again, the same ids in the same order
      // (at least once; a sink may also drop the copies).
      const { sink, read } = await open(t)
      const [topic] = topics(1)
      const records = Array.from({ length: 15 }, (_, i) => record(topic!, i, { key: 'one', value: `v${i}`, partition: 0 }))
      await sink.send(records.slice(0, 10))
      await sink.send(records.slice(5, 10))
      await sink.send(records.slice(5, 15))
      const delivered = await read(topic!, records.length)
      const firsts: string[] = []
      for (const d of delivered) {
        const sent = records.find((s) => s.id === d.id)
        assert.ok(sent !== undefined, `delivered an id that was never sent: ${d.id}`)
        assertSameRecord(d, sent)
        if (!firsts.includes(d.id)) firsts.push(d.id)
      }
      assert.deepEqual(firsts, records.map((s) => s.id))
      assert.ok(delivered.length <= 30, `${delivered.length} records delivered for 25 sent`)
    })

    it('delivers records in their binary form through sendEncoded (if it has one) as send() would', async (t) => {
      const { sink, read } = await open(t)
      if (sink.sendEncoded === undefined) return
      const [topic] = topics(1)
      const records = Array.from({ length: 20 }, (_, i) => record(topic!, i, { key: `k${i % 2}`, value: randomBytes(i * 10), headers: { n: String(i) } }))
      await sink.sendEncoded(encoded(records))
      const delivered = await read(topic!, records.length)
      for (const key of ['k0', 'k1']) {
        const wanted = records.filter((s) => s.key?.toString() === key)
        const got = delivered.filter((d) => d.key !== null && Buffer.from(d.key).toString() === key)
        assert.deepEqual(got.map((d) => d.id), wanted.map((w) => w.id), `the order of key ${key}`)
        for (let i = 0; i < wanted.length; i++) assertSameRecord(got[i]!, wanted[i]!)
      }
    })

    it('refuses a send after close(), which may be called again', async (t) => {
      const opened = await open(t)
      const [topic] = topics(1)
      await opened.close()
      await opened.sink.close()
      await assert.rejects(async () => { await opened.sink.send([record(topic!, 0, { key: 'k', value: 'v' })]) })
    })
  })
}

let topicSerial = 0

/** `count` topic names no other test uses. */
function topics(count: number): string[] {
  const base = `tm-suite-${randomBytes(4).toString('hex')}-${topicSerial++}`
  return Array.from({ length: count }, (_, i) => `${base}-${i}`)
}

function bytes(value: string | Uint8Array | null): Buffer | null {
  return value === null ? null : Buffer.from(value)
}

/** An outbox record as the publisher hands it to a sink: its id in its `tidemark-id` header. Index 1 keeps ids apart from those of index 0. */
function record(topic: string, offset: number, r: { key: string | Uint8Array | null; value: string | Uint8Array | null; headers?: Record<string, string | Uint8Array>; partition?: number }): OutboxRecord {
  const id = formatRecordId({ job: 'sink-suite', topic: 'source', partition: 0, offset: BigInt(offset), index: 1 })
  const headers: Record<string, Buffer> = {}
  for (const [name, value] of Object.entries(r.headers ?? {})) headers[name] = Buffer.from(value)
  headers[RECORD_ID_HEADER] = Buffer.from(id)
  return { id, topic, partition: r.partition ?? -1, key: bytes(r.key), value: bytes(r.value), headers }
}

/** The EncodedRecords a sink's sendEncoded() gets from the publisher, for these records. */
function encoded(records: readonly OutboxRecord[]): EncodedRecords {
  const forms = records.map((r) => encodeOutboxRecord(r))
  const at = (i: number): number => {
    if (!Number.isInteger(i) || i < 0 || i >= records.length) throw new RangeError(`record index ${i} is out of range [0, ${records.length})`)
    return i
  }
  return {
    length: records.length,
    topic: (i) => records[at(i)]!.topic,
    bytes: (i) => forms[at(i)]!,
    record: (i) => records[at(i)]!,
  }
}

function assertSameRecord(got: DeliveredRecord, sent: OutboxRecord): void {
  const same = (a: Uint8Array | null, b: Uint8Array | null): boolean => (a === null || b === null ? a === b : Buffer.from(a).equals(Buffer.from(b)))
  assert.ok(same(got.key, sent.key), `the key of ${sent.id}`)
  assert.ok(same(got.value, sent.value), `the value of ${sent.id}`)
  for (const [name, value] of Object.entries(sent.headers)) {
    const header = got.headers[name]
    assert.ok(header !== undefined && same(header, value), `the header ${name} of ${sent.id}`)
  }
}
