// kafkajs 2.2.4's record header encoder and record encoder, replaced when
// tidemark/kafka loads (connectors/kafka/kafkajs-fixes.ts, fix 3): the same
// bytes as kafkajs's own for every header and record, written without an
// Encoder of 512 bytes per header and without arrays per record.
import { readFileSync } from 'node:fs'
import Module, { createRequire } from 'node:module'
import { dirname } from 'node:path'
import { expect, it } from 'vitest'
import '../../connectors/kafka/index.js'

const require = createRequire(import.meta.url)
interface Encoder { buffer: Buffer; writeVarIntString(v: unknown): Encoder; writeVarIntBytes(v: unknown): Encoder }
const EncoderClass = require('kafkajs/src/protocol/encoder.js') as new () => Encoder
const encodeHeader = require('kafkajs/src/protocol/recordBatch/header/v0/index.js') as ((h: { key: unknown; value: unknown }) => Encoder) & { name: string }
const encodeRecord = require('kafkajs/src/protocol/recordBatch/record/v0/index.js') as (r: object) => Encoder

/** kafkajs 2.2.4's header encoder, as its src/protocol/recordBatch/header/v0 has it. */
const kafkajsHeader = ({ key, value }: { key: unknown; value: unknown }): Buffer => new EncoderClass().writeVarIntString(key).writeVarIntBytes(value).buffer

it('kafkajs encodes record headers with Tidemark\'s encoder once tidemark/kafka is loaded', () => {
  expect(encodeHeader.name).toBe('encodeHeader')
})

it('every header is encoded to the bytes kafkajs\'s own encoder writes', () => {
  const headers: Array<{ key: unknown; value: unknown }> = [
    { key: 'tidemark-id', value: Buffer.from('job:lines:0:12345:0') },
    { key: 'tidemark-id', value: Buffer.from('job:lines:0:12346:1') },
    { key: '', value: Buffer.alloc(0) },
    { key: 'ünïcødé ✓', value: 'välue ✓' },
    // Lengths of two and three varint bytes (zigzag: 64 is the first of two).
    { key: 'k'.repeat(63), value: Buffer.alloc(64, 7) },
    { key: 'k'.repeat(64), value: Buffer.alloc(8192, 9) },
    { key: 'string value', value: 'x'.repeat(300) },
    // Not a string or a Buffer: kafkajs's own encoder (which writes String(value)).
    { key: 'number', value: 42 },
    { key: 'typed array', value: new Uint8Array([1, 2, 3]) },
  ]
  for (const h of headers) expect(Buffer.from(encodeHeader(h).buffer)).toEqual(kafkajsHeader(h))
  // Names seen before are written from their kept bytes: still the same.
  for (const h of headers) expect(Buffer.from(encodeHeader(h).buffer)).toEqual(kafkajsHeader(h))
})

it('a record with headers is encoded as kafkajs encodes it', () => {
  const headers = { 'tidemark-id': Buffer.from('job:lines:0:7:0'), trace: 'abc', many: [Buffer.from('a'), 'b'] }
  const record = encodeRecord({ offsetDelta: 3, timestampDelta: 0, key: Buffer.from('k'), value: Buffer.from('v'), headers }).buffer
  // kafkajs's layout: the record's fields, then the header count and each header.
  const expected = [
    kafkajsHeader({ key: 'tidemark-id', value: headers['tidemark-id'] }),
    kafkajsHeader({ key: 'trace', value: 'abc' }),
    kafkajsHeader({ key: 'many', value: headers.many[0] }),
    kafkajsHeader({ key: 'many', value: 'b' }),
  ]
  const tail = Buffer.concat([Buffer.of(4 * 2), ...expected])
  expect(record.subarray(record.length - tail.length)).toEqual(tail)
})

/** kafkajs 2.2.4's record encoder, compiled afresh from its file (the loaded one is Tidemark's). */
function kafkajsRecordEncoder(): (r: object) => Encoder {
  const path = require.resolve('kafkajs/src/protocol/recordBatch/record/v0/index.js')
  const M = Module as unknown as { new (id: string): { filename: string; paths: string[]; exports: unknown; _compile(code: string, path: string): void }; _nodeModulePaths(dir: string): string[] }
  const m = new M(path)
  m.filename = path
  m.paths = M._nodeModulePaths(dirname(path))
  m._compile(readFileSync(path, 'utf8'), path)
  return m.exports as (r: object) => Encoder
}

it('kafkajs encodes records with Tidemark\'s record encoder once tidemark/kafka is loaded', () => {
  expect(encodeRecord.name).toBe('encodeRecord')
})

it('every record is encoded to the bytes kafkajs\'s own record encoder writes', () => {
  const kafkajsRecord = kafkajsRecordEncoder()
  const records: object[] = [
    // The fast path: headers of one string or Buffer each.
    { offsetDelta: 0, timestampDelta: 0, key: Buffer.from('w-1'), value: Buffer.from('3'), headers: { 'tidemark-id': Buffer.from('tm1:job:lines:0:12345:0') } },
    { offsetDelta: 999, timestampDelta: 1234567, key: 'w-2', value: 'välue ✓', headers: { 'tidemark-id': Buffer.from('tm1:job:lines:0:12346:1'), trace: 'ünïcødé ✓', '': '' } },
    { offsetDelta: 70000, key: null, value: null, headers: { a: Buffer.alloc(0), ['k'.repeat(64)]: Buffer.alloc(8192, 9), s: 'x'.repeat(300) } },
    { key: Buffer.alloc(600, 1), value: Buffer.alloc(600, 2), headers: { big: Buffer.alloc(600, 3) } },
    // kafkajs's own encoder: no headers, several values under one name.
    { offsetDelta: 1, timestampDelta: 0, key: Buffer.from('k'), value: Buffer.from('v') },
    { offsetDelta: 2, key: 'k', value: 'v', headers: {} },
    { offsetDelta: 3, key: 'k', value: 'v', headers: { 'tidemark-id': Buffer.from('tm1:job:lines:0:7:0'), many: [Buffer.from('a'), 'b'] } },
  ]
  for (const r of records) expect(Buffer.from(encodeRecord(r).buffer)).toEqual(Buffer.from(kafkajsRecord(r).buffer))
})
