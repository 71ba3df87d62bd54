import type { FileHandle } from 'node:fs/promises'
import { RECORD_HEADER_BYTES, encodeRecordInto } from '../record.js'
import { io, writeAll } from './io.js'
import { INDEX_STRIDE, type Segment } from './segments.js'

/**
 * A group of appends stops taking entries at either cap, so the buffer it is
 * encoded into stays bounded; an entry larger than the byte cap forms a group
 * of its own.
 */
export const GROUP_MAX_BYTES = 4 * 1024 * 1024
export const GROUP_MAX_ENTRIES = 10_000

/** One call to append or appendConditionally, waiting in a group for its answer. */
export interface PendingAppend {
  data: Uint8Array
  /** Undefined for an unconditional append. */
  expected: bigint | undefined
  resolve(revision: bigint | undefined): void
  reject(error: unknown): void
}

/** Appends of one FileLog written together under one lock acquisition (see #commit). */
export interface AppendGroup {
  entries: PendingAppend[]
  /** Encoded size of the entries, for GROUP_MAX_BYTES. */
  bytes: number
  /** By #commit: each entry's revision, or undefined for a conditional entry that lost. */
  verdicts: Array<bigint | undefined>
  /** By #commit: entries[0..decided) are written, or lost to entries that are. */
  decided: number
  /** By #commit: the file its last records went to, which #flush syncs after the lock is released. */
  written: FileHandle | undefined
  /** By #commit with `sync`: the flush of `written`, started as soon as the last write returned. */
  flushing: Promise<void> | undefined
  /** Appended by the lock's holder in another process (append-relay.ts), which answered its entries. */
  relayed?: true
}

export interface RunningFlush {
  file: FileHandle
  done: Promise<void>
  /** The flush for the groups written after `done` started; begins when it ends. */
  next: Promise<void> | undefined
}

/** Writes the records of entries[first..end) that took effect, back to back at the end of the writer's segment. */
export async function writeGroupRecords(
  dir: string,
  writer: { segment: Segment; file: FileHandle },
  entries: readonly PendingAppend[],
  verdicts: ReadonlyArray<bigint | undefined>,
  first: number,
  end: number,
  bytes: number,
): Promise<void> {
  const buffer = Buffer.allocUnsafe(bytes)
  let offset = 0
  // The records that took effect have consecutive revisions from the
  // first one's: counted as Numbers, one BigInt step per group rather than
  // several per record.
  let firstRevision: bigint | undefined
  let last = -1n
  for (let i = first; i < end; i++) {
    const revision = verdicts[i]
    if (revision === undefined) continue
    firstRevision ??= revision
    offset = encodeRecordInto(buffer, offset, revision, entries[i]!.data)
    last = revision
  }
  const { segment, file } = writer
  const start = segment.knownPos
  await io('append', dir, () => writeAll(file, buffer, start))
  if (firstRevision === undefined) return
  // Only now: after a failed write the segment's known end stays where it
  // was, and the next catch-up under the lock keeps the whole records the
  // write left (its callers got the error: the outcome is unknown, as it
  // was for a single append) and cuts a torn one. What learn() (segments.ts) does for
  // each record, for the run at once.
  const positions = segment.positions
  let slot = Number(firstRevision - segment.base)
  let pos = start
  for (let i = first; i < end; i++) {
    if (verdicts[i] === undefined) continue
    if (slot === positions.length * INDEX_STRIDE) positions.push(pos)
    slot++
    pos += RECORD_HEADER_BYTES + entries[i]!.data.byteLength
  }
  if (last >= segment.knownRevision) {
    segment.knownRevision = last + 1n
    segment.knownPos = pos
  }
}
