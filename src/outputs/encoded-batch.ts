// The batch a sink's sendEncoded() gets, and the loop that reads its
// records' fields for a sink that builds its own messages: apart from the
// format's writer and readers (record.ts), because it runs for every record
// delivered and is written for that.
import { MAGIC_0, MAGIC_1, MAGIC_2, MAGIC_3, RecordReader, sameBytes, type EachRecordFields } from './record.js'
import type { EncodedRecords, OutboxRecord } from './types.js'

/**
 * A batch of checked records in their binary form, each a view of the
 * outbox entry it is framed in: the EncodedRecords a sink's sendEncoded()
 * gets. Nothing is decoded unless the sink asks; a topic is read through
 * RecordReader's text cache (a job emits to few topics).
 */
export class EncodedBatch implements EncodedRecords {
  readonly #chunks: Buffer[] = []
  /** Per record: where its binary form starts and ends in its chunk (length prefix excluded). */
  readonly #at: number[] = []
  readonly #end: number[] = []
  /** The reader of the last chunk a topic was read from: its text cache reuses the topic string. */
  #reader: RecordReader | undefined

  get length(): number {
    return this.#at.length
  }

  /** Adds the records framed at starts[from, to) of `chunk`. */
  add(chunk: Buffer, starts: readonly number[], from: number, to: number): void {
    for (let i = from; i < to; i++) {
      this.#chunks.push(chunk)
      this.#at.push(starts[i]! + 4)
      this.#end.push(starts[i + 1]!)
    }
  }

  #index(i: number): number {
    if (!Number.isInteger(i) || i < 0 || i >= this.#at.length) throw new RangeError(`record index ${i} is out of range [0, ${this.#at.length})`)
    return this.#at[i]!
  }

  topic(i: number): string {
    const at = this.#index(i)
    const b = this.#chunks[i]!
    if (this.#reader?.b !== b) this.#reader = new RecordReader(b)
    const reader = this.#reader
    reader.begin(at, this.#end[i]!)
    reader.skipText()
    return reader.text(0)
  }

  bytes(i: number): Buffer {
    const at = this.#index(i)
    return this.#chunks[i]!.subarray(at, this.#end[i]!)
  }

  record(i: number): OutboxRecord {
    const at = this.#index(i)
    return new RecordReader(this.#chunks[i]!).record(at, this.#end[i]!)
  }

  /**
   * eachEncodedRecord() of this batch: what RecordReader.fields() reads, in
   * one loop over locals, because it runs for every record a Kafka sink
   * sends (through fields() it was about a fifth of the CPU by which the
   * outbox job of `bench outputs` trailed a direct producer on the main
   * thread, 0.3 µs per record): lengths read byte by byte (Buffer's readers
   * check their argument on every call), views made from the chunk's
   * ArrayBuffer (subarray() adjusts its bounds first), and the topic and
   * header names kept while their bytes repeat. The records here were
   * checked when their entry was framed, or written by this process; any
   * length that does not fit still goes to RecordReader.fields(), which
   * throws the error decoding throws.
   */
  each(each: EachRecordFields): void {
    const chunks = this.#chunks
    const starts = this.#at
    const ends = this.#end
    let b: Buffer = EMPTY
    let ab = b.buffer
    let base = 0
    // The last topic and header names read, and where their bytes are in `b`.
    let topic = ''
    let topicAt = -1
    let topicN = -1
    const names: Array<{ at: number; n: number; text: string }> = []
    for (let i = 0; i < starts.length; i++) {
      const end = ends[i]!
      if (chunks[i] !== b) {
        b = chunks[i]!
        ab = b.buffer
        base = b.byteOffset
        topicAt = -1
        names.length = 0
      }
      let at = starts[i]!
      if (end - at < MIN_RECORD || b[at] !== MAGIC_0 || b[at + 1] !== MAGIC_1 || b[at + 2] !== MAGIC_2 || b[at + 3] !== MAGIC_3) return this.#fallback(i, each)
      // The id is skipped: a sink sends it as the tidemark-id header.
      at += 6 + ((b[at + 4]! << 8) | b[at + 5]!)
      if (at + 2 > end) return this.#fallback(i, each)
      const n = (b[at]! << 8) | b[at + 1]!
      at += 2
      if (at + n + 12 > end) return this.#fallback(i, each)
      if (n !== topicN || topicAt < 0 || !sameBytes(b, topicAt, at, n)) {
        topic = b.toString('utf8', at, at + n)
        topicAt = at
        topicN = n
      }
      at += n
      const partition = (b[at]! << 24) | (b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!
      at += 4
      const keyN = (b[at]! << 24) | (b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!
      at += 4
      if (keyN < -1 || at + Math.max(keyN, 0) + 6 > end) return this.#fallback(i, each)
      const key = keyN === -1 ? null : Buffer.from(ab, base + at, keyN)
      if (keyN > 0) at += keyN
      const valueN = (b[at]! << 24) | (b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!
      at += 4
      if (valueN < -1 || at + Math.max(valueN, 0) + 2 > end) return this.#fallback(i, each)
      const value = valueN === -1 ? null : Buffer.from(ab, base + at, valueN)
      if (valueN > 0) at += valueN
      const count = (b[at]! << 8) | b[at + 1]!
      at += 2
      const headers: Record<string, Buffer> = {}
      for (let h = 0; h < count; h++) {
        if (at + 2 > end) return this.#fallback(i, each)
        const nameN = (b[at]! << 8) | b[at + 1]!
        at += 2
        if (at + nameN + 4 > end) return this.#fallback(i, each)
        let seen = names[h]
        if (seen === undefined || seen.n !== nameN || !sameBytes(b, seen.at, at, nameN)) names[h] = seen = { at, n: nameN, text: b.toString('utf8', at, at + nameN) }
        at += nameN
        // u32: a length of 2 GiB or more is negative here, and refused below.
        const valueN = (b[at]! << 24) | (b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!
        at += 4
        if (valueN < 0 || at + valueN > end) return this.#fallback(i, each)
        headers[seen.text] = Buffer.from(ab, base + at, valueN)
        at += valueN
      }
      if (at !== end) return this.#fallback(i, each)
      each(topic, partition, key, value, headers)
    }
  }

  /** Record i and those after it through RecordReader.fields(): the same fields, or its error for a damaged record. */
  #fallback(from: number, each: EachRecordFields): void {
    let reader: RecordReader | undefined
    for (let i = from; i < this.#at.length; i++) {
      const b = this.#chunks[i]!
      if (reader?.b !== b) reader = new RecordReader(b)
      reader.fields(this.#at[i]!, this.#end[i]!, each)
    }
  }
}

const EMPTY: Buffer = Buffer.alloc(0)
/** The smallest record: magic, empty id and topic, partition, two null parts, no header. */
const MIN_RECORD = 4 + 2 + 2 + 4 + 4 + 4 + 2

/**
 * Hands each record of `records` to `each` in order, decoded but for its id
 * (the `tidemark-id` header holds it): for a sink that builds its own
 * messages from the binary form, without an OutboxRecord and an id string
 * per record. Throws an Error naming what is wrong, as decoding does.
 */
export function eachEncodedRecord(records: EncodedRecords, each: EachRecordFields): void {
  if (records instanceof EncodedBatch) return records.each(each)
  for (let i = 0; i < records.length; i++) {
    const b = records.bytes(i)
    new RecordReader(b).fields(0, b.length, each)
  }
}

