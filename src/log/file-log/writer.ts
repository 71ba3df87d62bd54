import type { FileHandle } from 'node:fs/promises'
import type { Segment, SegmentFile } from './segments.js'

/**
 * The tail segment as this process writes it, and the reads of this process
 * that go through the same descriptor. A process that both appends to a log
 * and reads its tail (a PartitionProcessor and its own appends, a relay's
 * holder) needs no second descriptor for the tail: with 1,024 logs in one
 * process, readers opening the tail again held about a thousand descriptors
 * at once (issue 38).
 */
export interface Writer {
  segment: Segment
  file: FileHandle
  /** Reads through `file` in flight: the file closes only after they end. */
  reads: number
  /** Called when `reads` drops to 0, for the close that waits for it. */
  drained: (() => void) | undefined
}

export function newWriter(segment: Segment, file: FileHandle): Writer {
  return { segment, file, reads: 0, drained: undefined }
}

/**
 * Reads through the writer's descriptor while `current()` is still that
 * writer. Each read holds it only while the read runs, so a reader that
 * pauses (or is abandoned) between reads never keeps the writer from
 * closing; once it has closed (a roll, the log's close), the reader opens the
 * segment itself and reads on from there.
 */
export function borrowWriter(writer: Writer, current: () => Writer | undefined, open: () => Promise<FileHandle>): SegmentFile {
  let own: Promise<FileHandle> | undefined
  return {
    async read(buffer, offset, length, position) {
      if (own === undefined && current() === writer) {
        writer.reads += 1
        try {
          return await writer.file.read(buffer, offset, length, position)
        } finally {
          writer.reads -= 1
          if (writer.reads === 0) writer.drained?.()
        }
      }
      own ??= open()
      return (await own).read(buffer, offset, length, position)
    },
    async close() {
      if (own !== undefined) await (await own.catch(() => undefined))?.close()
    },
  }
}

/** Waits for the reads borrowing the writer's file: called after it stops being current, before the file closes. */
export async function readsEnded(writer: Writer): Promise<void> {
  while (writer.reads > 0) await new Promise<void>((resolve) => { writer.drained = resolve })
  writer.drained = undefined
}
