import { describe, expect, it } from 'vitest'
import { decodeOutboxRecord, encodeOutboxRecord, formatRecordId, outboxKey, parseRecordId } from '../../src/outputs/index.js'
import { OutboxChunkWriter } from '../../src/outputs/chunk-writer.js'
import { decodeOutboxChunk } from '../../src/outputs/record.js'

describe('record ids', () => {
  it('have one documented text per id, escape job and topic, and parse back', () => {
    const id = { job: 'word:count/1', topic: 'lines', partition: 3, offset: 9_007_199_254_740_993n, index: 2 }
    const text = formatRecordId(id)
    expect(text).toBe('tm1:word%3Acount%2F1:lines:3:9007199254740993:2')
    expect(parseRecordId(text)).toEqual(id)
    expect(parseRecordId(Buffer.from(text))).toEqual(id)
    // Deterministic: the same fields always give the same bytes.
    expect(formatRecordId({ ...id })).toBe(text)
  })

  it('refuse anything that is not the canonical form with TIDEMARK_OUTPUT_ID_INVALID', () => {
    for (const bad of ['', 'tm2:a:b:0:0:0', 'tm1:a:b:0:0', 'tm1:a:b:00:0:0', 'tm1:a:b:0:-1:0', 'tm1::b:0:0:0', 'tm1:a%3a:b:0:0:0', 'tm1:a:b:0:99999999999999999999:0', 'tm1:%E0%A4%A:b:0:0:0']) {
      expect(() => parseRecordId(bad), bad).toThrow(expect.objectContaining({ code: 'TIDEMARK_OUTPUT_ID_INVALID' }))
    }
  })

  it('formatRecordId refuses what parseRecordId would not take back, and parseRecordId refuses a non-text argument, naming it', () => {
    const good = { job: 'j', topic: 't', partition: 0, offset: 0n, index: 0 }
    const cases: Array<[unknown, ErrorConstructor, RegExp]> = [
      [{ ...good, job: '' }, TypeError, /id\.job/],
      [{ ...good, topic: 5 }, TypeError, /id\.topic/],
      [{ ...good, partition: -1 }, RangeError, /id\.partition/],
      [{ ...good, partition: 1.5 }, RangeError, /id\.partition/],
      [{ ...good, partition: 2 ** 32 }, RangeError, /id\.partition/],
      [{ ...good, offset: -5n }, RangeError, /id\.offset/],
      [{ ...good, offset: 2n ** 63n }, RangeError, /id\.offset/],
      [{ ...good, offset: 5 }, TypeError, /id\.offset/],
      [{ ...good, index: -1 }, RangeError, /id\.index/],
      [{ ...good, job: '\uD800' }, RangeError, /id\.job/],
      [null, TypeError, /formatRecordId\(id\)/],
    ]
    for (const [id, type, message] of cases) {
      expect(() => formatRecordId(id as Parameters<typeof formatRecordId>[0]), String(id && JSON.stringify(id, (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v)))).toThrow(type)
      expect(() => formatRecordId(id as Parameters<typeof formatRecordId>[0])).toThrow(message)
    }
    const max = { ...good, partition: 2 ** 32 - 1, offset: 2n ** 63n - 1n, index: 2 ** 32 - 1 }
    expect(parseRecordId(formatRecordId(max))).toEqual(max)
    for (const text of [42, null, undefined, { id: 'tm1:j:t:0:0:0' }] as unknown[]) {
      expect(() => parseRecordId(text as string)).toThrow(TypeError)
      expect(() => parseRecordId(text as string)).toThrow(/parseRecordId\(text\): text must be a string or a Uint8Array/)
    }
  })

  it('binary record format round-trips, null key and value included, and rejects trailing or truncated bytes', () => {
    const r = { id: 'tm1:j:t:0:5:1', topic: 'out', partition: -1, key: null, value: Buffer.from('v'), headers: { a: Buffer.from('1'), 'tidemark-id': Buffer.from('tm1:j:t:0:5:1') } }
    const bytes = encodeOutboxRecord(r)
    expect(bytes.subarray(0, 4).toString('latin1')).toBe('TMO\x01')
    expect(decodeOutboxRecord(bytes)).toEqual(r)
    const tomb = { ...r, key: Buffer.from('k'), value: null, partition: 7, headers: {} }
    expect(decodeOutboxRecord(encodeOutboxRecord(tomb))).toEqual(tomb)
    expect(() => decodeOutboxRecord(Buffer.concat([bytes, Buffer.from([0])]))).toThrow(/trailing/)
    expect(() => decodeOutboxRecord(bytes.subarray(0, bytes.length - 1))).toThrow(/truncated/)
  })

  // The writer encodes in place (short ASCII text a character at a time,
  // the rest through Buffer.write): each record must be the bytes of
  // encodeOutboxRecord, whatever its text.
  it('outbox entries hold each record as encodeOutboxRecord writes it, for any text', () => {
    const texts = ['', 'w-1', 'x'.repeat(48), 'y'.repeat(49), 'caf\u00e9', '\u{1F600} emoji', 'z'.repeat(47) + '\u00e9', 'ascii then \u4e2d\u6587', 'long '.repeat(40)]
    const writer = new OutboxChunkWriter(256)
    const expected: Buffer[] = []
    for (const [i, text] of texts.entries()) {
      const id = `tm1:j\u00e9:${text.length > 10 ? 'long' : 's'}:0:${i}:0`
      const headers = { h: text, b: Buffer.from([0, 255]) }
      writer.append(id, text === '' ? 't' : text.replace(/ /g, '-'), i - 1, i % 3 === 0 ? null : text, i % 2 === 0 ? Buffer.from(text) : text, ['h', 'b'], headers)
      expected.push(encodeOutboxRecord({
        id, topic: text === '' ? 't' : text.replace(/ /g, '-'), partition: i - 1, key: i % 3 === 0 ? null : Buffer.from(text), value: Buffer.from(text),
        headers: { h: Buffer.from(text), b: Buffer.from([0, 255]), 'tidemark-id': Buffer.from(id) },
      }))
    }
    const chunk = decodeOutboxChunk(writer.bytes())
    expect(chunk.records.length).toBe(texts.length)
    for (const [i, r] of chunk.records.entries()) {
      const framed = writer.bytes().subarray(chunk.starts[i]! + 4, chunk.starts[i + 1]!)
      expect(framed.equals(expected[i]!), texts[i]).toBe(true)
      expect(r).toEqual(decodeOutboxRecord(expected[i]!))
    }
  })

  it('outbox keys sort in (source partition, offset, index) order', () => {
    const keys = [outboxKey('s', 0, 256n, 0), outboxKey('s', 0, 1n, 1), outboxKey('s', 0, 1n, 0), outboxKey('s', 0, 2n ** 40n, 0)]
    const sorted = [...keys].sort(Buffer.compare)
    expect(sorted).toEqual([keys[2], keys[1], keys[0], keys[3]])
  })
})
