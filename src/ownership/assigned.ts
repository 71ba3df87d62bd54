import { isTidemarkError, TidemarkError } from '../errors.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { SnapshotLayout } from '../snapshot/layout.js'
import type { VerifiedManifests } from '../snapshot/catalog.js'
import { hostname } from 'node:os'
import { acquireClaim, conflict, readClaim, readStoredClaim, writeClaim, type Claim } from './claim.js'

export interface AcquireAssignedOptions {
  store: SnapshotStore
  job: string
  partition: string | number
  /** The partition's manifests as listed before the acquire: the epoch goes above their newest. */
  listed: VerifiedManifests
  /** How long to wait for the previous owner's release before taking the claim by force. */
  waitMs: number
  signal?: AbortSignal
  /**
   * Called once when the claim is held by another owner, whose release this
   * acquirer now waits for: the restore that follows can start downloading
   * its newest snapshot meanwhile.
   */
  onWait?: () => void
  /**
   * Called each time the watched claim object changed (the previous owner
   * released it, or another acquirer took it), just before the attempt to
   * take it: a prefetch can stop now, while that attempt's requests run.
   */
  onChange?: () => void
}

/**
 * While a previous owner holds the claim, its object is looked at (a HEAD)
 * this often for the first CLAIM_WATCH_FAST_MS, then every
 * CLAIM_WATCH_SLOW_MS: a hand-off snapshot takes from a few hundred
 * milliseconds to a few seconds, and the new owner's restore starts when the
 * release is seen. A HEAD costs a GET-class request; the full attempt (HEAD,
 * GET and a conditional PUT) is made only when the object changed.
 */
const CLAIM_WATCH_MS = 25

/**
 * An assigned owner commits only while its last look at its claim that
 * found it unchanged started at most this long ago (ClaimKeeper): a look
 * runs in the background about once a second while it commits, so a busy
 * partition never waits for one.
 */
export const ASSIGNED_LOOK_VALID_MS = 3000

/**
 * A new assignee whose wait for the release ran out marks the claim, then
 * takes it by force this long after: longer than ASSIGNED_LOOK_VALID_MS, so
 * that the previous owner either saw the mark and stopped, or has not
 * committed since a look that started before the mark. The 2 s beyond it
 * cover a look's request and a commit's write.
 */
export const TAKEOVER_GRACE_MS = ASSIGNED_LOOK_VALID_MS + 2000
const CLAIM_WATCH_FAST_MS = 5000
const CLAIM_WATCH_SLOW_MS = 250

/**
 * Takes a partition's claim for an owner that something else assigned the
 * partition to (a consumer group). The assignment decides who may own it,
 * so the claim has no lease and is taken by force in the end; but first the
 * previous owner gets up to `waitMs` to release it, which it does right
 * after its hand-off snapshot, so that this owner restores that snapshot
 * instead of an older one and a replay. The claim's epoch is above every
 * snapshot that verifies, so it fences every writer before it.
 *
 * Fails with TIDEMARK_OWNERSHIP_CONFLICT (reason `superseded`) when,
 * during the wait, the claim passed to another holder than the one waited
 * on: only an owner assigned after this one takes it so (Tidemark claims of
 * a group have no lease). Such an acquirer never forces its way in, also
 * not when it was paused past its deadline. With `signal` aborted (the
 * assignment revoked, the member closing) it fails with reason `cancelled`.
 *
 * Resolves with the claim, how long it waited for a release (0 when it
 * took the claim at its first attempt), and whether `listed` still describes the
 * partition as this owner takes it over (taken at once, not by force, and
 * no hand-off snapshot committed after the listing).
 */
export async function acquireAssigned(options: AcquireAssignedOptions): Promise<{ claim: Claim; listingIsCurrent: boolean; waitedMs: number }> {
  const { store, job, partition, listed } = options
  const started = performance.now()
  const deadline = started + options.waitMs
  const layout = new SnapshotLayout(job, partition)
  // The claim this acquirer waits on: the previous owner's (its owner id
  // and epoch), and the version of it last seen (a takeover mark makes a new
  // one). Only that holder's claim is ever taken by force.
  let waitedOn: string | undefined
  let holder: { id: string; epoch: number } | undefined
  // When the wait runs out, the claim is marked first and taken by force a grace period later.
  let forceAt = deadline
  let marked = false
  for (let attempt = 1; ; attempt++) {
    checkAborted(options.signal, layout)
    let force = performance.now() >= forceAt
    if (force && holder !== undefined && !marked) {
      const mark = await markTakeover(store, job, partition, holder, `${hostname()}:${process.pid}`)
      if (mark === 'other-holder') throw superseded(layout)
      if (typeof mark === 'object') {
        marked = true
        waitedOn = mark.marked
        forceAt = performance.now() + TAKEOVER_GRACE_MS
        force = false
      } else if (mark === 'released') {
        force = false
      }
    }
    // Just before a force: the claim must still be the one waited on. A
    // claim that changed to another holder meanwhile belongs to an owner
    // assigned after this one (this acquirer was paused, or its member
    // missed a generation): this assignment is superseded.
    if (force && waitedOn !== undefined) {
      const now = await store.head(layout.claimKey)
      if (now !== undefined && now.etag !== waitedOn) await checkNotSuperseded(store, layout, waitedOn)
    }
    try {
      const claim = await acquireClaim({ store, job, partition, leaseMs: null, takeover: force ? 'force' : 'if-expired', minEpoch: listed.newestEpoch })
      return { claim, listingIsCurrent: attempt === 1 && !force && claim.listingIsCurrent(listed.refs), waitedMs: attempt === 1 ? 0 : performance.now() - started }
    } catch (err) {
      // Held by the previous owner (not yet released) or lost in a race with
      // it: wait for its release, until the deadline makes it a takeover.
      if (force || !isTidemarkError(err, 'TIDEMARK_OWNERSHIP_CONFLICT')) throw err
      checkAborted(options.signal, layout)
      const seen = typeof err.details.etag === 'string' ? err.details.etag : undefined
      const seenHolder = holderOf(err.details)
      if (waitedOn === undefined) {
        waitedOn = seen
        holder = seenHolder
      } else if (seen !== undefined && seen !== waitedOn) {
        // The same holder's claim marked by another acquirer: still the one waited on.
        if (holder !== undefined && seenHolder?.id === holder.id && seenHolder.epoch === holder.epoch) waitedOn = seen
        // Held by another owner than the one waited on (not released: a
        // released claim is taken without force): a newer assignee's.
        else throw superseded(layout, err)
      }
      if (attempt === 1) options.onWait?.()
      // Watched with HEADs until it changes (released, or taken by another
      // acquirer) or the deadline comes; a conflict without an etag (a lost
      // race) is tried again after one interval.
      do {
        const now = performance.now()
        const interval = now - started < CLAIM_WATCH_FAST_MS ? CLAIM_WATCH_MS : CLAIM_WATCH_SLOW_MS
        await new Promise((resolve) => setTimeout(resolve, Math.max(1, Math.min(interval, forceAt - now))))
      } while (seen !== undefined && performance.now() < forceAt && !aborted(options.signal) && (await store.head(layout.claimKey))?.etag === seen)
      if (seen !== undefined && performance.now() < forceAt && !aborted(options.signal)) options.onChange?.()
    }
  }
}

/** The holder named by a conflict's details (owner id and epoch), if it names one. */
function holderOf(details: Record<string, unknown>): { id: string; epoch: number } | undefined {
  const owner = details.holder as { id?: unknown } | undefined
  return typeof owner?.id === 'string' && typeof details.epoch === 'number' ? { id: owner.id, epoch: details.epoch } : undefined
}

/** Fails when the claim, no longer the one waited on, is held by another owner (it was not released). */
async function checkNotSuperseded(store: SnapshotStore, layout: SnapshotLayout, waitedOn: string): Promise<void> {
  const current = await readClaim(store, layout.job, layout.partition)
  if (current === undefined || current.etag === waitedOn || current.record?.leaseUntil === 0) return
  throw superseded(layout, undefined, current.record?.epoch)
}

function superseded(layout: SnapshotLayout, cause?: unknown, epoch?: number): TidemarkError {
  return new TidemarkError(
    'TIDEMARK_OWNERSHIP_CONFLICT',
    `the claim of partition ${layout.partition} of job ${layout.job} was taken by another owner while this one waited for the previous owner's release: that owner was assigned the partition later, and this assignment is superseded`,
    { ...(cause === undefined ? {} : { cause }), details: { key: layout.claimKey, reason: 'superseded', ...(epoch === undefined ? {} : { epoch }) } },
  )
}

function checkAborted(signal: AbortSignal | undefined, layout: SnapshotLayout): void {
  if (signal?.aborted !== true) return
  throw new TidemarkError(
    'TIDEMARK_OWNERSHIP_CONFLICT',
    `the acquire of partition ${layout.partition} of job ${layout.job} was cancelled: its assignment was revoked, or its member closed`,
    { cause: signal.reason, details: { key: layout.claimKey, reason: 'cancelled' } },
  )
}

function aborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true
}

/**
 * Marks a claim that a consumer group's new assignee waited on in vain:
 * the same record with `takeoverAt` and `takeoverBy`, written as a
 * compare-and-swap against the version read, while `holder` (owner id and
 * epoch) still holds it. Its holder's next look at the claim finds another
 * version and stops (`TIDEMARK_OWNERSHIP_LOST`, reason `takeover-pending`).
 * Resolves with what the claim is now: marked (by this call, or by another
 * acquirer before it; `marked` is that version's etag), released, held by
 * another owner, or gone (removed or unreadable: a forced take decides).
 */
async function markTakeover(store: SnapshotStore, job: string, partition: string | number, holder: { id: string; epoch: number }, by: string): Promise<{ marked: string } | 'released' | 'other-holder' | 'gone'> {
  const layout = new SnapshotLayout(job, partition)
  for (let attempt = 0; attempt < MARK_ATTEMPTS; attempt++) {
    const current = await readStoredClaim(store, layout.job, layout.partition)
    if (current === undefined || current.record === undefined) return 'gone'
    const r = current.record
    if (r.leaseUntil === 0) return 'released'
    if (r.owner.id !== holder.id || r.epoch !== holder.epoch) return 'other-holder'
    if (r.takeoverAt !== undefined) return { marked: current.etag }
    const written = await writeClaim(store, layout.claimKey, { ...r, takeoverAt: Date.now(), takeoverBy: by }, current.etag)
    if ('etag' in written) return { marked: written.etag }
  }
  throw conflict('race', `the claim of partition ${layout.partition} of job ${layout.job} changed under each of ${MARK_ATTEMPTS} attempts to mark it for a takeover`, layout.claimKey, {})
}

/** Attempts of markTakeover() against a claim that keeps changing (other acquirers, its holder's release). */
const MARK_ATTEMPTS = 8
