// The writer of outbox entries, kept apart from the reader in record.ts:
// the hot path of every emit, tuned byte by byte (see append()).
import { CHUNK_HEADER_BYTES, CHUNK_MAGIC, MAGIC } from './record.js'

const [MAGIC_0, MAGIC_1, MAGIC_2, MAGIC_3] = MAGIC as unknown as [number, number, number, number]

/**
 * Builds the outbox entry of one transaction's emits: each record is
 * encoded in one pass straight into one growing buffer (strings written
 * in place, no Buffer per field).
 */
export class OutboxChunkWriter {
  #buf: Buffer
  #used = CHUNK_HEADER_BYTES
  #count = 0
  /** Where each record's length prefix begins (the starts[] of OutboxChunk, without its end). */
  readonly #starts: number[] = []
  /**
   * The last topic and id prefix written and where their bytes are in #buf
   * (kept there when it grows): the next record's are copied from there.
   * Copying costs a sixth of writing the text again, and an entry's records
   * mostly share their topic, and all their id's first fields.
   */
  #topic: string | undefined
  #topicAt = 0
  #topicBytes = 0
  #idPrefix: string | undefined
  #idPrefixAt = 0

  constructor(capacity = 16 * 1024) {
    this.#buf = Buffer.allocUnsafe(Math.max(capacity, 256))
    CHUNK_MAGIC.copy(this.#buf, 0)
  }

  get records(): number {
    return this.#count
  }

  get byteLength(): number {
    return this.#used
  }

  /** The entry as it stands (a view: valid until the next append). */
  bytes(): Buffer {
    this.#buf.writeUInt32BE(this.#count, 4)
    return this.#buf.subarray(0, this.#used)
  }

  /** The starts[] of the entry as it stands (see OutboxChunk): what frameOutboxChunk(bytes()) returns, without walking it. */
  starts(): number[] {
    return [...this.#starts, this.#used]
  }

  /**
   * Appends a record in the binary form of encodeOutboxRecord: its headers
   * are `headers[name]` for each of `names` (checked by the caller), then
   * `tidemark-id: id`. Returns the record's length (framing excluded).
   * `idPrefix`: where given, the start of `id` that the partition's ids
   * share (upstreamKey(), ASCII like the whole id).
   */
  append(id: string, topic: string, partition: number, key: string | Uint8Array | null, value: string | Uint8Array | null, names: readonly string[] | undefined, headers: Readonly<Record<string, string | Uint8Array>> | undefined, idPrefix?: string): number {
    // An upper bound of the record's size: 3 UTF-8 bytes per UTF-16 unit.
    let bound = 4 + 4 + 2 + 3 * id.length + 2 + 3 * topic.length + 4 + 4 + sizeBound(key) + 4 + sizeBound(value) + 2 + 2 + ID_HEADER.length + 4 + 3 * id.length
    const headerCount = 1 + (names?.length ?? 0)
    if (names !== undefined) for (const name of names) bound += 2 + 3 * name.length + 4 + sizeBound(headers![name]!)
    this.#reserve(bound)
    const b = this.#buf
    const start = this.#used
    this.#starts.push(start)
    let at = start + 4
    // Byte by byte: Buffer.copy() makes a view of its source per call, which
    // cost more than these few bytes (it was an eighth of an emit).
    b[at] = MAGIC_0; b[at + 1] = MAGIC_1; b[at + 2] = MAGIC_2; b[at + 3] = MAGIC_3
    at += 4
    const idAt = at + 2
    if (idPrefix !== undefined && idPrefix === this.#idPrefix) {
      const n = idPrefix.length
      b.copyWithin(idAt, this.#idPrefixAt, this.#idPrefixAt + n)
      for (let i = n; i < id.length; i++) b[idAt + i] = id.charCodeAt(i)
      at = b.writeUInt16BE(id.length, at) + id.length
    } else {
      at = writeText(b, at, id)
      // Kept only when the id was ASCII (one byte per character), as ids are.
      if (idPrefix !== undefined && at - idAt === id.length && id.startsWith(idPrefix)) {
        this.#idPrefix = idPrefix
        this.#idPrefixAt = idAt
      }
    }
    const idEnd = at
    if (topic === this.#topic) {
      const n = this.#topicBytes
      at = putU16(b, at, n)
      b.copyWithin(at, this.#topicAt, this.#topicAt + n)
      at += n
    } else {
      const topicAt = at + 2
      at = writeText(b, at, topic)
      this.#topic = topic
      this.#topicAt = topicAt
      this.#topicBytes = at - topicAt
    }
    at = putU32(b, at, partition)
    at = writePart(b, at, key)
    at = writePart(b, at, value)
    at = b.writeUInt16BE(headerCount, at)
    if (names !== undefined) {
      for (const name of names) {
        at = writeText(b, at, name)
        at = writeBytes(b, at, headers![name]!)
      }
    }
    at = putU16(b, at, ID_HEADER.length)
    for (let i = 0; i < ID_HEADER.length; i++) b[at + i] = ID_HEADER[i]!
    at += ID_HEADER.length
    // The id's bytes again, copied from where they were just written.
    at = putU32(b, at, idEnd - idAt)
    b.copyWithin(at, idAt, idEnd)
    at += idEnd - idAt
    putU32(b, start, at - start - 4)
    this.#used = at
    this.#count++
    return at - start - 4
  }

  #reserve(n: number): void {
    if (this.#used + n <= this.#buf.length) return
    const grown = Buffer.allocUnsafe(Math.max(this.#buf.length * 2, this.#used + n))
    this.#buf.copy(grown, 0, 0, this.#used)
    this.#buf = grown
  }
}

const ID_HEADER = Buffer.from('tidemark-id', 'utf8')

function sizeBound(v: string | Uint8Array | null): number {
  return v === null ? 0 : typeof v === 'string' ? 3 * v.length : v.byteLength
}

/**
 * Writes `s` as UTF-8 at `at` (room checked by the caller); returns the
 * bytes written. Short ASCII text (an emit's topic, key, value and id are
 * mostly that) is copied a character at a time: Buffer.write's call into
 * C++ cost more than the copy itself, five times per emitted record.
 */
function utf8Into(b: Buffer, at: number, s: string): number {
  const n = s.length
  if (n > SHORT_TEXT) return b.write(s, at, 'utf8')
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i)
    if (c >= 0x80) return b.write(s, at, 'utf8')
    b[at + i] = c
  }
  return n
}

/** Text up to this many UTF-16 units goes through utf8Into's loop. */
const SHORT_TEXT = 48

/** u16 length + UTF-8 text. */
function writeText(b: Buffer, at: number, s: string): number {
  const n = utf8Into(b, at + 2, s)
  b.writeUInt16BE(n, at)
  return at + 2 + n
}

/** u32 length + bytes (a string as UTF-8). */
function writeBytes(b: Buffer, at: number, v: string | Uint8Array): number {
  const n = typeof v === 'string' ? utf8Into(b, at + 4, v) : copyInto(b, at + 4, v)
  b.writeUInt32BE(n, at)
  return at + 4 + n
}

/** i32 length (-1: null) + bytes. */
function writePart(b: Buffer, at: number, v: string | Uint8Array | null): number {
  if (v === null) return putU32(b, at, -1)
  const n = typeof v === 'string' ? utf8Into(b, at + 4, v) : copyInto(b, at + 4, v)
  putU32(b, at, n)
  return at + 4 + n
}

/*
 * Big-endian stores of values known to fit (lengths the writer measured, a
 * checked partition, -1): Buffer's writeUInt16BE and writeInt32BE check
 * their argument on every call, five times per emitted record. The typed
 * array keeps each byte's low 8 bits.
 */
function putU16(b: Buffer, at: number, n: number): number {
  b[at] = n >>> 8
  b[at + 1] = n
  return at + 2
}

/** n as u32, or as i32 when negative (two's complement): the same bytes. */
function putU32(b: Buffer, at: number, n: number): number {
  b[at] = n >>> 24
  b[at + 1] = n >>> 16
  b[at + 2] = n >>> 8
  b[at + 3] = n
  return at + 4
}

function copyInto(b: Buffer, at: number, v: Uint8Array): number {
  b.set(v, at)
  return v.byteLength
}
