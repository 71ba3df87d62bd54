import { isTidemarkError, TidemarkError } from '../errors.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { SnapshotLayout } from '../snapshot/layout.js'
import type { VerifiedManifests } from '../snapshot/catalog.js'
import { acquireClaim, readClaim, type Claim } from './claim.js'

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
  // The claim this acquirer waits on: the previous owner's, as it was when
  // the wait began. Only that claim is ever taken by force.
  let waitedOn: string | undefined
  for (let attempt = 1; ; attempt++) {
    checkAborted(options.signal, layout)
    const force = performance.now() >= deadline
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
      if (waitedOn === undefined) waitedOn = seen
      // Held by another owner than the one waited on (not released: a
      // released claim is taken without force): a newer assignee's.
      else if (seen !== undefined && seen !== waitedOn) throw superseded(layout, err)
      if (attempt === 1) options.onWait?.()
      // Watched with HEADs until it changes (released, or taken by another
      // acquirer) or the deadline comes; a conflict without an etag (a lost
      // race) is tried again after one interval.
      do {
        const now = performance.now()
        const interval = now - started < CLAIM_WATCH_FAST_MS ? CLAIM_WATCH_MS : CLAIM_WATCH_SLOW_MS
        await new Promise((resolve) => setTimeout(resolve, Math.max(1, Math.min(interval, deadline - now))))
      } while (seen !== undefined && performance.now() < deadline && !aborted(options.signal) && (await store.head(layout.claimKey))?.etag === seen)
      if (seen !== undefined && performance.now() < deadline && !aborted(options.signal)) options.onChange?.()
    }
  }
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
