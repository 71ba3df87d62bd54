/**
 * Just enough of LevelDB's on-disk format to tell which files of a closed
 * database are live: CURRENT names the MANIFEST, and the MANIFEST is a log of
 * VersionEdits whose sum is the set of live table files and the oldest live
 * write-ahead log. A directory can also hold files that are not live (the
 * output of a compaction that close() interrupted, files of an older
 * version that were not yet deleted); a snapshot leaves them out.
 */

import { STATE_FILE_NAME } from '../store/store-dir.js'

/** The file names a snapshot may contain (the store's state files); anything else is refused on restore. */
export const SNAPSHOT_FILE_NAME = STATE_FILE_NAME

export type LevelDbFileKind = 'table' | 'log' | 'manifest' | 'current'

export function fileKind(name: string): LevelDbFileKind | undefined {
  if (name === 'CURRENT') return 'current'
  if (/^MANIFEST-\d+$/.test(name)) return 'manifest'
  if (/^\d+\.(?:ldb|sst)$/.test(name)) return 'table'
  if (/^\d+\.log$/.test(name)) return 'log'
  return undefined
}

export function fileNumber(name: string): number {
  return Number(/(\d+)/.exec(name)?.[1] ?? NaN)
}

export function tableFileName(n: number, ext = 'ldb'): string {
  return `${String(n).padStart(6, '0')}.${ext}`
}

export interface LiveFiles {
  /** Table file number -> size in bytes. */
  tables: Map<number, number>
  /** Logs with a number at or above this one are live (and prevLogNumber's). */
  logNumber: number
  prevLogNumber: number
}

/** The manifest file that CURRENT names, from CURRENT's text. */
export function manifestFromCurrent(text: string): string {
  const name = text.trim()
  if (text.endsWith('\n') && /^MANIFEST-\d+$/.test(name)) return name
  throw new Error(`CURRENT does not name a MANIFEST file (${JSON.stringify(text.slice(0, 40))})`)
}

const BLOCK_SIZE = 32768
const HEADER_SIZE = 7

/**
 * The physical records of a LevelDB log file (the MANIFEST is one), with the
 * byte after each. A log that is still being written may end inside a
 * record; with `tornTail` such an end is where the walk stops, otherwise an error.
 */
function* physicalRecords(buf: Buffer, tornTail: boolean): Generator<{ type: number; data: Buffer; end: number }> {
  let pos = 0
  while (pos < buf.length) {
    const left = BLOCK_SIZE - (pos % BLOCK_SIZE)
    if (left < HEADER_SIZE) {
      pos += left // a block's tail too short for a header is zero padding
      continue
    }
    if (pos + HEADER_SIZE > buf.length) {
      if (tornTail) return
      throw new Error(`log ends inside a record header at byte ${pos}`)
    }
    const length = buf.readUInt16LE(pos + 4)
    const type = buf[pos + 6]!
    if (type === 0 && length === 0) {
      pos += left // preallocated zeroes: the rest of the block is empty
      continue
    }
    const end = pos + HEADER_SIZE + length
    if (end > buf.length && tornTail && length <= left - HEADER_SIZE) return
    if (end > buf.length || length > left - HEADER_SIZE) throw new Error(`log record at byte ${pos} overruns its block or the file`)
    yield { type, data: buf.subarray(pos + HEADER_SIZE, end), end }
    pos = end
  }
}

/** The records of a LevelDB log file (the MANIFEST is one), reassembled from their fragments. */
export function* logRecords(buf: Buffer): Generator<Buffer> {
  let parts: Buffer[] | undefined
  for (const { type, data, end } of physicalRecords(buf, false)) {
    switch (type) {
      case 1: // FULL
        if (parts !== undefined) throw new Error('log has a full record inside a fragmented one')
        yield data
        break
      case 2: // FIRST
        if (parts !== undefined) throw new Error('log has two first fragments in a row')
        parts = [data]
        break
      case 3: // MIDDLE
        if (parts === undefined) throw new Error('log has a middle fragment without a first one')
        parts.push(data)
        break
      case 4: // LAST
        if (parts === undefined) throw new Error('log has a last fragment without a first one')
        parts.push(data)
        yield Buffer.concat(parts)
        parts = undefined
        break
      default:
        throw new Error(`log record at byte ${end - data.length - HEADER_SIZE} has unknown type ${type}`)
    }
  }
  if (parts !== undefined) throw new Error('log ends inside a fragmented record')
}

/**
 * The length of the longest prefix of a log that ends with a complete
 * record: what a copy of a log that LevelDB may be appending to (an open
 * database's MANIFEST) keeps, so that it parses like a closed one.
 */
export function completeRecordsLength(buf: Buffer): number {
  let complete = 0
  for (const { type, end } of physicalRecords(buf, true)) if (type === 1 || type === 4) complete = end
  return complete
}

class Reader {
  pos = 0
  constructor(readonly buf: Buffer) {}
  get done(): boolean {
    return this.pos >= this.buf.length
  }
  varint(): number {
    let result = 0
    let factor = 1
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.buf.length) throw new Error('varint runs past the end of a version edit')
      const byte = this.buf[this.pos++]!
      result += (byte & 0x7f) * factor
      if ((byte & 0x80) === 0) {
        if (!Number.isSafeInteger(result)) throw new Error('varint is too large')
        return result
      }
      factor *= 128
    }
    throw new Error('varint is longer than 10 bytes')
  }
  slice(): Buffer {
    const length = this.varint()
    if (this.pos + length > this.buf.length) throw new Error('length-prefixed field runs past the end of a version edit')
    const out = this.buf.subarray(this.pos, this.pos + length)
    this.pos += length
    return out
  }
}

/** Applies every VersionEdit of a MANIFEST and returns the live set. Throws on anything it does not understand. */
export function parseLevelDbManifest(buf: Buffer): LiveFiles {
  const tables = new Map<string, { n: number; size: number }>() // "level:number"
  let logNumber = 0
  let prevLogNumber = 0
  let sawComparator = false
  for (const record of logRecords(buf)) {
    const r = new Reader(record)
    const deleted: string[] = []
    const added: Array<[string, { n: number; size: number }]> = []
    while (!r.done) {
      const tag = r.varint()
      switch (tag) {
        case 1: r.slice(); sawComparator = true; break // comparator name
        case 2: logNumber = r.varint(); break
        case 3: r.varint(); break // next file number
        case 4: r.varint(); break // last sequence
        case 5: r.varint(); r.slice(); break // compact pointer
        case 6: { const level = r.varint(); deleted.push(`${level}:${r.varint()}`); break }
        case 7: {
          const level = r.varint()
          const n = r.varint()
          const size = r.varint()
          r.slice() // smallest key
          r.slice() // largest key
          added.push([`${level}:${n}`, { n, size }])
          break
        }
        case 9: prevLogNumber = r.varint(); break
        default: throw new Error(`MANIFEST has a version edit with unknown tag ${tag}`)
      }
    }
    // LevelDB applies an edit's deletions before its additions (a trivial
    // move deletes a file from one level and adds it to the next).
    for (const key of deleted) tables.delete(key)
    for (const [key, value] of added) tables.set(key, value)
  }
  if (!sawComparator) throw new Error('MANIFEST has no comparator record: not a LevelDB MANIFEST')
  const byNumber = new Map<number, number>()
  for (const { n, size } of tables.values()) byNumber.set(n, size)
  return { tables: byNumber, logNumber, prevLogNumber }
}

export function isLiveLog(name: string, live: LiveFiles): boolean {
  const n = fileNumber(name)
  return n >= live.logNumber || (live.prevLogNumber !== 0 && n === live.prevLogNumber)
}
