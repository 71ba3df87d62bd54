import type { Codec } from '../store/codec.js'
import type { OutboxRecord } from './types.js'

const MAGIC = Buffer.from('TMO\x01', 'latin1')

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
  const b = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  let at = 0
  const need = (n: number): void => {
    if (at + n > b.length) throw new Error(`output record truncated at byte ${at} (needs ${n} more of ${b.length})`)
  }
  need(4)
  if (b.compare(MAGIC, 0, 4, 0, 4) !== 0) throw new Error('not an output record (no TMO\\x01 magic)')
  at = 4
  const text = (): string => {
    need(2)
    const n = b.readUInt16BE(at)
    at += 2
    need(n)
    const s = b.toString('utf8', at, at + n)
    at += n
    return s
  }
  const id = text()
  const topic = text()
  need(4)
  const partition = b.readInt32BE(at)
  at += 4
  const part = (): Buffer | null => {
    need(4)
    const n = b.readInt32BE(at)
    at += 4
    if (n === -1) return null
    if (n < 0) throw new Error(`bad length ${n}`)
    need(n)
    const s = b.subarray(at, at + n)
    at += n
    return s
  }
  const key = part()
  const value = part()
  need(2)
  const count = b.readUInt16BE(at)
  at += 2
  const headers: Record<string, Buffer> = {}
  for (let i = 0; i < count; i++) {
    const name = text()
    need(4)
    const n = b.readUInt32BE(at)
    at += 4
    need(n)
    headers[name] = b.subarray(at, at + n)
    at += n
  }
  if (at !== b.length) throw new Error(`${b.length - at} trailing bytes after the output record`)
  return { id, topic, partition, key, value, headers }
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
