// Long file: LogCore is one state machine (the append lock, the groups of
// appends and their flushes, the relay server); its private fields are shared
// by every step, so the steps stay together. Segments, I/O errors, options,
// the writing of a group's records and the relay client live beside it.
import { open, readdir, unlink, type FileHandle } from 'node:fs/promises'
import { join } from 'node:path'
import { RelayServer, relaySupported } from '../append-relay.js'
import { LockFile } from '../lock-file.js'
import type { LogEntry } from '../revisioned-log.js'
import { TidemarkError } from '../../errors.js'
import { RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES } from '../record.js'
import { RelaySender } from './relay.js'
import { GROUP_MAX_BYTES, GROUP_MAX_ENTRIES, writeGroupRecords, type AppendGroup, type PendingAppend, type RunningFlush } from './group.js'
import { io, truncated } from './io.js'
import type { FileLogOptions } from './options.js'
import { createSegmentFile, newSegment, openSegment, readSegmentBatches, repairTail, scanTail, SEGMENT_NAME, type Segment, type SegmentFile } from './segments.js'
import { borrowWriter, newWriter, readsEnded, type Writer } from './writer.js'

const LOCK_NAME = 'append.lock'

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
export class LogCore {
  readonly dir: string
  readonly options: Readonly<Required<FileLogOptions>>
  #segments: Segment[] = []
  #writer: Writer | undefined
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
  readonly #relay: RelaySender

  /** Told when appends were written (append-waits.ts): readers of this process waiting for them wake. */
  readonly #onAppended: () => void

  constructor(dir: string, options: Readonly<Required<FileLogOptions>>, onAppended: () => void = () => {}) {
    this.dir = dir
    this.options = options
    this.#onAppended = onAppended
    this.#lock = new LockFile(join(this.dir, LOCK_NAME), () => this.#releaseWhenIdle())
    this.#relay = new RelaySender(this.#lock, options)
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
    yield* readSegmentBatches(this.dir, () => this.#segments, { from, stop }, this.options.maxRecordBytes, assertOpen, (segment) =>
      this.#openForRead(segment, from, oldest))
  }

  /** The segment this core writes is read through the writer's descriptor (writer.ts); any other is opened. */
  async #openForRead(segment: Segment, from: bigint, oldest: bigint): Promise<SegmentFile> {
    const writer = this.#writer
    const open = () => openSegment(this.dir, segment, from, oldest)
    return writer?.segment === segment ? borrowWriter(writer, () => this.#writer, open) : open()
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
    this.#relay.close()
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
    await readsEnded(writer)
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
        await writeGroupRecords(this.dir, writer, entries, verdicts, first, next, bytes)
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
    if (decided > 0) this.#onAppended()
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
    let verdicts
    try {
      verdicts = await this.#relay.send(group.entries, () => this.#closed)
    } catch (err) {
      group.relayed = true
      for (const entry of group.entries) entry.reject(err)
      return true
    }
    if (verdicts === undefined) return false
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
    const early = own === undefined ? undefined : scanTail(this.dir, own.segment, own.file, this.options.maxRecordBytes)
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
    this.#segments = bases.map((base) => known.get(base) ?? newSegment(this.dir, base))
    const tail = this.#tailSegment()
    if (early !== undefined && own!.segment === tail) return early
    await early?.catch(() => {})
    if (this.#writer !== undefined && this.#writer.segment !== tail) await this.#closeWriter()
    if (tail === undefined) return true
    const file = await openSegment(this.dir, tail, undefined, undefined)
    try {
      return await scanTail(this.dir, tail, file, this.options.maxRecordBytes)
    } finally {
      await file.close()
    }
  }


  /** Under the lock: cut an incomplete or zero-filled last record. */
  async #repairTail(): Promise<void> {
    const tail = this.#tailSegment()!
    await repairTail(this.dir, tail, (await this.#writerFor(tail)).file, this.options.maxRecordBytes)
  }

  async #writerFor(segment: Segment): Promise<Writer> {
    if (this.#writer?.segment === segment) return this.#writer
    await this.#closeWriter()
    const file = await this.#io('open', () => open(segment.path, 'r+'))
    this.#writer = newWriter(segment, file)
    return this.#writer
  }

  async #roll(base: bigint): Promise<Writer> {
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

  async #createSegment(base: bigint): Promise<void> {
    await createSegmentFile(this.dir, base, this.options.sync)
    await this.#refresh()
  }

  #tailSegment(): Segment | undefined {
    return this.#segments[this.#segments.length - 1]
  }

  #io<T>(op: string, work: () => Promise<T>): Promise<T> {
    return io(op, this.dir, work)
  }
}
