import { describeValue } from '../../util/describe-value.js'
import { checkIntegerOption } from '../../util/index.js'
import { RECORD_HEADER_BYTES } from '../record.js'

export interface FileLogOptions {
  /** A segment that reached this size is closed and appends go to a new one. Truncation drops whole segments. */
  segmentBytes?: number
  /**
   * Flush every append to the disk (fdatasync) before acknowledging it
   * (default true); concurrent appends, of this process and of others, share
   * flushes. `sync: false` acknowledges once the bytes are written: that
   * survives a crash of the process, not a power loss.
   */
  sync?: boolean
  /** How long an append waits for another process's append lock before failing with TIDEMARK_LOG_LOCKED. */
  lockTimeoutMs?: number
  /** Larger entries are refused with a RangeError; a stored length above it is reported as corruption. */
  maxRecordBytes?: number
  /**
   * Only read: the log is neither created nor repaired, the append lock is
   * never taken (a reader must not stall a writer, and may lack write
   * access), and append and truncate fail with a TypeError. A torn last
   * record is treated as an append in progress: not there yet.
   */
  readOnly?: boolean
  /**
   * Processes on one Linux host that open this log with the same options
   * and `relay: true` send their appends to the process holding the append
   * lock, over a local socket, and share its groups (one write, one
   * fdatasync for all) instead of taking the lock in turn: several times
   * the rate of processes that take turns (default false; see
   * docs/sync.md). The cost: appends relayed to a holder that dies before
   * answering fail with TIDEMARK_LOG_UNAVAILABLE (retriable), and may or may
   * not be in the log, as after a failed write; without `relay` a peer's
   * death never fails another process's append.
   */
  relay?: boolean
}

export const FILE_LOG_DEFAULTS: Readonly<Required<FileLogOptions>> = Object.freeze({
  segmentBytes: 64 * 1024 * 1024,
  sync: true,
  lockTimeoutMs: 10_000,
  maxRecordBytes: 64 * 1024 * 1024,
  readOnly: false,
  relay: false,
})

export function validateOptions(options: FileLogOptions): Readonly<Required<FileLogOptions>> {
  if (typeof options !== 'object' || options === null) throw new TypeError(`options must be an object, got ${describeValue(options)}`)
  const merged = { ...FILE_LOG_DEFAULTS, ...withoutUndefined(options) }
  checkIntegerOption(merged.segmentBytes, 'segmentBytes', 4096, 2 ** 40)
  checkIntegerOption(merged.lockTimeoutMs, 'lockTimeoutMs', 0, 2 ** 31)
  checkIntegerOption(merged.maxRecordBytes, 'maxRecordBytes', 1, 2 ** 31 - RECORD_HEADER_BYTES)
  if (typeof merged.sync !== 'boolean') throw new TypeError(`sync must be a boolean, got ${describeValue(merged.sync)}`)
  if (typeof merged.readOnly !== 'boolean') throw new TypeError(`readOnly must be a boolean, got ${describeValue(merged.readOnly)}`)
  if (typeof merged.relay !== 'boolean') throw new TypeError(`relay must be a boolean, got ${describeValue(merged.relay)}`)
  return Object.freeze(merged)
}

function withoutUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>
}
