import { mkdir, stat } from 'node:fs/promises'
import { describeValue } from '../../util/describe-value.js'
import { isAbsolute, resolve } from 'node:path'
import { AbstractRevisionedLog, type LogEntry } from '../revisioned-log.js'
import { appended, waitForAppend } from './append-waits.js'
import { LogCore } from './core.js'
import { io } from './io.js'
import { validateOptions, type FileLogOptions } from './options.js'

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

async function attachCore(dir: string, options: Readonly<Required<FileLogOptions>>): Promise<{ core: LogCore; detach(): Promise<void>; where: string }> {
  if (!options.readOnly) await io('open', dir, () => mkdir(dir, { recursive: true }))
  const { dev, ino } = await io('open', dir, () => stat(dir))
  // The path too: a directory removed and made again may get the same inode.
  const where = JSON.stringify([dir, dev, ino])
  const key = JSON.stringify([dir, dev, ino, options])
  let joined = cores.get(key)
  const creator = joined === undefined
  if (joined === undefined) {
    const core = new LogCore(dir, options, () => appended(where))
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
  return { core: entry.core, detach, where }
}

/**
 * @internal Calls `wake` once, at the next append written in this process
 * to `log` when it is an open FileLog (through any handle of its
 * directory), and returns the function that stops waiting; undefined for
 * another log, or a FileLog not open.
 */
export function onAppendHere(log: unknown, wake: () => void): (() => void) | undefined {
  const where = log instanceof FileLog ? whereOf.get(log) : undefined
  return where === undefined ? undefined : waitForAppend(where, wake)
}

/** Each open handle's directory, as append-waits.ts knows it. */
const whereOf = new WeakMap<FileLog, string>()

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
  #core: { core: LogCore; detach(): Promise<void>; where: string } | undefined
  /** This handle's appends and truncations in flight, which its close waits for. */
  #inFlight = 0
  #drained: (() => void) | undefined
  /** One handler for every operation that settles: a Set entry and a closure per append were a visible share of a fileLogSink's delivery. */
  readonly #settled = (): void => {
    if (--this.#inFlight === 0) this.#drained?.()
  }

  constructor(dir: string, options: FileLogOptions = {}) {
    super()
    if (typeof dir !== 'string' || dir === '') throw new TypeError(`dir must be a non-empty path string, got ${describeValue(dir)}`)
    if (!isAbsolute(dir)) throw new RangeError(`dir ('${dir}') must be an absolute path`)
    this.dir = resolve(dir)
    this.location = this.dir
    this.options = validateOptions(options)
  }

  /** Attaches the handle to the log's core, opening it (creating the directory and the first segment, cutting a torn tail) if this process has none. */
  async recover(): Promise<void> {
    this.#core ??= await attachCore(this.dir, this.options)
    whereOf.set(this, this.#core.where)
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
    for (const data of entries) if (!(data instanceof Uint8Array)) throw new TypeError(`appendAll(entries): every entry must be a Uint8Array, got ${describeValue(data)}`)
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
    whereOf.delete(this)
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
