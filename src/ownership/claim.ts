import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import { setTimeout as delay } from 'node:timers/promises'
import type { Readable } from 'node:stream'
import { TidemarkError, isTidemarkError } from '../errors.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { MAX_EPOCH, SnapshotLayout } from '../snapshot/layout.js'
import { CLAIM_FORMAT, MAX_CLAIM_BYTES, parseClaim, serializeClaim, type ClaimOwner, type ClaimRecord } from './record.js'
import { describeValue } from '../util/describe-value.js'
import { markMemberLeaseTaken, type MemberLease } from './member-lease.js'
import { ownProcessIdentity, proveHolderDead, type DeadHolderProof } from './holder-process.js'

/**
 * How an acquirer treats a claim that another owner holds:
 * - `'if-expired'` takes it only once its lease has run out (by the
 *   acquirer's clock) or it was released;
 * - `'force'` takes it whatever its lease says, and also replaces an
 *   unreadable claim object. For a consumer group's assignee, or an operator
 *   or supervisor who knows the holder is dead. One exception: an acquirer
 *   that passes a `generation` does not take a live claim of a newer
 *   generation (TIDEMARK_OWNERSHIP_CONFLICT, reason newer-generation).
 */
export type ClaimTakeover = 'if-expired' | 'force'

export interface AcquireClaimOptions {
  /** Where the claim lives, beside the partition's snapshots; needs `capabilities.conditionalPut` and `capabilities.compareAndSwap`. */
  store: SnapshotStore
  job: string
  partition: string | number
  /** A name for humans, recorded in the claim (default `<host>:<pid>`). Owners are told apart by a random id, not by it. */
  owner?: string
  /**
   * How long the claim holds without a renewal (default 30 s); renew every
   * `claim.renewIntervalMs` (a third of it). null: no lease, the claim holds
   * until released or taken by force (inside a consumer group, whose
   * assignment decides).
   */
  leaseMs?: number | null
  /** Default `'if-expired'`. */
  takeover?: ClaimTakeover
  /** The new epoch is above this too: pass the highest snapshot epoch seen, so that the claim's epoch fences every snapshot writer before it (default 0). */
  minEpoch?: number
  /** The consumer group's generation id that assigned the partition, recorded in the claim. */
  generation?: number
  /** Milliseconds since the Unix epoch (default Date.now); tests move it to expire leases without waiting. */
  clock?: () => number
  /**
   * Hold the claim by this process's member lease instead of a lease of its
   * own (leaseMs is then not given): the claim is renewed by nobody, and
   * holds while the member lease does.
   */
  memberLease?: MemberLease
}

export const CLAIM_DEFAULTS = Object.freeze({
  leaseMs: 30_000,
  takeover: 'if-expired' as ClaimTakeover,
  minEpoch: 0,
})

/** A claim object as it is in the store: its etag and bytes, and the record or why the bytes are not one. */
export interface StoredClaim {
  etag: string
  record?: ClaimRecord
  /** Why the object is not a readable claim of this job and partition. */
  problem?: string
}

/**
 * Takes the partition's claim: creates `<job>/<partition>/owner.json` when
 * there is none (a create-only put), or replaces the current claim with a
 * compare-and-swap against the etag that was read, so of any number of
 * acquirers racing for it exactly one wins. The new claim's epoch is above
 * the previous claim's and above `minEpoch`.
 *
 * Fails with TIDEMARK_OWNERSHIP_CONFLICT (retriable) when another owner
 * holds the claim (a live lease, or no lease) and `takeover` is not
 * `'force'`, when the claim object is unreadable and `takeover` is not
 * `'force'`, when a live claim of a newer consumer-group generation holds
 * it, or when another acquirer won the race; `details.reason` says which
 * (live-lease, no-lease, unreadable, newer-generation, race). Store
 * failures pass through as they are.
 */
export async function acquireClaim(options: AcquireClaimOptions): Promise<Claim> {
  const o = resolveOptions(options)
  for (let attempt = 1; ; attempt++) {
    try {
      return await acquireOnce(o)
    } catch (err) {
      // A race is run again (its reads see the claim as it is now, so the
      // rules above decide as before) when nobody won it (radosgw can answer
      // 409 to each of two conditional puts in flight at once), or when a
      // forced takeover lost it to a renewal by the very holder it replaces.
      // Losing to another new owner is a conflict like any other.
      if (!isTidemarkError(err, 'TIDEMARK_OWNERSHIP_CONFLICT') || err.details.runAgain !== true || attempt >= RACE_ATTEMPTS) throw err
      await delay(Math.floor(Math.random() * 20 * attempt))
    }
  }
}

/** How often a race that nobody won, or that a force lost to the replaced holder's renewal, is run again before its conflict is reported. */
const RACE_ATTEMPTS = 5

async function acquireOnce(o: ResolvedOptions): Promise<Claim> {
  const layout = new SnapshotLayout(o.job, o.partition)
  const { store } = o
  const key = layout.claimKey
  const current = await readStoredClaim(store, layout.job, layout.partition)
  const now = o.clock()
  const where = `partition ${layout.partition} of job ${layout.job} (${key} in ${store.url})`
  let previousEpoch = 0
  let deadHolder: DeadHolderProof | undefined
  if (current !== undefined && current.record === undefined && o.takeover !== 'force') {
    throw conflict('unreadable', `the claim of ${where} is unreadable (${current.problem}); pass takeover: 'force' to replace it, once you know no owner is running`, key, { problem: current.problem })
  }
  if (current?.record !== undefined) {
    const held = current.record
    previousEpoch = held.epoch
    const holder = `${held.owner.name} (id ${held.owner.id}, epoch ${held.epoch})`
    // The etag lets a waiting acquirer watch for a change with HEADs alone.
    const details = { holder: held.owner, epoch: held.epoch, leaseUntil: held.leaseUntil, etag: current.etag }
    const live = held.leaseUntil === null || held.leaseUntil > now
    // A member whose assignment is older than the holder's (a delayed acquire,
    // a zombie of an earlier generation) must not force its way back in.
    if (o.takeover === 'force' && live && o.generation !== undefined && held.generation !== undefined && held.generation > o.generation) {
      throw conflict('newer-generation', `${holder} holds ${where} for consumer-group generation ${held.generation}, newer than this acquirer's ${o.generation}; it is taken only once its lease runs out, or by force without a generation`, key, { ...details, generation: held.generation })
    }
    let blocked: TidemarkError | undefined
    if (held.leaseUntil !== 0 && o.takeover !== 'force') {
      if (held.leaseUntil === null && held.member !== undefined) {
        // Held by a process's member lease: live while that lease is. Run
        // out, it is marked before the claim is taken, so that its holder's
        // next renewal finds the mark and looks at its claims (member-lease.ts).
        const lease = await markMemberLeaseTaken(store, held.member, now, o.owner)
        if (lease === 'live') {
          blocked = conflict('live-member', `${holder} holds ${where} by member lease ${held.member}, which has not run out by this host's clock. Retry after it, or pass takeover: 'force' if you know that process is gone`, key, { ...details, member: held.member })
        } else if (lease === 'changed') {
          throw conflict('race', `member lease ${held.member}, which holds ${where}, was written while this acquirer marked it (its holder renewed it)`, key, { ...details, member: held.member, runAgain: true })
        }
      } else if (held.leaseUntil === null) {
        blocked = conflict('no-lease', `${holder} holds ${where} without a lease; only takeover: 'force' takes it (its consumer group's new assignee, or an operator who knows it is gone)`, key, details)
      } else if (held.leaseUntil > now) {
        blocked = conflict('live-lease', `${holder} holds ${where}; its lease runs for ${held.leaseUntil - now} ms more by this host's clock. Retry after it, or pass takeover: 'force' if you know that owner is gone`, key, details)
      }
    }
    if (blocked !== undefined) {
      // A holder on this host whose process is proven gone holds nothing:
      // its claim is taken at once, with the same conditional write.
      deadHolder = proveHolderDead(held.owner)
      if (deadHolder === undefined) throw blocked
    }
  }
  const epoch = Math.max(previousEpoch, o.minEpoch) + 1
  if (epoch > MAX_EPOCH) {
    throw new TidemarkError('TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED', `no epoch above ${epoch - 1} is left for a new owner of ${where} (the maximum is ${MAX_EPOCH})`, { details: { key } })
  }
  const record: ClaimRecord = {
    format: CLAIM_FORMAT,
    job: layout.job,
    partition: layout.partition,
    epoch,
    owner: { id: randomBytes(8).toString('hex'), name: o.owner, host: hostname(), pid: process.pid, ...ownProcessIdentity() },
    leaseMs: o.leaseMs,
    leaseUntil: o.leaseMs === null ? null : now + o.leaseMs,
    ...(o.generation === undefined ? {} : { generation: o.generation }),
    ...(o.memberLease === undefined ? {} : { member: o.memberLease.key }),
    takenAt: now,
  }
  const written = await writeClaim(store, key, record, current?.etag)
  if ('lostTo' in written) {
    const winner = written.lostTo?.record
    // The object is as it was before our put: the put failed, but nobody else's landed either.
    const noWinner = written.lostTo === undefined ? current === undefined : written.lostTo.etag === current?.etag
    const holderRenewed = o.takeover === 'force' && winner !== undefined && winner.owner.id === current?.record?.owner.id
    throw conflict('race', `another owner${winner === undefined ? '' : ` (${winner.owner.name}, id ${winner.owner.id}, epoch ${winner.epoch})`} took ${where} first`, key, {
      ...(winner === undefined ? {} : { holder: winner.owner, epoch: winner.epoch, leaseUntil: winner.leaseUntil }),
      ...(noWinner || holderRenewed ? { runAgain: true } : {}),
    })
  }
  return new Claim(store, key, record, written.etag, o.clock, current?.record, deadHolder)
}

/** The partition's claim object as it is now, or undefined when there is none; for operators and tests. Costs a HEAD and a GET. */
export async function readClaim(store: SnapshotStore, job: string, partition: string | number): Promise<StoredClaim | undefined> {
  const layout = new SnapshotLayout(job, partition)
  return readStoredClaim(store, layout.job, layout.partition)
}

/**
 * A partition claim this process holds, as acquireClaim() returned it. Its
 * `epoch` is the fencing token to write snapshots with. check(), renew()
 * and release() run one at a time, in call order, so that each compares
 * against the etag the one before it left.
 */
export class Claim {
  readonly store: SnapshotStore
  readonly key: string
  readonly job: string
  readonly partition: string
  readonly epoch: number
  readonly owner: Readonly<ClaimOwner>
  readonly leaseMs: number | null
  readonly generation: number | undefined
  /** The claim this one replaced (released, expired or taken by force), as it was read; undefined when there was none or it was unreadable. */
  readonly previous: Readonly<ClaimRecord> | undefined
  /**
   * Set when the claim was taken from a holder that still held it by its
   * lease, because that holder ran on this host and its process is proven
   * gone (docs/ownership.md, "A holder proven dead").
   */
  readonly deadHolder: Readonly<DeadHolderProof> | undefined
  #record: ClaimRecord
  #etag: string
  #state: 'held' | 'released' | 'lost' = 'held'
  #lost: TidemarkError | undefined
  #queue: Promise<unknown> = Promise.resolve()
  readonly #clock: () => number

  /** @internal Claims come from acquireClaim(). */
  constructor(store: SnapshotStore, key: string, record: ClaimRecord, etag: string, clock: () => number, previous?: ClaimRecord, deadHolder?: DeadHolderProof) {
    this.store = store
    this.key = key
    this.job = record.job
    this.partition = record.partition
    this.epoch = record.epoch
    this.owner = Object.freeze({ ...record.owner })
    this.leaseMs = record.leaseMs
    this.generation = record.generation
    this.previous = previous
    this.deadHolder = deadHolder
    this.#record = record
    this.#etag = etag
    this.#clock = clock
  }

  /**
   * Whether a listing of the partition's snapshots made before this claim
   * was taken still describes the partition as this owner takes it over:
   * it holds the last snapshot that the owner this claim replaced recorded
   * at its release (ClaimRecord.lastSnapshot). False: list again, or the
   * restore would pick the snapshot before that one and replay.
   */
  listingIsCurrent(refs: ReadonlyArray<{ key: string }>): boolean {
    const last = this.previous?.lastSnapshot
    return last === undefined || refs.some((r) => r.key === last)
  }

  /** The etag of the claim object as this owner last wrote it. */
  get etag(): string {
    return this.#etag
  }

  /** Until when the lease holds by this host's clock (ms since the Unix epoch); null without a lease, 0 once released. */
  get leaseUntil(): number | null {
    return this.#record.leaseUntil
  }

  /** The claim object as this owner last wrote it. */
  get record(): Readonly<ClaimRecord> {
    return this.#record
  }

  /** `'lost'` once a check, renewal or release found another owner's claim (or none). */
  get state(): 'held' | 'released' | 'lost' {
    return this.#state
  }

  /** How often to renew: a third of the lease, so two renewals may fail before it runs out; undefined without a lease. */
  get renewIntervalMs(): number | undefined {
    return this.leaseMs === null ? undefined : Math.max(1, Math.floor(this.leaseMs / 3))
  }

  /**
   * One HEAD: resolves when the claim object is still the one this owner
   * wrote; otherwise fails with TIDEMARK_OWNERSHIP_LOST (after a GET that
   * says who holds it now) and the owner must stop processing the partition.
   * It does not renew, and it does not fail only because the lease ran out:
   * until another owner takes the claim, this one still holds it.
   */
  check(): Promise<void> {
    return this.#serial(async () => {
      this.#assertHeld()
      const info = await this.store.head(this.key)
      if (info?.etag === this.#etag) return
      throw this.#lose(await readStoredClaim(this.store, this.job, this.partition))
    })
  }

  /**
   * Extends the lease to leaseMs from now (a compare-and-swap: one PUT).
   * Fails with TIDEMARK_OWNERSHIP_LOST when another owner took the claim
   * meanwhile; a store failure passes through, and the lease runs on until
   * a renewal succeeds or it expires.
   */
  renew(): Promise<void> {
    return this.#serial(async () => {
      this.#assertHeld()
      const now = this.#clock()
      await this.#write({ ...this.#record, leaseUntil: this.leaseMs === null ? null : now + this.leaseMs, renewedAt: now })
    })
  }

  /**
   * Marks the claim released (leaseUntil 0, epoch kept; a compare-and-swap),
   * so the next owner takes it at once without waiting for the lease.
   * Resolves true when released, false when this owner no longer held it
   * (lost before, or found lost now) or had released it already. Stop
   * processing and writing snapshots before calling it. `lastSnapshot`:
   * the key of the last manifest this owner committed, recorded for the
   * next owner (ClaimRecord.lastSnapshot).
   */
  release(options: { lastSnapshot?: string } = {}): Promise<boolean> {
    const { lastSnapshot } = options
    if (lastSnapshot !== undefined && typeof lastSnapshot !== 'string') throw new TypeError(`lastSnapshot must be a string, got ${typeof lastSnapshot}`)
    return this.#serial(async () => {
      if (this.#state !== 'held') return false
      try {
        await this.#write({ ...this.#record, leaseUntil: 0, releasedAt: this.#clock(), ...(lastSnapshot === undefined ? {} : { lastSnapshot }) })
      } catch (err) {
        if (isTidemarkError(err, 'TIDEMARK_OWNERSHIP_LOST')) return false
        throw err
      }
      this.#state = 'released'
      return true
    })
  }

  async #write(record: ClaimRecord): Promise<void> {
    const written = await writeClaim(this.store, this.key, record, this.#etag)
    if ('lostTo' in written) throw this.#lose(written.lostTo)
    this.#etag = written.etag
    this.#record = record
  }

  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(fn, fn)
    this.#queue = run.catch(() => {})
    return run
  }

  #assertHeld(): void {
    if (this.#state === 'lost') throw this.#lost!
    if (this.#state === 'released') {
      throw new TidemarkError('TIDEMARK_OWNERSHIP_LOST', `the claim of ${this.#where()} was released by this owner`, { details: this.#details({ reason: 'released' }) })
    }
  }

  #lose(current: StoredClaim | undefined): TidemarkError {
    const record = current?.record
    let reason: string
    let what: string
    if (current === undefined) {
      reason = 'removed'
      what = 'the claim object was removed'
    } else if (record === undefined) {
      reason = 'unreadable'
      what = `the claim object was replaced by one that is unreadable (${current.problem})`
    } else if (record.owner.id === this.owner.id && record.epoch === this.epoch && record.takeoverAt !== undefined) {
      reason = 'takeover-pending'
      what = `${record.takeoverBy ?? 'a new assignee'} is taking it over (its wait for this owner's release ran out)`
    } else {
      reason = 'taken-over'
      what = `${record.owner.name} (id ${record.owner.id}) holds it now with epoch ${record.epoch}`
    }
    this.#state = 'lost'
    this.#lost = new TidemarkError('TIDEMARK_OWNERSHIP_LOST', `this owner (epoch ${this.epoch}) lost the claim of ${this.#where()}: ${what}; stop processing the partition`, {
      details: this.#details({ reason, ...(record === undefined ? {} : { currentEpoch: record.epoch, currentOwner: record.owner }) }),
    })
    return this.#lost
  }

  #where(): string {
    return `partition ${this.partition} of job ${this.job} (${this.key} in ${this.store.url})`
  }

  #details(extra: Record<string, unknown>): Record<string, unknown> {
    return { key: this.key, job: this.job, partition: this.partition, epoch: this.epoch, owner: this.owner, ...extra }
  }
}

/**
 * Writes the claim create-only (no `ifMatch`) or as a compare-and-swap. A
 * failed condition is either another writer's version or this very write,
 * landed by an attempt whose answer was lost before the store retried it: the
 * bytes tell (every record carries a random owner id and its times).
 */
/** @internal Also for markTakeover (assigned.ts). */
export async function writeClaim(store: SnapshotStore, key: string, record: ClaimRecord, ifMatch: string | undefined): Promise<{ etag: string } | { lostTo: StoredClaim | undefined }> {
  const body = serializeClaim(record)
  try {
    const result = await store.put(key, body, ifMatch === undefined ? { ifNoneMatch: true } : { ifMatch })
    const etag = result.etag ?? (await store.head(key))?.etag
    if (etag === undefined) throw missingEtag(store, key)
    return { etag }
  } catch (err) {
    if (!isTidemarkError(err, 'TIDEMARK_DFS_OBJECT_EXISTS') && !isTidemarkError(err, 'TIDEMARK_DFS_PRECONDITION_FAILED')) throw err
  }
  const job = record.job
  const current = await readStoredClaim(store, job, record.partition, body)
  if (current !== undefined && current.same === true) return { etag: current.etag }
  return { lostTo: current }
}

/**
 * The claim object with an etag that belongs to the bytes read: HEAD first,
 * then GET. The object only moves forward, so bytes newer than the etag make
 * a compare-and-swap against that etag fail, never succeed wrongly.
 */
/** @internal Also for markTakeover (assigned.ts). */
export async function readStoredClaim(store: SnapshotStore, job: string, partition: string, compareTo?: Buffer): Promise<(StoredClaim & { same?: boolean }) | undefined> {
  const key = new SnapshotLayout(job, partition).claimKey
  const info = await store.head(key)
  if (info === undefined) return undefined
  const etag = info.etag
  if (etag === undefined) throw missingEtag(store, key)
  if (info.size > MAX_CLAIM_BYTES) return { etag, problem: `it is ${info.size} bytes, more than a claim's ${MAX_CLAIM_BYTES}` }
  if (info.size === 0) return { etag, problem: 'it is empty' }
  let body: Buffer
  try {
    body = await readBounded(await store.get(key, { metadata: true }), MAX_CLAIM_BYTES)
  } catch (err) {
    if (isTidemarkError(err, 'TIDEMARK_DFS_NOT_FOUND')) return undefined // removed since the HEAD
    throw err
  }
  const parsed = parseClaim(body, job, partition)
  return { etag, ...parsed, ...(compareTo === undefined ? {} : { same: body.equals(compareTo) }) }
}

async function readBounded(stream: Readable, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = []
  let size = 0
  try {
    for await (const chunk of stream) {
      chunks.push(chunk as Buffer)
      size += (chunk as Buffer).byteLength
      if (size > limit) break
    }
  } finally {
    stream.destroy()
  }
  return Buffer.concat(chunks)
}

function missingEtag(store: SnapshotStore, key: string): TidemarkError {
  return new TidemarkError('TIDEMARK_DFS_REQUEST_FAILED', `${store.url} reported no etag for '${key}', which a claim needs`, { details: { key } })
}

/** @internal Also for markTakeover (assigned.ts). */
export function conflict(reason: string, message: string, key: string, details: Record<string, unknown>): TidemarkError {
  return new TidemarkError('TIDEMARK_OWNERSHIP_CONFLICT', message, { details: { key, reason, ...details } })
}

interface ResolvedOptions {
  store: SnapshotStore
  job: string
  partition: string | number
  owner: string
  leaseMs: number | null
  takeover: ClaimTakeover
  minEpoch: number
  generation: number | undefined
  clock: () => number
  memberLease: MemberLease | undefined
}

function resolveOptions(options: AcquireClaimOptions): ResolvedOptions {
  if (typeof options !== 'object' || options === null) throw new TypeError(`options must be an object with store, job and partition, got ${describeValue(options)}`)
  const {
    store, job, partition, owner = `${hostname()}:${process.pid}`, leaseMs = CLAIM_DEFAULTS.leaseMs,
    takeover = CLAIM_DEFAULTS.takeover, minEpoch = CLAIM_DEFAULTS.minEpoch, generation, clock = Date.now, memberLease,
  } = options
  if (typeof store !== 'object' || store === null || typeof store.put !== 'function' || typeof store.head !== 'function') {
    throw new TypeError(`store must be a SnapshotStore, got ${describeValue(store)}`)
  }
  if (store.capabilities?.conditionalPut !== true || store.capabilities.compareAndSwap !== true) {
    throw new RangeError(`store ${store.url} cannot hold claims: it needs capabilities.conditionalPut and capabilities.compareAndSwap`)
  }
  if (typeof owner !== 'string' || owner === '') throw new TypeError(`owner must be a non-empty string, got ${JSON.stringify(owner)}`)
  if (leaseMs !== null) {
    if (typeof leaseMs !== 'number') throw new TypeError(`leaseMs must be a number or null, got ${typeof leaseMs}`)
    if (!Number.isSafeInteger(leaseMs) || leaseMs < 1) throw new RangeError(`leaseMs (${leaseMs}) must be an integer >= 1`)
  }
  if (takeover !== 'if-expired' && takeover !== 'force') throw new RangeError(`takeover must be 'if-expired' or 'force', got ${JSON.stringify(takeover)}`)
  if (typeof minEpoch !== 'number') throw new TypeError(`minEpoch must be a number, got ${typeof minEpoch}`)
  if (!Number.isSafeInteger(minEpoch) || minEpoch < 0 || minEpoch > MAX_EPOCH) throw new RangeError(`minEpoch (${minEpoch}) must be an integer from 0 to ${MAX_EPOCH}`)
  if (generation !== undefined) {
    if (typeof generation !== 'number') throw new TypeError(`generation must be a number, got ${typeof generation}`)
    if (!Number.isSafeInteger(generation)) throw new RangeError(`generation (${generation}) must be an integer`)
  }
  if (typeof clock !== 'function') throw new TypeError(`clock must be a function returning milliseconds, got ${typeof clock}`)
  if (memberLease !== undefined) {
    if (typeof memberLease?.ensureLive !== 'function') throw new TypeError(`memberLease must be a MemberLease, got ${describeValue(memberLease)}`)
    if (options.leaseMs !== undefined && options.leaseMs !== null) throw new RangeError('leaseMs and memberLease exclude each other: a claim held by a member lease has no lease of its own')
    if (memberLease.store !== store) throw new RangeError(`memberLease lives in ${memberLease.store.url}, not in the claim's store ${store.url}`)
    return { store, job, partition, owner, leaseMs: null, takeover, minEpoch, generation, clock, memberLease }
  }
  return { store, job, partition, owner, leaseMs, takeover, minEpoch, generation, clock, memberLease }
}
