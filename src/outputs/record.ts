import type { Codec } from '../store/codec.js'
import type { OutboxRecord } from './types.js'
import { describeValue } from '../util/describe-value.js'

/** The first bytes of an output record (OutboxChunkWriter writes them too). */
export const MAGIC = Buffer.from('TMO\x01', 'latin1')
const [MAGIC_0, MAGIC_1, MAGIC_2, MAGIC_3] = MAGIC as unknown as [number, number, number, number]

/**
 * The binary form of an output record: the outbox's value and the entry of
 * a file-log sink. Big-endian:
 *
 *   'T' 'M' 'O' 0x01
 *   u16 id length,    id (UTF-8)
 *   u16 topic length, topic (UTF-8)
 *   i32 partition (-1: by key)
 *   i32 key length (-1: null),   key
 *   i32 value length (-1: null), value
 *   u16 header count, then per header: u16 name length, name (UTF-8), u32 value length, value
 */
export function encodeOutboxRecord(r: OutboxRecord): Buffer {
  const id = Buffer.from(r.id, 'utf8')
  const topic = Buffer.from(r.topic, 'utf8')
  const headers = Object.entries(r.headers).map(([name, value]) => [Buffer.from(name, 'utf8'), value] as const)
  let size = 4 + 2 + id.length + 2 + topic.length + 4 + 4 + (r.key?.length ?? 0) + 4 + (r.value?.length ?? 0) + 2
  for (const [name, value] of headers) size += 2 + name.length + 4 + value.length
  const out = Buffer.allocUnsafe(size)
  let at = MAGIC.copy(out, 0)
  at = out.writeUInt16BE(id.length, at)
  at += id.copy(out, at)
  at = out.writeUInt16BE(topic.length, at)
  at += topic.copy(out, at)
  at = out.writeInt32BE(r.partition, at)
  for (const part of [r.key, r.value]) {
    at = out.writeInt32BE(part === null ? -1 : part.length, at)
    if (part !== null) at += part.copy(out, at)
  }
  at = out.writeUInt16BE(headers.length, at)
  for (const [name, value] of headers) {
    at = out.writeUInt16BE(name.length, at)
    at += name.copy(out, at)
    at = out.writeUInt32BE(value.length, at)
    at += value.copy(out, at)
  }
  return out
}

/** The inverse of encodeOutboxRecord; throws an Error naming what is wrong (callers wrap it as a decode failure). */
export function decodeOutboxRecord(bytes: Uint8Array): OutboxRecord {
  if (!(bytes instanceof Uint8Array)) throw new TypeError(`decodeOutboxRecord(bytes): bytes must be a Uint8Array, got ${describeValue(bytes)}`)
  const b = asBuffer(bytes)
  return new RecordReader(b).record(0, b.length)
}

/**
 * Reads one record in b[at, end). A class rather than closures inside the
 * decode: the publisher decodes every delivered record, and a closure per
 * field per record was a measurable share of delivery. One reader decodes a
 * whole outbox entry, whose records mostly share their topic and header
 * names: a text equal to the one read before is returned as that string.
 * Exported for EncodedBatch only.
 */
export class RecordReader {
  at = 0
  end = 0
  /** The last record's fields after its id (#rest): no object or closure per record. */
  topic = ''
  partition = 0
  key: Buffer | null = null
  value: Buffer | null = null
  headers: Record<string, Buffer> = {}
  /** The last texts read and where their bytes are in `b`: reused when the same bytes come again. */
  readonly #seen: Array<{ at: number; n: number; text: string }> = []

  constructor(readonly b: Buffer) {}

  need(n: number): void {
    if (this.at + n > this.end) throw new Error(`output record truncated at byte ${this.at} (needs ${n} more of ${this.end})`)
  }

  /** u16 length + UTF-8 text; `slot` picks the text it is likely equal to (topic 0, header names 1+), none for a text unique per record (the id). */
  text(slot?: number): string {
    this.need(2)
    const b = this.b
    const n = b.readUInt16BE(this.at)
    this.at += 2
    this.need(n)
    const at = this.at
    this.at += n
    if (slot === undefined) return b.toString('utf8', at, at + n)
    const seen = this.#seen[slot]
    if (seen !== undefined && seen.n === n && sameBytes(b, seen.at, at, n)) return seen.text
    const text = b.toString('utf8', at, at + n)
    if (n <= MAX_REUSED_TEXT) this.#seen[slot] = { at, n, text }
    return text
  }

  part(): Buffer | null {
    this.need(4)
    const n = this.b.readInt32BE(this.at)
    this.at += 4
    if (n === -1) return null
    if (n < 0) throw new Error(`bad length ${n}`)
    this.need(n)
    const s = this.b.subarray(this.at, this.at + n)
    this.at += n
    return s
  }

  /** Starts reading the record in b[at, end): past its magic. */
  begin(at: number, end: number): void {
    this.at = at
    this.end = end
    this.need(4)
    // Compared here: Buffer.compare's call into C++ cost more than these
    // four bytes, once per record a delivery sends.
    const b = this.b
    if (b[at] !== MAGIC_0 || b[at + 1] !== MAGIC_1 || b[at + 2] !== MAGIC_2 || b[at + 3] !== MAGIC_3) throw new Error('not an output record (no TMO\\x01 magic)')
    this.at += 4
  }

  /** u16 length + bytes, skipped. */
  skipText(): void {
    this.need(2)
    const n = this.b.readUInt16BE(this.at)
    this.at += 2
    this.need(n)
    this.at += n
  }

  /** i32 length (-1: null) + bytes, skipped. */
  skipPart(): void {
    this.need(4)
    const n = this.b.readInt32BE(this.at)
    this.at += 4
    if (n === -1) return
    if (n < 0) throw new Error(`bad length ${n}`)
    this.need(n)
    this.at += n
  }

  /**
   * Checks the record in b[at, end) as record() does (the same errors for
   * the same bytes), without decoding a field: what the publisher does for
   * a sink that takes records in their binary form (sendEncoded).
   */
  check(at: number, end: number): void {
    const b = this.b
    this.begin(at, end)
    this.skipText()
    this.skipText()
    this.need(4)
    this.at += 4
    this.skipPart()
    this.skipPart()
    this.need(2)
    const count = b.readUInt16BE(this.at)
    this.at += 2
    for (let i = 0; i < count; i++) {
      this.skipText()
      this.need(4)
      const n = b.readUInt32BE(this.at)
      this.at += 4
      this.need(n)
      this.at += n
    }
    if (this.at !== end) throw new Error(`${end - this.at} trailing bytes after the output record`)
  }

  /**
   * The record in b[at, end) without its id (a sink sends it as the
   * `tidemark-id` header, which is among the headers): checked as record()
   * checks it, its fields handed to `each` rather than put in an object.
   */
  fields(at: number, end: number, each: EachRecordFields): void {
    this.begin(at, end)
    this.skipText()
    this.#rest(end)
    each(this.topic, this.partition, this.key, this.value, this.headers)
  }

  /** The record in b[at, end). */
  record(at: number, end: number): OutboxRecord {
    this.begin(at, end)
    const id = this.text()
    this.#rest(end)
    return new DecodedRecord(id, this.topic, this.partition, this.key, this.value, this.headers, this.b.subarray(at, end))
  }

  #rest(end: number): void {
    const b = this.b
    this.topic = this.text(0)
    this.need(4)
    this.partition = b.readInt32BE(this.at)
    this.at += 4
    this.key = this.part()
    this.value = this.part()
    this.need(2)
    const count = b.readUInt16BE(this.at)
    this.at += 2
    const headers: Record<string, Buffer> = {}
    for (let i = 0; i < count; i++) {
      const name = this.text(1 + i)
      this.need(4)
      const n = b.readUInt32BE(this.at)
      this.at += 4
      this.need(n)
      headers[name] = b.subarray(this.at, this.at + n)
      this.at += n
    }
    this.headers = headers
    if (this.at !== end) throw new Error(`${end - this.at} trailing bytes after the output record`)
  }
}

/** Texts up to this many bytes are compared with the last one of their slot before being decoded. */
const MAX_REUSED_TEXT = 64

function sameBytes(b: Buffer, x: number, y: number, n: number): boolean {
  for (let i = 0; i < n; i++) if (b[x + i] !== b[y + i]) return false
  return true
}

/**
 * A decoded record: plain fields, and the bytes it was read from, so that a
 * sink writing the binary form (fileLogSink) appends them instead of
 * encoding the record again. In a private field, which a copy
 * ({ ...record, topic }) does not take: a copy is encoded afresh. (A
 * WeakMap from record to bytes did the same at twice the cost.)
 */
class DecodedRecord implements OutboxRecord {
  readonly #bytes: Buffer

  constructor(
    readonly id: string,
    readonly topic: string,
    readonly partition: number,
    readonly key: Buffer | null,
    readonly value: Buffer | null,
    readonly headers: Record<string, Buffer>,
    bytes: Buffer,
  ) {
    this.#bytes = bytes
  }

  static bytesOf(r: OutboxRecord): Buffer | undefined {
    return #bytes in r ? r.#bytes : undefined
  }
}

/** encodeOutboxRecord(r), or the bytes `r` was decoded from (the same bytes). */
export function outboxRecordBytes(r: OutboxRecord): Buffer {
  return DecodedRecord.bytesOf(r) ?? encodeOutboxRecord(r)
}

/**
 * An outbox entry holds the records one transaction emitted (a chunk), so
 * that emitting costs one LevelDB entry per batch rather than one per
 * record (that entry, its delete and its tombstone were most of the cost of
 * an emit). Big-endian:
 *
 *   'T' 'M' 'C' 0x01
 *   u32 record count
 *   per record: u32 length, the record's binary form (encodeOutboxRecord)
 *
 * Its key is the outboxKey() of its first record, so entries scan in emit order.
 */
export const CHUNK_MAGIC = Buffer.from('TMC\x01', 'latin1')
export const CHUNK_HEADER_BYTES = 8

/** The records of an outbox entry, each with the byte range of its framed form (length prefix included). */
export interface OutboxChunk {
  readonly records: OutboxRecord[]
  /** starts[i]: where record i's length prefix begins; starts[count]: the end. */
  readonly starts: number[]
}

/** Decodes an outbox entry; throws an Error naming what is wrong. */
export function decodeOutboxChunk(bytes: Uint8Array): OutboxChunk {
  const records: OutboxRecord[] = []
  const starts = walkOutboxChunk(bytes, (reader, at, end) => { records.push(reader.record(at, end)) })
  return { records, starts }
}

/**
 * The starts[] of an outbox entry (see OutboxChunk), each record checked as
 * decodeOutboxChunk() checks it (the same errors) but not decoded; with
 * `check` false only the entry's framing is (its magic, count and lengths).
 */
export function frameOutboxChunk(bytes: Uint8Array, check = true): number[] {
  return walkOutboxChunk(bytes, check ? checkRecord : undefined)
}

function checkRecord(reader: RecordReader, at: number, end: number): void {
  reader.check(at, end)
}

function walkOutboxChunk(bytes: Uint8Array, each: ((reader: RecordReader, at: number, end: number) => void) | undefined): number[] {
  const b = asBuffer(bytes)
  if (b.length < CHUNK_HEADER_BYTES || b.compare(CHUNK_MAGIC, 0, 4, 0, 4) !== 0) throw new Error('not an outbox entry (no TMC\\x01 magic)')
  const count = b.readUInt32BE(4)
  const starts: number[] = []
  const reader = new RecordReader(b)
  let at = CHUNK_HEADER_BYTES
  for (let i = 0; i < count; i++) {
    if (at + 4 > b.length) throw new Error(`outbox entry truncated at record ${i} of ${count}`)
    const n = b.readUInt32BE(at)
    if (at + 4 + n > b.length) throw new Error(`outbox entry truncated in record ${i} of ${count}`)
    starts.push(at)
    each?.(reader, at + 4, at + 4 + n)
    at += 4 + n
  }
  if (at !== b.length) throw new Error(`${b.length - at} trailing bytes after the outbox entry's ${count} records`)
  starts.push(at)
  return starts
}

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
}

/**
 * The id of the record framed at `start` (a starts[] position) of a checked
 * outbox entry (decodeOutboxChunk or frameOutboxChunk passed it).
 */
export function outboxRecordIdAt(chunk: Buffer, start: number): string {
  const reader = new RecordReader(chunk)
  reader.begin(start + 4, start + 4 + chunk.readUInt32BE(start))
  return reader.text()
}

/** A record's fields as eachEncodedRecord() hands them over (key, value and header values are views, valid while the batch is). */
export type EachRecordFields = (topic: string, partition: number, key: Buffer | null, value: Buffer | null, headers: Record<string, Buffer>) => void

/** The records and the bytes of their binary forms (framing excluded) of an outbox entry, from its header alone. */
export function outboxChunkSize(bytes: Uint8Array): { records: number; bytes: number } {
  const b = asBuffer(bytes)
  if (b.length < CHUNK_HEADER_BYTES || b.compare(CHUNK_MAGIC, 0, 4, 0, 4) !== 0) throw new Error('not an outbox entry (no TMC\\x01 magic)')
  const records = b.readUInt32BE(4)
  return { records, bytes: b.length - CHUNK_HEADER_BYTES - 4 * records }
}

/** An outbox entry of the records framed in `chunk` from `from` (a starts[] position) to its end. */
export function outboxChunkTail(chunk: Buffer, from: number, records: number): Buffer {
  const out = Buffer.allocUnsafe(CHUNK_HEADER_BYTES + chunk.length - from)
  CHUNK_MAGIC.copy(out, 0)
  out.writeUInt32BE(records, 4)
  chunk.copy(out, CHUNK_HEADER_BYTES, from)
  return out
}

/** A codec for events of a file log written by fileLogSink: each event is an OutboxRecord (ids in headers['tidemark-id']). */
export function outboxRecordCodec(): Codec<OutboxRecord> {
  return { name: 'tidemark-outbox-record', encode: encodeOutboxRecord, decode: decodeOutboxRecord }
}

/**
 * The outbox key of an emitted record: u16 length + source topic, u32
 * source partition, u64 offset, u32 index (big-endian), so that a scan
 * delivers in (source partition, offset, index) order.
 */
export function outboxKey(topic: string, partition: number, offset: bigint, index: number): Buffer {
  const t = Buffer.from(topic, 'utf8')
  const key = Buffer.allocUnsafe(2 + t.length + 4 + 8 + 4)
  let at = key.writeUInt16BE(t.length, 0)
  at += t.copy(key, at)
  at = key.writeUInt32BE(partition, at)
  at = key.writeBigUInt64BE(offset, at)
  key.writeUInt32BE(index, at)
  return key
}

/** The outbox key of the record (offset, index) of the same source partition as `key` (an outboxKey()). */
export function outboxKeyAt(key: Uint8Array, offset: bigint, index: number): Buffer {
  const out = Buffer.from(key)
  out.writeBigUInt64BE(offset, out.length - 12)
  out.writeUInt32BE(index, out.length - 4)
  return out
}
