import { crc32Of } from './crc.js'

/*
 * On-disk format of the file log.
 *
 * A segment file starts with a 16-byte header: the magic `TMLOG\0\0\x01`
 * (format version 1 in the last byte) and the segment's base revision (u64 LE).
 * Records follow back to back:
 *
 *   0  u32  payload length
 *   4  u64  revision
 *   12 u32  CRC-32 of the payload
 *   16 u32  CRC-32 of bytes 0..16
 *   20      payload
 *
 * The header has its own checksum so that a flipped bit in the length is
 * reported as corruption instead of looking like a record that runs past the
 * end of the file, which recovery would cut as a torn write. The revision is
 * stored so that a misplaced or missing record is caught too.
 */

export const SEGMENT_MAGIC = Buffer.from([0x54, 0x4d, 0x4c, 0x4f, 0x47, 0x00, 0x00, 0x01])
export const SEGMENT_HEADER_BYTES = 16
export const RECORD_HEADER_BYTES = 20

/** What a scan needs of a segment's file: positional reads (a FileHandle, or a read borrowed from the writer's). */
export interface PositionalReads {
  read(buffer: Buffer, offset: number, length: number, position: number): Promise<{ bytesRead: number }>
}

export function encodeSegmentHeader(base: bigint): Buffer {
  const header = Buffer.alloc(SEGMENT_HEADER_BYTES)
  SEGMENT_MAGIC.copy(header, 0)
  header.writeBigUInt64LE(base, 8)
  return header
}

/** Why a segment header is not the one expected, or undefined when it is. */
export function segmentHeaderProblem(header: Buffer, base: bigint): string | undefined {
  if (header.length < SEGMENT_HEADER_BYTES) return `its header is ${header.length} bytes long, not ${SEGMENT_HEADER_BYTES}`
  if (!header.subarray(0, 8).equals(SEGMENT_MAGIC)) return 'it does not start with the file log magic (another file, or another format version)'
  const stored = header.readBigUInt64LE(8)
  if (stored !== base) return `its header names base revision ${stored}, its file name ${base}`
  return undefined
}

/**
 * Writes the record at `offset` of `target` and returns where it ends: a
 * group of appends is encoded into one buffer and written with one call.
 */
export function encodeRecordInto(target: Buffer, offset: number, revision: bigint, payload: Uint8Array): number {
  target.writeUInt32LE(payload.byteLength, offset)
  // Two u32 halves of a Number: writeBigUInt64LE's BigInt masks and shifts
  // cost more, per record. Revisions stay far below 2^53.
  const r = Number(revision)
  if (r > Number.MAX_SAFE_INTEGER) throw new RangeError(`revision ${revision} is past 2^53 - 1`)
  target.writeUInt32LE(r % 0x1_0000_0000, offset + 4)
  target.writeUInt32LE(Math.floor(r / 0x1_0000_0000), offset + 8)
  target.writeUInt32LE(crc32Of(payload, 0, payload.byteLength), offset + 12)
  target.writeUInt32LE(crc32Of(target, offset, offset + 16), offset + 16)
  target.set(payload, offset + RECORD_HEADER_BYTES)
  return offset + RECORD_HEADER_BYTES + payload.byteLength
}

/** One step of a scan: a record, or why the scan stopped at `pos`. */
export type ScanStep =
  | { kind: 'record'; revision: bigint; pos: number; end: number; payload: Buffer }
  /** The file ends at `pos` exactly: a clean end. */
  | { kind: 'end'; pos: number }
  /** The file ends inside the record at `pos`: a write in progress, or a torn one. */
  | { kind: 'incomplete'; pos: number }
  /** The record header at `pos` is all zeros: space that a crash extended but never wrote. */
  | { kind: 'zero'; pos: number }
  | { kind: 'corrupt'; pos: number; problem: string }

const CHUNK_BYTES = 64 * 1024
/**
 * The first read of a scan without an `end`, doubled on each next one up to
 * CHUNK_BYTES: a look for appends of other processes at the tail mostly
 * finds nothing or a record or two, and a thousand partitions look often
 * (issue 38).
 */
const FIRST_CHUNK_BYTES = 4 * 1024
/**
 * Steps per batch: a batch's records stay in memory (a step, its payload's
 * Buffer and its revision each) while its reader works on it, and a process
 * may have a thousand readers replaying at once. A 64 KiB chunk holds about
 * 1,600 records of 40 bytes: batches of the whole chunk held about 500 KB of
 * heap per reader, half a gigabyte at 1,024 partitions (issue 38). The rest
 * of the chunk waits in its buffer, undecoded.
 */
const MAX_BATCH_STEPS = 256

/**
 * Reads the records of one segment from byte `pos`, where the record with
 * `revision` must start, up to the end of the file as it is now. Stops at the
 * first thing that is not a valid record and says what it found; the caller
 * decides whether that is a torn tail or corruption, which depends on where
 * it is and on who holds the append lock.
 */
export async function* scanSegment(file: PositionalReads, pos: number, revision: bigint, maxRecordBytes: number): AsyncGenerator<ScanStep> {
  for await (const steps of scanSegmentBatches(file, pos, revision, maxRecordBytes)) yield* steps
}

/**
 * scanSegment in batches: the steps decoded from each chunk read, at most
 * MAX_BATCH_STEPS at a time, so that a reader of many small records pays for
 * one generator step per batch, not per record. Only the last step of the
 * last batch is not a record. Bytes from `end` on are not read: the scan
 * ends there as at the end of the file. A reader that knows where the
 * records it wants end passes it, so that a tail read of one record of
 * 1 KB does not read (and allocate) a 64 KiB chunk: 1,024 partitions
 * looking at their tails allocated hundreds of megabytes of such chunks a
 * second (issue 38).
 */
export async function* scanSegmentBatches(file: PositionalReads, pos: number, revision: bigint, maxRecordBytes: number, end = Infinity): AsyncGenerator<ScanStep[]> {
  let buf: Buffer = Buffer.alloc(0)
  let bufPos = pos
  let eof = false
  // The read of the next chunk starts before this one's batch is handed out,
  // so the disk works while the reader does. Each chunk is a new buffer: the
  // payloads of a batch stay valid however long the reader keeps them.
  let reading: Promise<{ bytesRead: number }> | undefined
  // A read whose end is known reads it at once; a look at a tail starts small.
  let chunk = end === Infinity ? FIRST_CHUNK_BYTES : CHUNK_BYTES
  try {
    for (;;) {
      const batch: ScanStep[] = []
      let step: ScanStep | undefined
      while (batch.length < MAX_BATCH_STEPS) {
        step = decodeStep(buf, pos - bufPos, pos, revision, maxRecordBytes, eof)
        if (step === undefined) break
        batch.push(step)
        if (step.kind !== 'record') break
        pos = step.end
        revision += 1n
      }
      let next: Buffer | undefined
      let available = 0
      let want = 0
      // The buffer ends inside the next record: read on, unless that is past `end`.
      if (step === undefined) {
        const at = pos - bufPos
        available = buf.length - at
        const room = end - (pos + available)
        if (room <= 0) {
          // What is left is decoded as at the end of the file.
          eof = true
        } else {
          want = Math.min(room, Math.max(chunk, recordBytes(buf, at, maxRecordBytes)))
          chunk = Math.min(CHUNK_BYTES, 2 * chunk)
          next = Buffer.allocUnsafe(available + want)
          buf.copy(next, 0, at)
          reading = file.read(next, available, want, pos + available)
          // Awaited below, or in finally when the reader stops early.
          reading.catch(() => undefined)
        }
      }
      if (batch.length > 0) yield batch
      // The last step (not a record) ends the scan.
      if (step !== undefined && step.kind !== 'record') return
      // A full batch, or `end` reached: the rest is decoded from the buffer.
      if (next === undefined) continue
      const { bytesRead } = await reading!
      reading = undefined
      if (bytesRead < want) eof = true
      buf = next.subarray(0, available + bytesRead)
      bufPos = pos
    }
  } finally {
    // A reader that stops early must not leave a read running into a file
    // its caller is about to close.
    await reading?.catch(() => undefined)
  }
}

/** The bytes the record at `at` of `buf` takes, as far as its header tells: just the header while that is not whole or not plausible. */
function recordBytes(buf: Buffer, at: number, maxRecordBytes: number): number {
  const length = buf.length - at >= RECORD_HEADER_BYTES ? buf.readUInt32LE(at) : -1
  return length < 0 || length > maxRecordBytes ? RECORD_HEADER_BYTES : RECORD_HEADER_BYTES + length
}

/**
 * The step for the record at `at` of `buf` (file position `pos`), or
 * undefined when deciding needs more of the file than `buf` holds and the
 * file goes on (`eof` false).
 */
function decodeStep(buf: Buffer, at: number, pos: number, revision: bigint, maxRecordBytes: number, eof: boolean): ScanStep | undefined {
  const available = buf.length - at
  const needed = recordBytes(buf, at, maxRecordBytes)
  if (available < needed && !eof) return undefined
  if (available === 0) return { kind: 'end', pos }
  if (available < RECORD_HEADER_BYTES) return { kind: 'incomplete', pos }
  if (crc32Of(buf, at, at + 16) !== buf.readUInt32LE(at + 16)) {
    // All zeros fail the checksum too; told apart only here, off the path
    // that every good record takes.
    if (isZero(buf.subarray(at, at + RECORD_HEADER_BYTES))) return { kind: 'zero', pos }
    return { kind: 'corrupt', pos, problem: 'its header fails its checksum' }
  }
  const stored = buf.readBigUInt64LE(at + 4)
  if (stored !== revision) return { kind: 'corrupt', pos, problem: `it names revision ${stored} where ${revision} belongs` }
  const length = buf.readUInt32LE(at)
  if (length > maxRecordBytes) return { kind: 'corrupt', pos, problem: `its length ${length} exceeds maxRecordBytes (${maxRecordBytes})` }
  if (available < needed) return { kind: 'incomplete', pos }
  if (crc32Of(buf, at + RECORD_HEADER_BYTES, at + needed) !== buf.readUInt32LE(at + 12)) return { kind: 'corrupt', pos, problem: 'its payload fails its checksum' }
  return { kind: 'record', revision, pos, end: pos + needed, payload: buf.subarray(at + RECORD_HEADER_BYTES, at + needed) }
}

/** Whether every byte of the file from `pos` to its end is zero. */
export async function zeroFrom(file: PositionalReads, pos: number): Promise<boolean> {
  const buf = Buffer.allocUnsafe(CHUNK_BYTES)
  for (;;) {
    const { bytesRead } = await file.read(buf, 0, buf.length, pos)
    if (bytesRead === 0) return true
    if (!isZero(buf.subarray(0, bytesRead))) return false
    pos += bytesRead
  }
}

function isZero(bytes: Buffer): boolean {
  for (let i = 0; i < bytes.length; i++) if (bytes[i] !== 0) return false
  return true
}
