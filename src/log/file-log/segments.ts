import { link, open, unlink, writeFile, type FileHandle } from 'node:fs/promises'
import { join } from 'node:path'
import { fsyncDir } from '../../util/index.js'
import type { LogEntry } from '../revisioned-log.js'
import { RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, encodeSegmentHeader, scanSegment, scanSegmentBatches, segmentHeaderProblem, zeroFrom, type PositionalReads, type ScanStep } from '../record.js'
import { corrupt, io, ioError, truncated } from './io.js'

export const SEGMENT_NAME = /^(\d{20})\.seg$/
/** Every INDEX_STRIDE-th record's byte position is remembered, so a read seeks near its start. */
export const INDEX_STRIDE = 64

/** One segment file of a log, with what this process has learnt of it. */
export interface Segment {
  base: bigint
  path: string
  /** positions[i] is where the record base + i * INDEX_STRIDE starts. */
  positions: number[]
  /** The scanned prefix ends here, before the record `knownRevision`. */
  knownPos: number
  knownRevision: bigint
}

/** A file to read a segment through (its own descriptor, or the writer's: writer.ts), closed by its reader. */
export interface SegmentFile extends PositionalReads {
  close(): Promise<void>
}

/** A segment not scanned yet. */
export function newSegment(dir: string, base: bigint): Segment {
  return {
    base,
    path: join(dir, `${base.toString().padStart(20, '0')}.seg`),
    positions: [SEGMENT_HEADER_BYTES],
    knownPos: SEGMENT_HEADER_BYTES,
    knownRevision: base,
  }
}

/**
 * Reads the records from `revision` up to `stop` out of the segments (a
 * getter: a refresh may list them again meanwhile), each through the file
 * `openFile` gives. One batch per chunk read from a segment; the entries
 * share the chunk, which is never written again.
 */
export async function* readSegmentBatches(
  dir: string,
  segments: () => readonly Segment[],
  range: { from: bigint; stop: bigint },
  maxRecordBytes: number,
  assertOpen: () => void,
  openFile: (segment: Segment) => Promise<SegmentFile>,
): AsyncGenerator<LogEntry[]> {
  const { from, stop } = range
  let revision = from
  let index = segmentIndex(segments(), revision)
  while (revision < stop) {
    assertOpen()
    const segment = segments()[index]
    if (segment === undefined) break
    const file = await openFile(segment)
    try {
      const start = seek(segment, revision)
      let at = start.revision
      const last = index === segments().length - 1
      // Where the records before `stop` end, when this process has learnt it.
      const end = segment.knownRevision >= stop ? segment.knownPos : Infinity
      scan: for await (const steps of scanSegmentBatches(file, start.pos, at, maxRecordBytes, end)) {
        const entries: LogEntry[] = []
        let done = false
        for (const step of steps) {
          if (at >= stop) {
            done = true
            break
          }
          if (step.kind !== 'record') {
            // A sealed segment ends cleanly at its last record; the last one
            // may end in an append in progress, which is not there yet.
            if (!last || step.kind === 'corrupt') checkStop(dir, segment, step, at, last)
            done = true
            break
          }
          learn(segment, step)
          if (step.revision >= revision) {
            entries.push({ revision: step.revision, data: step.payload })
            revision = step.revision + 1n
          }
          at = step.revision + 1n
        }
        if (entries.length > 0) {
          assertOpen()
          yield entries
        }
        if (done) break scan
      }
    } finally {
      await file.close()
    }
    index += 1
    const next = segments()[index]
    if (next !== undefined && revision < stop && next.base !== revision) {
      throw corrupt(dir, revision, `segment ${segment.path} ends before revision ${revision} but the next segment starts at ${next.base}`)
    }
  }
}

/** Learns the records appended to `segment` since the last look; true if it ends in a whole record. */
export async function scanTail(dir: string, segment: Segment, file: FileHandle, maxRecordBytes: number): Promise<boolean> {
  let clean = true
  for await (const step of scanSegment(file, segment.knownPos, segment.knownRevision, maxRecordBytes)) {
    if (step.kind === 'record') learn(segment, step)
    else if (step.kind === 'corrupt') throw corrupt(dir, segment.knownRevision, `the record at byte ${step.pos} of ${segment.path}: ${step.problem}`, segment.path, step.pos)
    else clean = step.kind === 'end'
  }
  return clean
}

/** Cuts an incomplete or zero-filled last record off the tail segment, open for writing as `file`. */
export async function repairTail(dir: string, tail: Segment, file: FileHandle, maxRecordBytes: number): Promise<void> {
  const { size } = await io('stat', dir, () => file.stat())
  if (size === tail.knownPos) return
  if (size > tail.knownPos + RECORD_HEADER_BYTES) {
    // More than a header follows the last good record: it is a torn write
    // only if the record there runs past the end or was never written.
    for await (const step of scanSegment(file, tail.knownPos, tail.knownRevision, maxRecordBytes)) {
      if (step.kind === 'zero' && !(await zeroFrom(file, step.pos))) {
        throw corrupt(dir, tail.knownRevision, `zeros at byte ${step.pos} of ${tail.path} are followed by data`, tail.path, step.pos)
      }
      break
    }
  }
  await io('repair', dir, async () => {
    await file.truncate(tail.knownPos)
    await file.datasync()
  })
}

/**
 * A new segment appears complete or not at all: its header is written and
 * flushed under a private name first and then linked into place (link, not
 * rename, fails instead of replacing a segment that somehow exists).
 */
export async function createSegmentFile(dir: string, base: bigint, sync: boolean): Promise<void> {
  const name = `${base.toString().padStart(20, '0')}.seg`
  const temp = join(dir, `${name}.${process.pid}.tmp`)
  await io('create segment', dir, async () => {
    await writeFile(temp, encodeSegmentHeader(base), { flush: sync })
    try {
      await link(temp, join(dir, name))
    } finally {
      await unlink(temp)
    }
    if (sync) await fsyncDir(dir)
  })
}

export async function openSegment(dir: string, segment: Segment, from: bigint | undefined, oldest: bigint | undefined): Promise<FileHandle> {
  let file: FileHandle
  try {
    file = await open(segment.path, 'r')
  } catch (err) {
    // Truncated by another process between our listing and this open.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' && from !== undefined) {
      throw truncated(dir, from, oldest ?? segment.base + 1n, err)
    }
    throw ioError(err, 'open', segment.path)
  }
  const header = Buffer.alloc(SEGMENT_HEADER_BYTES)
  const { bytesRead } = await file.read(header, 0, SEGMENT_HEADER_BYTES, 0)
  const problem = segmentHeaderProblem(header.subarray(0, bytesRead), segment.base)
  if (problem !== undefined) {
    await file.close()
    throw corrupt(dir, segment.base, `segment ${segment.path}: ${problem}`, segment.path, 0)
  }
  return file
}

/** The indexed record nearest before `revision`; the read scans forward from there. */
function seek(segment: Segment, revision: bigint): { pos: number; revision: bigint } {
  const slot = Math.min(Number((revision - segment.base) / BigInt(INDEX_STRIDE)), segment.positions.length - 1)
  return { pos: segment.positions[slot]!, revision: segment.base + BigInt(slot * INDEX_STRIDE) }
}

export function learn(segment: Segment, record: { revision: bigint; pos: number; end: number }): void {
  // The next index slot is due exactly at this offset; one BigInt step per
  // record, since reads and appends call this for every record.
  if (Number(record.revision - segment.base) === segment.positions.length * INDEX_STRIDE) segment.positions.push(record.pos)
  if (record.revision >= segment.knownRevision) {
    segment.knownRevision = record.revision + 1n
    segment.knownPos = record.end
  }
}

function checkStop(dir: string, segment: Segment, step: Exclude<ScanStep, { kind: 'record' }>, revision: bigint, last: boolean): void {
  if (step.kind === 'corrupt') {
    throw corrupt(dir, revision, `the record at byte ${step.pos} of ${segment.path}: ${step.problem}`, segment.path, step.pos)
  }
  if (!last && step.kind !== 'end') {
    throw corrupt(dir, revision, `segment ${segment.path} ends in a torn record at byte ${step.pos}, but later segments exist`, segment.path, step.pos)
  }
}

function segmentIndex(segments: readonly Segment[], revision: bigint): number {
  let index = 0
  for (let i = 0; i < segments.length; i++) if (segments[i]!.base <= revision) index = i
  return index
}
