// The batch a sink's sendEncoded() gets, and eachEncodedRecord() for a sink
// that builds its own messages from it; the format's writer and its one
// reader are in record.ts.
import { RecordReader, type EachRecordFields } from './record.js'
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

  /** eachEncodedRecord() of this batch: no view per record, one reader per chunk. */
  each(each: EachRecordFields): void {
    let reader: RecordReader | undefined
    for (let i = 0; i < this.#at.length; i++) {
      const b = this.#chunks[i]!
      if (reader?.b !== b) reader = new RecordReader(b)
      reader.fields(this.#at[i]!, this.#end[i]!, each)
    }
  }
}

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

