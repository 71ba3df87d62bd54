import { link, mkdir, open, readdir, stat, unlink, writeFile, type FileHandle } from 'node:fs/promises'
import { isAbsolute, join, resolve } from 'node:path'
import { TidemarkError } from '../errors.js'
import { NotRelayed, RelayClient, RelayServer, relaySupported, type RelayedEntry } from './append-relay.js'
import { LockFile } from './lock-file.js'
import { describe } from '../describe.js'
import { checkIntegerOption, fsyncDir } from '../util/index.js'
import { AbstractRevisionedLog, type LogEntry } from './revisioned-log.js'
import {
  RECORD_HEADER_BYTES,
  SEGMENT_HEADER_BYTES,
  encodeRecordInto,
  encodeSegmentHeader,
  scanSegment,
  scanSegmentBatches,
  segmentHeaderProblem,
  zeroFrom,
  type ScanStep,
} from './record.js'

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

const SEGMENT_NAME = /^(\d{20})\.seg$/
const LOCK_NAME = 'append.lock'
/** Every INDEX_STRIDE-th record's byte position is remembered, so a read seeks near its start. */
const INDEX_STRIDE = 64
/**
 * A group of appends stops taking entries at either cap, so the buffer it is
 * encoded into stays bounded; an entry larger than the byte cap forms a group
 * of its own.
 */
const GROUP_MAX_BYTES = 4 * 1024 * 1024
const GROUP_MAX_ENTRIES = 10_000

interface Segment {
  base: bigint
  path: string
  /** positions[i] is where the record base + i * INDEX_STRIDE starts. */
  positions: number[]
  /** The scanned prefix ends here, before the record `knownRevision`. */
  knownPos: number
  knownRevision: bigint
}

/** One call to append or appendConditionally, waiting in a group for its answer. */
interface PendingAppend {
  data: Uint8Array
  /** Undefined for an unconditional append. */
  expected: bigint | undefined
  resolve(revision: bigint | undefined): void
  reject(error: unknown): void
}

/** Appends of one FileLog written together under one lock acquisition (see #commit). */
interface AppendGroup {
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

interface RunningFlush {
  file: FileHandle
  done: Promise<void>
  /** The flush for the groups written after `done` started; begins when it ends. */
  next: Promise<void> | undefined
}

/**
 * Opens (creating it if needed) the file log in `dir`. A torn record at the
 * end of the log, left by a process that died while appending, is cut here.
 * With `readOnly` the directory must exist, and nothing is created, cut or
 * locked.
 */
export async function openFileLog(dir: string, options: FileLogOptions = {}): Promise<FileLog> {
  const log = new FileLog(dir, options)
  await log.recover()
  return log
}

/**
 * The cores open in this process, by directory (its path, device and inode)
 * and options: every handle of one log shares one core, so that appends
 * through separate handles join the same groups and need no lock-file work
 * between them (see FileLog). Handles with other options get a core of their
 * own and coordinate through the lock file, as other processes do.
 *
 * Module state, against the rule of no global state, on purpose: the append
 * lock belongs to the process (a second handle taking turns with the first
 * through the lock file made 4 writers in one process slower than 1), and
 * the process is the scope this map has. An entry lives only while a handle
 * of its log is open.
 */
const cores = new Map<string, { core: LogCore; handles: number; ready: Promise<void> }>()

async function attachCore(dir: string, options: Readonly<Required<FileLogOptions>>): Promise<{ core: LogCore; detach(): Promise<void> }> {
  if (!options.readOnly) await io('open', dir, () => mkdir(dir, { recursive: true }))
  const { dev, ino } = await io('open', dir, () => stat(dir))
  // The path too: a directory removed and made again may get the same inode.
  const key = JSON.stringify([dir, dev, ino, options])
  let joined = cores.get(key)
  const creator = joined === undefined
  if (joined === undefined) {
    const core = new LogCore(dir, options)
    const fresh = {
      core,
      handles: 0,
      ready: core.recover().catch(async (err: unknown) => {
        if (cores.get(key) === fresh) cores.delete(key)
        // Removes the lock's private file, which a failed open would leave behind.
        await core.close().catch(() => {})
        throw err
      }),
    }
    cores.set(key, (joined = fresh))
  }
  const entry = joined
  entry.handles += 1
  let detached = false
  const detach = async (): Promise<void> => {
    if (detached) return
    detached = true
    entry.handles -= 1
    if (entry.handles > 0) return
    // Gone from the map before it closes: a handle opened meanwhile gets a new core, which waits for the lock.
    if (cores.get(key) === entry) cores.delete(key)
    await entry.core.close()
  }
  try {
    await entry.ready
    // Every open catches up and cuts a torn tail, as the first one did
    // (unless the core holds the lock, when nobody else can have written).
    if (!creator) await entry.core.recover()
  } catch (err) {
    await detach().catch(() => {})
    throw err
  }
  return { core: entry.core, detach }
}

/**
 * The embedded revisioned log: segment files in one directory, written by any
 * number of processes and read by any number.
 *
 * A FileLog is a handle: the handles of one log in one process (same
 * directory and options) share one core, which holds the append lock, the
 * segment index and the groups of appends, so that concurrent appends through
 * separate handles are committed together exactly as through one handle.
 * Closing a handle waits for its own appends; the last one closes the core.
 */
export class FileLog extends AbstractRevisionedLog {
  readonly dir: string
  readonly location: string
  readonly options: Readonly<Required<FileLogOptions>>
  #core: { core: LogCore; detach(): Promise<void> } | undefined
  /** This handle's appends and truncations in flight, which its close waits for. */
  #inFlight = 0
  #drained: (() => void) | undefined
  /** One handler for every operation that settles: a Set entry and a closure per append were a visible share of a fileLogSink's delivery. */
  readonly #settled = (): void => {
    if (--this.#inFlight === 0) this.#drained?.()
  }

  constructor(dir: string, options: FileLogOptions = {}) {
    super()
    if (typeof dir !== 'string' || dir === '') throw new TypeError(`dir must be a non-empty path string, got ${describe(dir)}`)
    if (!isAbsolute(dir)) throw new RangeError(`dir ('${dir}') must be an absolute path`)
    this.dir = resolve(dir)
    this.location = this.dir
    this.options = validateOptions(options)
  }

  /** Attaches the handle to the log's core, opening it (creating the directory and the first segment, cutting a torn tail) if this process has none. */
  async recover(): Promise<void> {
    this.#core ??= await attachCore(this.dir, this.options)
  }

  get #log(): LogCore {
    if (this.#core === undefined) throw new TypeError(`the file log at ${this.dir} is not open yet: use openFileLog(), or await recover() first`)
    return this.#core.core
  }

  protected _oldest(): Promise<bigint> {
    return this.#log.oldest()
  }

  protected _tail(): Promise<bigint> {
    return this.#log.tail()
  }

  protected async *_read(from: bigint, end: bigint | undefined): AsyncGenerator<LogEntry> {
    // Copied: an entry kept by a reader should not keep the chunk it was read
    // in (up to a megabyte) alive.
    for await (const batch of this._readBatches(from, end)) {
      for (const entry of batch) yield { revision: entry.revision, data: Buffer.from(entry.data) }
    }
  }

  protected override _readBatches(from: bigint, end: bigint | undefined): AsyncGenerator<LogEntry[]> {
    return this.#log.readBatches(from, end, () => this.assertOpen())
  }

  protected _append(data: Uint8Array): Promise<bigint> {
    this.#checkWritable('append')
    return this.#track(this.#log.append(data, undefined)) as Promise<bigint>
  }

  /**
   * @internal Appends each of `entries` in order, as that many append()
   * calls made together would (they join the same groups), answered with one
   * promise: the revision of the last entry, or the first failure (entries
   * before it may have been written, as with separate appends). For a
   * caller with many entries at once (fileLogSink), whose per-append
   * promises were a large share of its cost.
   */
  async appendAll(entries: readonly Uint8Array[]): Promise<bigint> {
    if (!Array.isArray(entries) || entries.length === 0) throw new TypeError('appendAll(entries): entries must be a non-empty array of Uint8Array')
    for (const data of entries) if (!(data instanceof Uint8Array)) throw new TypeError(`appendAll(entries): every entry must be a Uint8Array, got ${describe(data)}`)
    this.assertOpen()
    this.#checkWritable('appendAll')
    return this.#track(this.#log.appendAll(entries))
  }

  protected _appendConditionally(data: Uint8Array, expected: bigint): Promise<bigint | undefined> {
    this.#checkWritable('appendConditionally')
    return this.#track(this.#log.append(data, expected))
  }

  protected _truncate(before: bigint): Promise<void> {
    this.#checkWritable('truncate')
    return this.#track(this.#log.truncate(before))
  }

  protected async _close(): Promise<void> {
    // Appends already called finish (or fail) before the files close.
    while (this.#inFlight > 0) await new Promise<void>((resolve) => { this.#drained = resolve })
    this.#drained = undefined
    await this.#core?.detach()
  }

  #track<T>(work: Promise<T>): Promise<T> {
    this.#inFlight += 1
    work.then(this.#settled, this.#settled)
    return work
  }

  #checkWritable(op: string): void {
    if (this.options.readOnly) throw new TypeError(`${op}() on the file log at ${this.dir}, which was opened with readOnly: true; open it without readOnly to write`)
  }
}

/**
 * What the handles of one log share in one process.
 *
 * Revisions are consecutive from 0. Appends from all processes serialize on an
 * append lock file (see lock-file.ts); under it the appender first catches up
 * with what other processes appended, which is what makes the conditional
 * check against the tail exact. Readers take no lock: they read up to the last
 * complete record, so an append in progress is simply not there yet.
 *
 * Appends are committed in groups: the appends this core receives while its
 * previous group holds the lock wait in the next group, which then costs one
 * write and one flush however many entries it holds.
 *
 * The append lock is kept while this core has work (groups queued, or
 * written and being flushed), so that a writer that appends one entry after
 * another pays no lock-file or directory work per append: it was nearly all
 * of an append's time. It is released when the work runs out (checked one
 * turn of the event loop later) or as soon as another writer announces that
 * it waits (LockFile.wanted(), one stat per group, while the group's flush
 * runs); the catch-up with other processes' appends happens only when the
 * lock is taken again.
 *
 * The lock covers choosing the revisions and the write(2), never the flush:
 * the flush (fdatasync) of a group starts as soon as its write returned (or,
 * while one of this core runs, when it ends: see #startFlush), and the next
 * group, or an appender in another process, writes while it runs, so the
 * flushes of several processes overlap and the file system commits them
 * together (ext4 batches them into one journal commit). A caller is answered
 * only when a flush that started after its record was written has finished.
 * fdatasync makes durable every write to the file that completed before it
 * started, whichever process made it; records are written in revision order
 * under the lock, so a flush that covers a record covers every earlier one
 * in its segment, and any process that appends after it (which it can only
 * do after catching up with it) flushes it again before acknowledging
 * anything. A segment is flushed before the next one is created, so that no
 * acknowledged record follows an unflushed one.
 *
 * With `relay`, the cores of other processes send their groups to the core
 * that holds the lock instead of waiting for it (append-relay.ts,
 * #relayGroup), and it appends them as its own.
 */
class LogCore {
  readonly dir: string
  readonly options: Readonly<Required<FileLogOptions>>
  #segments: Segment[] = []
  #writer: { segment: Segment; file: FileHandle } | undefined
  readonly #lock: LockFile
  /** Work under the lock (groups of appends, truncation) queues here, in call order, before competing for the lock file with other processes. */
  #queue: Promise<unknown> = Promise.resolve()
  /** The group that new appends join: queued, and not yet judged by #commit. */
  #forming: AppendGroup | undefined
  /** The append lock is held, and nobody else appended since our catch-up. */
  #held = false
  /** Work queued under the lock and not finished; with #flushes, what keeps the lock held. */
  #busy = 0
  /** Flushes in flight: the writer's file is closed only after they end. */
  readonly #flushes = new Set<Promise<void>>()
  /** The fdatasync running now, and the one that waits for it (see #startFlush). */
  #flushing: RunningFlush | undefined
  #closed = false
  /** Serves other processes' appends while this core holds the lock; started when it first takes it (null: none can be made here). */
  #relayServer: RelayServer | undefined | null
  /** Processes connected to #relayServer: while any is, the lock is kept (released only to a waiter that cannot relay). */
  #relayClients = 0
  /** The connection this core relays its appends over, to the holder it found when it last did not hold the lock. */
  #relay: RelayClient | undefined

  constructor(dir: string, options: Readonly<Required<FileLogOptions>>) {
    this.dir = dir
    this.options = options
    this.#lock = new LockFile(join(this.dir, LOCK_NAME), () => this.#releaseWhenIdle())
  }

  /** Creates the directory and the first segment if needed, and cuts a torn tail; with readOnly, only reads what is there. */
  async recover(): Promise<void> {
    if (this.options.readOnly) await this.#refresh()
    else await this.#locked(async () => {})
  }

  async oldest(): Promise<bigint> {
    await this.#refresh()
    const first = this.#segments[0]
    return first === undefined ? 0n : first.base
  }

  async tail(): Promise<bigint> {
    await this.#refresh()
    return this.#tailSegment()?.knownRevision ?? 0n
  }

  /** One batch per chunk read from a segment; the entries share the chunk, which is never written again. `assertOpen` is the reading handle's. */
  async *readBatches(from: bigint, end: bigint | undefined, assertOpen: () => void): AsyncGenerator<LogEntry[]> {
    await this.#refresh()
    const tail = this.#tailSegment()?.knownRevision ?? 0n
    const stop = end === undefined || end > tail ? tail : end
    const oldest = this.#segments[0]?.base ?? tail
    if (from < oldest) throw truncated(this.dir, from, oldest)
    if (from > tail) throw new RangeError(`from (${from}) is past the tail (${tail}) of the log at ${this.dir}`)
    let revision = from
    let index = this.#segmentIndex(revision)
    while (revision < stop) {
      assertOpen()
      const segment = this.#segments[index]
      if (segment === undefined) break
      const file = await this.#openSegment(segment, from, oldest)
      try {
        const start = this.#seek(segment, revision)
        let at = start.revision
        const last = index === this.#segments.length - 1
        scan: for await (const steps of scanSegmentBatches(file, start.pos, at, this.options.maxRecordBytes)) {
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
              if (!last || step.kind === 'corrupt') this.#checkStop(segment, step, at, last)
              done = true
              break
            }
            this.#learn(segment, step)
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
      const next = this.#segments[index]
      if (next !== undefined && revision < stop && next.base !== revision) {
        throw corrupt(this.dir, revision, `segment ${segment.path} ends before revision ${revision} but the next segment starts at ${next.base}`)
      }
    }
  }

  async truncate(before: bigint): Promise<void> {
    await this.#locked(async () => {
      const tail = this.#tailSegment()?.knownRevision ?? 0n
      if (before > tail) throw new RangeError(`before (${before}) is past the tail (${tail}) of the log at ${this.dir}`)
      // Oldest first, so that a crash in between leaves a log that still
      // starts at a segment boundary; the last segment always stays, since it
      // is where appends go and where the tail is read from.
      while (this.#segments.length > 1 && this.#segments[1]!.base <= before) {
        const segment = this.#segments.shift()!
        await this.#io('truncate', () => unlink(segment.path).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== 'ENOENT') throw err
        }))
      }
    })
  }

  async close(): Promise<void> {
    // Appends relayed to this core are answered first (they join its queue),
    // and their senders told to append the rest themselves.
    await this.#relayServer?.close()
    // Appends already queued finish (or fail) before the files close.
    await this.#queue.catch(() => {})
    this.#closed = true
    this.#relay?.close()
    await this.#settleFlushes()
    if (this.#held) {
      this.#held = false
      await this.#lock.release().catch(() => {})
    }
    await this.#closeWriter()
    await this.#lock.dispose()
  }

  async #settleFlushes(): Promise<void> {
    while (this.#flushes.size > 0) await Promise.allSettled([...this.#flushes])
  }

  async #closeWriter(): Promise<void> {
    const writer = this.#writer
    if (writer === undefined) return
    this.#writer = undefined
    await this.#settleFlushes()
    await writer.file.close()
  }

  /** An append, or with `expected` a conditional one. */
  append(data: Uint8Array, expected: bigint | undefined): Promise<bigint | undefined> {
    this.#checkSize(data)
    return new Promise((resolve, reject) => this.#join({ data, expected, resolve, reject }))
  }

  /** Unconditional appends of each entry in order (see FileLog.appendAll): the last one's revision, or the first failure. */
  appendAll(entries: readonly Uint8Array[]): Promise<bigint> {
    for (const data of entries) this.#checkSize(data)
    return new Promise((resolve, reject) => {
      // Two callbacks for all the entries, not a promise each. The groups
      // are answered as their flushes end, which need not be in order: the
      // answer is the highest revision, the last entry's, not the last one
      // answered.
      let left = entries.length
      let failed = false
      let last = -1n
      const done = (revision: bigint | undefined): void => {
        if (revision! > last) last = revision!
        if (--left === 0 && !failed) resolve(last)
      }
      const fail = (error: unknown): void => {
        if (failed) return
        failed = true
        reject(error)
      }
      for (const data of entries) this.#join({ data, expected: undefined, resolve: done, reject: fail })
    })
  }

  #checkSize(data: Uint8Array): void {
    if (data.byteLength > this.options.maxRecordBytes) {
      throw new RangeError(`data is ${data.byteLength} bytes, more than maxRecordBytes (${this.options.maxRecordBytes})`)
    }
  }

  /** Puts an append into the group being formed, or into a new one queued behind the groups formed before. */
  #join(entry: PendingAppend): void {
    const size = RECORD_HEADER_BYTES + entry.data.byteLength
    let group = this.#forming
    if (group === undefined || group.entries.length >= GROUP_MAX_ENTRIES || group.bytes + size > GROUP_MAX_BYTES) {
      const fresh: AppendGroup = { entries: [], bytes: 0, verdicts: [], decided: 0, written: undefined, flushing: undefined }
      this.#locked(() => this.#commit(fresh), fresh).then(() => this.#flush(fresh), (err: unknown) => this.#flush(fresh, err))
      // After #locked, which closes the group formed before it.
      this.#forming = group = fresh
    }
    group.bytes += size
    group.entries.push(entry)
  }

  /**
   * Under the lock, caught up with other processes: judges the group's
   * entries in call order against the tail and writes (and flushes, with
   * `sync`) the ones that take effect. A conditional entry is judged against
   * the entries before it in the group exactly as if they had been appended
   * one by one. The callers are answered by #answer, after the lock is
   * released, so that a caller that exits at once leaves no lock behind.
   */
  async #commit(group: AppendGroup): Promise<void> {
    // Appends from now on form the next group: it queues behind this one and
    // fills while this one writes and flushes.
    if (this.#forming === group) this.#forming = undefined
    const { entries, verdicts } = group
    const { segmentBytes } = this.options
    let segment = this.#tailSegment()!
    let revision = segment.knownRevision
    let next = 0
    while (next < entries.length) {
      // As with one append at a time, a segment that reached segmentBytes
      // takes no more records: the group's remaining records go to a new
      // segment, and no record is ever split between two.
      const full = segment.knownPos >= segmentBytes
      const first = next
      const base = revision
      let pos = full ? SEGMENT_HEADER_BYTES : segment.knownPos
      let bytes = 0
      while (next < entries.length && pos < segmentBytes) {
        const entry = entries[next]!
        if (entry.expected === undefined || entry.expected === revision - 1n) {
          verdicts[next] = revision
          revision += 1n
          pos += RECORD_HEADER_BYTES + entry.data.byteLength
          bytes += RECORD_HEADER_BYTES + entry.data.byteLength
        }
        next += 1
      }
      // Only entries that lost: nothing to write, and no reason to roll.
      if (revision > base) {
        // A roll flushes the full segment, with what this group wrote there.
        if (full) group.written = undefined
        const writer = full ? await this.#roll(base) : await this.#writerFor(segment)
        segment = writer.segment
        await this.#writeRecords(writer, entries, verdicts, first, next, bytes)
        group.written = writer.file
      }
      // A loser's verdict is final only now, when the winners before it that
      // made it lose are written: had their write failed, it gets the error.
      group.decided = next
    }
    // At once, not after the lock is released or checked: the flush is what
    // an append waits for, and nothing under the lock needs to wait for it.
    if (this.options.sync && group.written !== undefined) group.flushing = this.#startFlush(group.written)
  }

  /** Writes the records of entries[first..end) that took effect, back to back at the end of the writer's segment. */
  async #writeRecords(
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
    await this.#io('append', () => writeAll(file, buffer, start))
    if (firstRevision === undefined) return
    // Only now: after a failed write the segment's known end stays where it
    // was, and the next catch-up under the lock keeps the whole records the
    // write left (its callers got the error: the outcome is unknown, as it
    // was for a single append) and cuts a torn one. What #learn() does for
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

  /**
   * With `sync`, flushes what the group wrote (after the lock was released)
   * and answers its callers; a failed flush fails them all: their records may
   * or may not be on the disk, as after a failed write. After a failed
   * commit (`error`), the entries decided before the failure are flushed and
   * acknowledged, the rest get the error.
   */
  async #flush(group: AppendGroup, error?: unknown): Promise<void> {
    if (group.relayed) return
    const file = group.written
    if (!this.options.sync || file === undefined || group.decided === 0) return this.#answer(group, error)
    try {
      // Started by #commit, unless it failed after writing.
      await (group.flushing ?? this.#startFlush(file))
    } catch (err) {
      group.decided = 0
      return this.#answer(group, error ?? err)
    }
    this.#answer(group, error)
  }

  /**
   * A flush of `file` that starts after what was written to it so far,
   * counted in #flushes until it ends (the lock and the file stay until
   * then). While one runs, the groups written meanwhile share the next one,
   * started when it ends: one fdatasync per round instead of one per group.
   * Each fdatasync holds a thread-pool thread for its whole wait, so with
   * one per group (groups relayed by other processes hold one entry or two)
   * the writes of the next groups queued behind them. Measured: one writer
   * and 4 writers in one process unchanged; 4 relaying processes within
   * the noise of the runs either way.
   */
  #startFlush(file: FileHandle): Promise<void> {
    const running = this.#flushing
    if (running !== undefined && running.file === file) {
      if (running.next === undefined) {
        // After #track's callback on `done` (registered first), which
        // clears #flushing, so the call below starts a new flush.
        const next = running.done.then(() => undefined, () => undefined).then(() => this.#startFlush(file))
        running.next = next
        this.#track(next)
      }
      return running.next
    }
    const flushing = this.#io('append', () => file.datasync())
    const entry: RunningFlush = { file, done: flushing, next: undefined }
    this.#flushing = entry
    this.#track(flushing, () => {
      if (this.#flushing === entry) this.#flushing = undefined
    })
    return flushing
  }

  /** Counts `flush` in #flushes until it settles. */
  #track(flush: Promise<void>, then?: () => void): void {
    this.#flushes.add(flush)
    const done = (): void => {
      this.#flushes.delete(flush)
      then?.()
      this.#releaseWhenIdle()
    }
    flush.then(done, done)
  }

  /**
   * Gives each caller of the group its verdict, or `error` to those whose
   * entry was not decided: a group that crosses segments may fail in its
   * second segment after its first was written. An error after every entry
   * was decided (releasing the lock) answers no one: their records are
   * written, and a lock left behind fails the next acquisition instead.
   */
  #answer(group: AppendGroup, error?: unknown): void {
    // Failed before #commit began (the lock, a closed log): stop the group
    // from taking appends that nothing would answer.
    if (this.#forming === group) this.#forming = undefined
    const { entries, verdicts, decided } = group
    for (let i = 0; i < decided; i++) entries[i]!.resolve(verdicts[i])
    for (let i = decided; i < entries.length; i++) entries[i]!.reject(error)
  }

  /**
   * Runs `work` holding the append lock, after catching up with the appends
   * of other processes and cutting a torn tail: nobody else can be writing
   * now, so an incomplete last record is a dead writer's.
   */
  #locked<T>(work: () => Promise<T>, group?: AppendGroup): Promise<T | undefined> {
    // Appends called after this work must not join a group queued before it.
    this.#forming = undefined
    this.#busy += 1
    const run = async (): Promise<T | undefined> => {
      let failed = true
      try {
        if (this.#closed) throw new TidemarkError('TIDEMARK_LOG_CLOSED', `the log at ${this.dir} is closed`)
        if (!this.#held && group !== undefined && this.options.relay && (await this.#relayGroup(group))) {
          failed = false
          return undefined
        }
        if (!this.#held) {
          await this.#io('lock', () => this.#lock.acquire(this.options.lockTimeoutMs, `the file log at ${this.dir}`))
          this.#held = true
          if (this.#relayServer === undefined) await this.#startRelay()
          // The scan of the catch-up tells whether the tail ends in a whole
          // record; only if not does the repair look at the file again.
          let clean = await this.#refresh()
          if (this.#segments.length === 0) {
            await this.#createSegment(0n)
            clean = true
          }
          if (!clean) await this.#repairTail()
        }
        const result = await work()
        failed = false
        return result
      } finally {
        this.#busy -= 1
        // After a failure the next work catches up from the files again, and
        // a waiter gets its turn now.
        if (this.#held && (failed || (await this.#lock.wanted()))) await this.#unlock()
        else this.#releaseWhenIdle()
      }
    }
    const result = this.#queue.then(run, run)
    this.#queue = result.catch(() => {})
    return result
  }

  async #unlock(): Promise<void> {
    this.#held = false
    await this.#io('unlock', () => this.#lock.release())
  }

  /**
   * Releases the lock one turn of the event loop after the work ran out: an
   * appender that was just answered appends its next entry before that, and
   * keeps the lock. Queued, so that it never runs beside work under the lock.
   */
  #releaseWhenIdle(): void {
    if (!this.#idle()) return
    setImmediate(() => {
      if (!this.#idle()) return
      const release = this.#queue.then(async () => {
        if (this.#idle()) await this.#unlock()
      })
      // A failed release leaves the lock file behind, and its holder (this
      // live process) keeps it; the next acquisition reports it.
      this.#queue = release.catch(() => {})
    })
  }

  /**
   * Held, and nothing under the lock to do. Flushes in flight keep the lock
   * (the appender is about to append again) unless another writer waits: it
   * writes while our flush runs.
   */
  #idle(): boolean {
    return this.#held && this.#busy === 0 && ((this.#flushes.size === 0 && this.#relayClients === 0) || this.#lock.wantedNow)
  }

  /**
   * Listens for other processes' appends (append-relay.ts) from the first
   * time this core holds the lock until it closes. They join this core's
   * groups as its own appends do, and are answered when those are.
   */
  async #startRelay(): Promise<void> {
    this.#relayServer = null
    if (!this.options.relay || !relaySupported()) return
    const server = new RelayServer(
      this.#lock.nonce,
      this.options,
      // A core that lost the lock sends its clients to the holder: kept, two
      // cores with clients would each take the lock for them in turn.
      (entries) => (!this.#held ? undefined : entries.map((entry) => {
        // As the core's own appends (append() checks the size by throwing).
        try {
          return this.append(entry.data, entry.expected)
        } catch (err) {
          return Promise.reject(err)
        }
      })),
      (clients) => {
        this.#relayClients = clients
        if (clients === 0) this.#releaseWhenIdle()
      },
    )
    if (await server.listen()) this.#relayServer = server
  }

  /**
   * Hands the group to the live holder of the lock in another process of
   * this host, if one serves appends for a log with these options: true
   * when it answered (or its answer is in doubt: then the entries fail with
   * TIDEMARK_LOG_UNAVAILABLE, as after a failed write), false when this core
   * must append the group itself (no such holder, or it stopped serving
   * before it read the group). Called in queue order, one group at a time,
   * so a later group never overtakes it, also when it falls back.
   */
  async #relayGroup(group: AppendGroup): Promise<boolean> {
    if (this.#forming === group) this.#forming = undefined
    // A core that serves relays never relays itself, or two cores that each
    // held a connection to the other (each was the holder once) could each
    // wait in its queue for the other's answer, queued behind that wait.
    // With this rule a relay never goes further than one hop.
    if (!relaySupported() || this.#relayClients > 0) return false
    const entries: RelayedEntry[] = group.entries
    let verdicts
    // Twice at most: a core that lost the lock refuses the group, and the
    // holder found then gets it; refused again, this core takes the lock.
    for (let attempt = 0; ; attempt++) {
      let client = this.#relay
      if (client === undefined || !client.open) {
        this.#relay = undefined
        const holder = await this.#lock.liveHolderHere().catch(() => undefined)
        if (holder === undefined) return false
        // Twice the lock's wait: a holder that waits for the lock itself answers with TIDEMARK_LOG_LOCKED before this fires.
        client = await RelayClient.connect(holder.nonce, this.options, 2 * this.options.lockTimeoutMs, `pid ${holder.pid}`)
        if (client === undefined) return false
        if (this.#closed) {
          client.close()
          return false
        }
        this.#relay = client
      }
      try {
        verdicts = await client.send(entries)
        break
      } catch (err) {
        if (err instanceof NotRelayed) {
          if (attempt === 0) continue
          return false
        }
        group.relayed = true
        for (const entry of group.entries) entry.reject(err)
        return true
      }
    }
    group.relayed = true
    for (let i = 0; i < verdicts.length; i++) {
      const verdict = verdicts[i]
      if (verdict instanceof Error) group.entries[i]!.reject(verdict)
      else group.entries[i]!.resolve(verdict)
    }
    return true
  }

  /** Lists the segments and scans what was appended to the last one since the last look; true if it ends in a whole record (or there is none). */
  async #refresh(): Promise<boolean> {
    // The scan of the writer's segment runs beside the listing: the segment
    // is still the tail unless another process rolled to a new one.
    const own = this.#writer
    const early = own === undefined ? undefined : this.#scanTail(own.segment, own.file)
    early?.catch(() => {})
    const names = await this.#io('list', () => readdir(this.dir)).catch(async (err: unknown) => {
      await early?.catch(() => {})
      throw err
    })
    const bases = names.flatMap((name) => {
      const m = SEGMENT_NAME.exec(name)
      return m ? [BigInt(m[1]!)] : []
    }).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
    const known = new Map(this.#segments.map((s) => [s.base, s]))
    this.#segments = bases.map((base) => known.get(base) ?? {
      base,
      path: join(this.dir, `${base.toString().padStart(20, '0')}.seg`),
      positions: [SEGMENT_HEADER_BYTES],
      knownPos: SEGMENT_HEADER_BYTES,
      knownRevision: base,
    })
    const tail = this.#tailSegment()
    if (early !== undefined && own!.segment === tail) return early
    await early?.catch(() => {})
    if (this.#writer !== undefined && this.#writer.segment !== tail) await this.#closeWriter()
    if (tail === undefined) return true
    const file = await this.#openSegment(tail, undefined, undefined)
    try {
      return await this.#scanTail(tail, file)
    } finally {
      await file.close()
    }
  }

  /** Learns the records appended to `segment` since the last look; true if it ends in a whole record. */
  async #scanTail(segment: Segment, file: FileHandle): Promise<boolean> {
    let clean = true
    for await (const step of scanSegment(file, segment.knownPos, segment.knownRevision, this.options.maxRecordBytes)) {
      if (step.kind === 'record') this.#learn(segment, step)
      else if (step.kind === 'corrupt') throw corrupt(this.dir, segment.knownRevision, `the record at byte ${step.pos} of ${segment.path}: ${step.problem}`, segment.path, step.pos)
      else clean = step.kind === 'end'
    }
    return clean
  }

  /** Under the lock: cut an incomplete or zero-filled last record. */
  async #repairTail(): Promise<void> {
    const tail = this.#tailSegment()!
    const writer = await this.#writerFor(tail)
    const { size } = await this.#io('stat', () => writer.file.stat())
    if (size === tail.knownPos) return
    if (size > tail.knownPos + RECORD_HEADER_BYTES) {
      // More than a header follows the last good record: it is a torn write
      // only if the record there runs past the end or was never written.
      for await (const step of scanSegment(writer.file, tail.knownPos, tail.knownRevision, this.options.maxRecordBytes)) {
        if (step.kind === 'zero' && !(await zeroFrom(writer.file, step.pos))) {
          throw corrupt(this.dir, tail.knownRevision, `zeros at byte ${step.pos} of ${tail.path} are followed by data`, tail.path, step.pos)
        }
        break
      }
    }
    await this.#io('repair', async () => {
      await writer.file.truncate(tail.knownPos)
      await writer.file.datasync()
    })
  }

  async #writerFor(segment: Segment): Promise<{ segment: Segment; file: FileHandle }> {
    if (this.#writer?.segment === segment) return this.#writer
    await this.#closeWriter()
    const file = await this.#io('open', () => open(segment.path, 'r+'))
    this.#writer = { segment, file }
    return this.#writer
  }

  async #roll(base: bigint): Promise<{ segment: Segment; file: FileHandle }> {
    // The full segment's records (ours, or those of a process whose flush is
    // still running) reach the disk before any record of the next segment
    // can be acknowledged.
    if (this.options.sync) {
      const full = await this.#writerFor(this.#tailSegment()!)
      await this.#io('append', () => full.file.datasync())
    }
    await this.#createSegment(base)
    return this.#writerFor(this.#tailSegment()!)
  }

  /**
   * A new segment appears complete or not at all: its header is written and
   * flushed under a private name first and then linked into place (link, not
   * rename, fails instead of replacing a segment that somehow exists).
   */
  async #createSegment(base: bigint): Promise<void> {
    const name = `${base.toString().padStart(20, '0')}.seg`
    const temp = join(this.dir, `${name}.${process.pid}.tmp`)
    await this.#io('create segment', async () => {
      await writeFile(temp, encodeSegmentHeader(base), { flush: this.options.sync })
      try {
        await link(temp, join(this.dir, name))
      } finally {
        await unlink(temp)
      }
      if (this.options.sync) await fsyncDir(this.dir)
    })
    await this.#refresh()
  }

  async #openSegment(segment: Segment, from: bigint | undefined, oldest: bigint | undefined): Promise<FileHandle> {
    let file: FileHandle
    try {
      file = await open(segment.path, 'r')
    } catch (err) {
      // Truncated by another process between our listing and this open.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' && from !== undefined) {
        throw truncated(this.dir, from, oldest ?? segment.base + 1n, err)
      }
      throw ioError(err, 'open', segment.path)
    }
    const header = Buffer.alloc(SEGMENT_HEADER_BYTES)
    const { bytesRead } = await file.read(header, 0, SEGMENT_HEADER_BYTES, 0)
    const problem = segmentHeaderProblem(header.subarray(0, bytesRead), segment.base)
    if (problem !== undefined) {
      await file.close()
      throw corrupt(this.dir, segment.base, `segment ${segment.path}: ${problem}`, segment.path, 0)
    }
    return file
  }

  /** The indexed record nearest before `revision`; the read scans forward from there. */
  #seek(segment: Segment, revision: bigint): { pos: number; revision: bigint } {
    const slot = Math.min(Number((revision - segment.base) / BigInt(INDEX_STRIDE)), segment.positions.length - 1)
    return { pos: segment.positions[slot]!, revision: segment.base + BigInt(slot * INDEX_STRIDE) }
  }

  #learn(segment: Segment, record: { revision: bigint; pos: number; end: number }): void {
    // The next index slot is due exactly at this offset; one BigInt step per
    // record, since reads and appends call this for every record.
    if (Number(record.revision - segment.base) === segment.positions.length * INDEX_STRIDE) segment.positions.push(record.pos)
    if (record.revision >= segment.knownRevision) {
      segment.knownRevision = record.revision + 1n
      segment.knownPos = record.end
    }
  }

  #checkStop(segment: Segment, step: Exclude<ScanStep, { kind: 'record' }>, revision: bigint, last: boolean): void {
    if (step.kind === 'corrupt') {
      throw corrupt(this.dir, revision, `the record at byte ${step.pos} of ${segment.path}: ${step.problem}`, segment.path, step.pos)
    }
    if (!last && step.kind !== 'end') {
      throw corrupt(this.dir, revision, `segment ${segment.path} ends in a torn record at byte ${step.pos}, but later segments exist`, segment.path, step.pos)
    }
  }

  #segmentIndex(revision: bigint): number {
    let index = 0
    for (let i = 0; i < this.#segments.length; i++) if (this.#segments[i]!.base <= revision) index = i
    return index
  }

  #tailSegment(): Segment | undefined {
    return this.#segments[this.#segments.length - 1]
  }

  #io<T>(op: string, work: () => Promise<T>): Promise<T> {
    return io(op, this.dir, work)
  }
}

/** Runs file-system work, reporting its failures as TIDEMARK_LOG_UNAVAILABLE. */
async function io<T>(op: string, where: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work()
  } catch (err) {
    if (err instanceof TidemarkError || err instanceof TypeError || err instanceof RangeError) throw err
    throw ioError(err, op, where)
  }
}

function validateOptions(options: FileLogOptions): Readonly<Required<FileLogOptions>> {
  if (typeof options !== 'object' || options === null) throw new TypeError(`options must be an object, got ${describe(options)}`)
  const merged = { ...FILE_LOG_DEFAULTS, ...withoutUndefined(options) }
  checkIntegerOption(merged.segmentBytes, 'segmentBytes', 4096, 2 ** 40)
  checkIntegerOption(merged.lockTimeoutMs, 'lockTimeoutMs', 0, 2 ** 31)
  checkIntegerOption(merged.maxRecordBytes, 'maxRecordBytes', 1, 2 ** 31 - RECORD_HEADER_BYTES)
  if (typeof merged.sync !== 'boolean') throw new TypeError(`sync must be a boolean, got ${describe(merged.sync)}`)
  if (typeof merged.readOnly !== 'boolean') throw new TypeError(`readOnly must be a boolean, got ${describe(merged.readOnly)}`)
  if (typeof merged.relay !== 'boolean') throw new TypeError(`relay must be a boolean, got ${describe(merged.relay)}`)
  return Object.freeze(merged)
}

function withoutUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>
}


/** write(2) may write less than asked (interrupted, or a nearly full disk); the rest goes after it. */
async function writeAll(file: FileHandle, buffer: Buffer, pos: number): Promise<void> {
  for (let done = 0; done < buffer.length; ) {
    const { bytesWritten } = await file.write(buffer, done, buffer.length - done, pos + done)
    if (bytesWritten === 0) throw new Error(`wrote 0 of ${buffer.length - done} bytes at position ${pos + done}`)
    done += bytesWritten
  }
}


function corrupt(dir: string, revision: bigint, problem: string, path?: string, position?: number): TidemarkError {
  return new TidemarkError('TIDEMARK_LOG_CORRUPT', `the file log at ${dir} is corrupt at revision ${revision}: ${problem}`, {
    details: { revision, path, position },
  })
}

function truncated(dir: string, from: bigint, oldest: bigint, cause?: unknown): TidemarkError {
  return new TidemarkError('TIDEMARK_LOG_TRUNCATED', `revision ${from} was truncated from the log at ${dir}; it now starts at ${oldest}`, {
    cause,
    details: { from, oldest },
  })
}

const PERMANENT_ERRNOS = new Set(['EACCES', 'EPERM', 'ENOTDIR', 'EISDIR', 'EROFS', 'ENAMETOOLONG', 'ELOOP'])

function ioError(err: unknown, op: string, where: string): TidemarkError {
  const code = (err as NodeJS.ErrnoException)?.code
  return new TidemarkError('TIDEMARK_LOG_UNAVAILABLE', `${op} failed on the file log at ${where}: ${(err as Error)?.message ?? err}`, {
    cause: err,
    retriable: code === undefined || !PERMANENT_ERRNOS.has(code),
    details: { op, path: where, errno: code },
  })
}
