import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import { isTidemarkError, TidemarkError } from '../errors.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { SnapshotLayout } from '../snapshot/layout.js'
import { describeValue } from '../util/describe-value.js'

/** The `format` of a member lease object; one of another format is unreadable to this version. */
export const MEMBER_LEASE_FORMAT = 'tidemark-member/1'

/** A member lease object is a few hundred bytes; a larger one is not one. */
const MAX_MEMBER_BYTES = 16 * 1024

/**
 * The body of `<job>/_members/<id>.json`: the liveness of one process
 * (docs/ownership.md, "Member leases"). Every claim the process takes with
 * this lease names its key instead of carrying a lease of its own.
 */
export interface MemberLeaseRecord {
  format: typeof MEMBER_LEASE_FORMAT
  job: string
  /** Random, one per MemberLease: the object's name. */
  id: string
  owner: { name: string; host: string; pid: number }
  leaseMs: number
  /** Until when (ms since the Unix epoch, by the holder's clock) the process is alive; 0 once released. */
  leaseUntil: number
  startedAt: number
  renewedAt?: number
  releasedAt?: number
  /**
   * Set by a process that found the lease run out and takes one of its
   * claims (acquirer's clock, and its owner name); the holder's next write
   * finds it, counts an expiration and drops it.
   */
  takenAt?: number
  takenBy?: string
}

export interface MemberLeaseOptions {
  /** The snapshot store of the job's claims (it must write conditionally). */
  store: SnapshotStore
  job: string
  /** How long the lease holds without a renewal; renewed every third of it. Default 30 s. */
  leaseMs?: number
  /** A name for humans (default `<host>:<pid>`). */
  owner?: string
  /** Milliseconds since the Unix epoch (default Date.now); tests move it. */
  clock?: () => number
  /** A renewal failed with a store error (the next tick retries); the lease object was changed by someone else (lost). Must not throw. */
  onEvent?: (event: { type: 'renew-failed' | 'lost'; error: TidemarkError }) => void
}

export const MEMBER_LEASE_DEFAULTS = Object.freeze({ leaseMs: 30_000 })

/**
 * One lease for every claim of a process: the process renews this one
 * object every third of `leaseMs`, and its claims (taken with
 * `ownership: { memberLease }`) hold while it does, so renewal requests do
 * not grow with the partitions a process owns. A claim whose member lease
 * has run out (the process was killed or stopped) is taken by the next
 * owner as an expired claim is; the stopped process, when it resumes,
 * looks at its claims before its next commit (expirations grew) and stops
 * the partitions it lost.
 */
export class MemberLease {
  readonly store: SnapshotStore
  readonly job: string
  readonly id: string
  readonly key: string
  readonly leaseMs: number
  #record: MemberLeaseRecord
  #etag: string
  #state: 'held' | 'released' | 'lost' = 'held'
  #expirations = 0
  #timer: NodeJS.Timeout | undefined
  /** release() was called, or the lease was lost: no more renewals are scheduled. */
  #stopped = false
  #renewing: Promise<void> | undefined
  readonly #clock: () => number
  readonly #onEvent: NonNullable<MemberLeaseOptions['onEvent']>

  private constructor(options: Required<Omit<MemberLeaseOptions, 'owner'>>, record: MemberLeaseRecord, etag: string) {
    this.store = options.store
    this.job = record.job
    this.id = record.id
    this.key = memberKey(record.job, record.id)
    this.leaseMs = record.leaseMs
    this.#record = record
    this.#etag = etag
    this.#clock = options.clock
    this.#onEvent = options.onEvent
  }

  /** Writes the lease (create-only) and renews it on an unref'd timer until release(). */
  static async start(options: MemberLeaseOptions): Promise<MemberLease> {
    if (typeof options !== 'object' || options === null) throw new TypeError(`MemberLease options must be an object, got ${describeValue(options)}`)
    const { store, job, leaseMs = MEMBER_LEASE_DEFAULTS.leaseMs, owner = `${hostname()}:${process.pid}`, clock = Date.now, onEvent = () => undefined } = options
    if (typeof store?.put !== 'function') throw new TypeError(`options.store must be a SnapshotStore, got ${describeValue(store)}`)
    if (store.capabilities?.conditionalPut !== true || store.capabilities.compareAndSwap !== true) {
      throw new RangeError(`options.store (${store.url}) cannot hold a member lease: it needs capabilities.conditionalPut and capabilities.compareAndSwap`)
    }
    // The job is checked as the snapshot layout checks it.
    const layoutJob = new SnapshotLayout(job, 0).job
    // Renewed on a timer every third of it, and timers hold at most 2^31 - 1 ms.
    if (typeof leaseMs !== 'number' || !Number.isSafeInteger(leaseMs) || leaseMs < 3 || leaseMs > 2 ** 31 - 1) throw new RangeError(`options.leaseMs must be an integer from 3 to ${2 ** 31 - 1} (ms), got ${describeValue(leaseMs)}`)
    if (typeof owner !== 'string' || owner === '') throw new TypeError(`options.owner must be a non-empty string, got ${describeValue(owner)}`)
    if (typeof clock !== 'function') throw new TypeError(`options.clock must be a function returning milliseconds, got ${describeValue(clock)}`)
    if (typeof onEvent !== 'function') throw new TypeError(`options.onEvent must be a function, got ${describeValue(onEvent)}`)
    const now = clock()
    const record: MemberLeaseRecord = {
      format: MEMBER_LEASE_FORMAT, job: layoutJob, id: randomBytes(8).toString('hex'),
      owner: { name: owner, host: hostname(), pid: process.pid }, leaseMs, leaseUntil: now + leaseMs, startedAt: now,
    }
    const key = memberKey(layoutJob, record.id)
    const written = await store.put(key, serialize(record), { ifNoneMatch: true })
    const etag = written.etag ?? (await store.head(key))?.etag
    if (etag === undefined) throw new TidemarkError('TIDEMARK_DFS_REQUEST_FAILED', `${store.url} reported no etag for '${key}', which a member lease needs`, { details: { key } })
    const lease = new MemberLease({ store, job: layoutJob, leaseMs, clock, onEvent }, record, etag)
    lease.#schedule(performance.now())
    return lease
  }

  /** Until when the lease holds by this host's clock; 0 once released. */
  get leaseUntil(): number {
    return this.#record.leaseUntil
  }

  /** The lease has run out by this host's clock (its owner must renew it before it commits anything more). */
  get expired(): boolean {
    return this.#clock() >= this.#record.leaseUntil
  }

  get state(): 'held' | 'released' | 'lost' {
    return this.#state
  }

  /**
   * How many times a write of this lease found that another process had
   * read it run out and marked it before taking one of its claims: each
   * time, each claim is looked at again before its next commit. A lease that
   * ran out and was renewed with nobody taking anything counts nothing: its
   * renewal, a compare-and-swap against the version this process wrote,
   * proves that no claim was taken by its expiry meanwhile.
   */
  get expirations(): number {
    return this.#expirations
  }

  /**
   * Renews now when the lease has run out by this host's clock; resolves at
   * once while it holds. Fails when the renewal fails: nothing may be
   * committed on a lease that cannot be proven.
   */
  async ensureLive(): Promise<void> {
    if (!this.expired) return
    await this.renew()
  }

  /** Extends the lease to leaseMs from now (a compare-and-swap: one PUT). */
  renew(): Promise<void> {
    this.#renewing ??= this.#renew().finally(() => { this.#renewing = undefined })
    return this.#renewing
  }

  async #renew(): Promise<void> {
    if (this.#state !== 'held') throw this.#notHeld()
    const now = this.#clock()
    await this.#write({ ...this.#record, leaseUntil: now + this.leaseMs, renewedAt: now })
  }

  /**
   * The next renewal a third of the lease after the start of the one before
   * (performance.now() ms), or at once when that one took longer: the lease
   * then holds while renewals take less than half of it, where a fixed
   * interval that skips a tick while a renewal runs held only below a third.
   */
  #schedule(lastStart: number): void {
    if (this.#stopped) return
    this.#timer = setTimeout(() => void this.#tick(), Math.max(0, lastStart + Math.max(1, Math.floor(this.leaseMs / 3)) - performance.now()))
    // The lease must not keep a process alive that has nothing else to do.
    this.#timer.unref()
  }

  async #tick(): Promise<void> {
    if (this.#state !== 'held') return
    const started = performance.now()
    try {
      await this.renew()
    } catch (error) {
      // A lost lease was reported by #write already.
      if ((this.#state as string) === 'lost') return
      this.#onEvent({ type: 'renew-failed', error: isTidemarkError(error) ? error : new TidemarkError('TIDEMARK_DFS_REQUEST_FAILED', `renewing member lease ${this.key} failed`, { cause: error, retriable: true }) })
    }
    this.#schedule(started)
  }

  /** Stops renewing and marks the lease released (leaseUntil 0). Call after every claim named by it was released. */
  async release(): Promise<void> {
    this.#stopped = true
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#timer = undefined
    await this.#renewing?.catch(() => undefined)
    if (this.#state !== 'held') return
    await this.#write({ ...this.#record, leaseUntil: 0, releasedAt: this.#clock() })
    this.#state = 'released'
  }

  async #write(record: MemberLeaseRecord): Promise<void> {
    for (let marks = 0; ; marks++) {
      try {
        const written = await this.store.put(this.key, serialize(record), { ifMatch: this.#etag })
        const etag = written.etag ?? (await this.store.head(this.key))?.etag
        if (etag === undefined) throw new TidemarkError('TIDEMARK_DFS_REQUEST_FAILED', `${this.store.url} reported no etag for '${this.key}'`, { details: { key: this.key } })
        this.#etag = etag
        this.#record = record
        return
      } catch (error) {
        if (!isTidemarkError(error, 'TIDEMARK_DFS_PRECONDITION_FAILED')) throw error
        // Another process that takes a claim marks the lease first (takenAt):
        // the object is then this process's last write and the mark. The
        // claims are looked at again, and the write goes on from the marked
        // version. Anything else (removed, replaced by hand) means this
        // process can no longer prove it is alive. Every mark is one claim
        // taken at most, so the marks end.
        const now = await readMemberLease(this.store, this.key)
        if (marks < MAX_MARKS && now !== undefined && 'record' in now && now.etag !== undefined && this.#isMarked(now.record)) {
          this.#expirations++
          this.#etag = now.etag
          continue
        }
        this.#state = 'lost'
        this.#stopped = true
        if (this.#timer !== undefined) clearTimeout(this.#timer)
        const lost = new TidemarkError('TIDEMARK_OWNERSHIP_LOST', `member lease ${this.key} was changed by someone else; this process's claims no longer hold`, { cause: error, details: { key: this.key, reason: 'member-lease-changed' } })
        this.#onEvent({ type: 'lost', error: lost })
        throw lost
      }
    }
  }

  /** `found` is this process's last write with a taker's mark on it, nothing else changed. */
  #isMarked(found: MemberLeaseRecord): boolean {
    if (typeof found.takenAt !== 'number') return false
    const { takenAt: _at, takenBy: _by, ...rest } = found
    const { takenAt: _ownAt, takenBy: _ownBy, ...own } = this.#record
    return JSON.stringify(rest) === JSON.stringify(own)
  }

  #notHeld(): TidemarkError {
    return new TidemarkError('TIDEMARK_OWNERSHIP_LOST', `member lease ${this.key} is ${this.#state}`, { details: { key: this.key, reason: this.#state } })
  }
}

/** The folder of a job's member leases: beside its partitions, under a name no partition has (partitions are digits or `<topic>-<n>`). */
export const MEMBERS_FOLDER = '_members'

/** The key of a member lease object. */
export function memberKey(job: string, id: string): string {
  return `${job}/${MEMBERS_FOLDER}/${id}.json`
}

/** Consecutive takers' marks one write of a lease goes on after; more means the object is written in a loop by something else. */
const MAX_MARKS = 64

/**
 * Whether the member lease at `key` holds at `now` (the acquirer's clock),
 * for an acquirer that takes a claim held by it: 'live' when it exists, reads
 * as a member lease, is not released and has not run out. Run out, it is
 * marked first (takenAt, a compare-and-swap against the version read), so
 * that its holder's next write fails, finds the mark and looks at its claims
 * again; 'changed' when the mark lost to a write (a renewal, or another
 * acquirer's mark) since it was read. A lease object that cannot be read, or
 * that was released, holds nothing and is not marked.
 */
export async function markMemberLeaseTaken(store: SnapshotStore, key: string, now: number, by: string): Promise<'live' | 'marked' | 'not-held' | 'changed'> {
  const read = await readMemberLease(store, key)
  if (read === undefined || !('record' in read) || read.record.leaseUntil === 0) return 'not-held'
  if (read.record.leaseUntil > now) return 'live'
  // Marked already and not renewed since: the holder's next write finds the
  // mark as it is. Marked again, a burst of acquirers taking a dead
  // process's claims would race for one object.
  if (read.record.takenAt !== undefined) return 'marked'
  if (read.etag === undefined) throw new TidemarkError('TIDEMARK_DFS_REQUEST_FAILED', `${store.url} reported no etag for '${key}', which marking a member lease needs`, { details: { key } })
  try {
    await store.put(key, serialize({ ...read.record, takenAt: now, takenBy: by }), { ifMatch: read.etag })
    return 'marked'
  } catch (error) {
    if (isTidemarkError(error, 'TIDEMARK_DFS_PRECONDITION_FAILED')) return 'changed'
    throw error
  }
}

/**
 * The member lease object at `key` as it is now (for acquirers, the holder
 * and operators): undefined when there is none, else its record and the
 * etag of the version read (HEAD, then GET), or why it is not a member
 * lease (too large, not JSON, another format, no leaseUntil).
 */
export async function readMemberLease(store: SnapshotStore, key: string): Promise<{ record: MemberLeaseRecord; etag: string | undefined } | { problem: string } | undefined> {
  const info = await store.head(key)
  if (info === undefined) return undefined
  if (info.size > MAX_MEMBER_BYTES) return { problem: `it is ${info.size} bytes, more than a member lease's ${MAX_MEMBER_BYTES}` }
  let body: Buffer
  try {
    const chunks: Buffer[] = []
    for await (const chunk of await store.get(key)) chunks.push(chunk as Buffer)
    body = Buffer.concat(chunks)
  } catch (error) {
    if (isTidemarkError(error, 'TIDEMARK_DFS_NOT_FOUND')) return undefined
    throw error
  }
  let record: Partial<MemberLeaseRecord>
  try {
    record = JSON.parse(body.toString('utf8')) as Partial<MemberLeaseRecord>
  } catch (error) {
    return { problem: `not JSON (${(error as Error).message})` }
  }
  if (typeof record !== 'object' || record === null) return { problem: 'not a JSON object' }
  if (record.format !== MEMBER_LEASE_FORMAT) return { problem: `format is ${JSON.stringify(record.format)}, not '${MEMBER_LEASE_FORMAT}'` }
  if (typeof record.leaseUntil !== 'number') return { problem: `leaseUntil ${JSON.stringify(record.leaseUntil)} is not a number` }
  return { record: record as MemberLeaseRecord, etag: info.etag }
}

function serialize(record: MemberLeaseRecord): Buffer {
  return Buffer.from(`${JSON.stringify(record, null, 2)}\n`, 'utf8')
}
