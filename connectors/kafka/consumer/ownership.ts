import { isTidemarkError, TidemarkError } from '../../../src/errors.js'
import type { SnapshotStore } from '../../../src/dfs/snapshot-store.js'
import { acquireClaim, type Claim } from '../../../src/ownership/claim.js'
import { listManifests, readValidManifests, type ManifestRef, type ValidManifests } from '../../../src/snapshot/catalog.js'
import { MAX_EPOCH, SnapshotLayout } from '../../../src/snapshot/layout.js'

/** What a partition task holds while it owns a partition. */
export interface PartitionOwnership {
  /** The fencing token its snapshots are written with. */
  readonly epoch: number
  /** True when a claim object backs it (the snapshot store can write conditionally). */
  readonly claimed: boolean
  /** Fails with TIDEMARK_OWNERSHIP_LOST when another owner took the partition. */
  check(): Promise<void>
  /** Lets the next owner in at once; call after the store is closed, with the key of the last snapshot committed. */
  release(lastSnapshot?: string): Promise<void>
  /**
   * The manifests listed and read to choose the epoch, for the restore and
   * the first snapshot (their `knownManifests`), so that a start lists once.
   * Absent when the claim was taken only after waiting for the previous
   * owner, or by force: its hand-off snapshot may have come after that
   * listing.
   */
  readonly known?: { refs: ManifestRef[]; valid: ValidManifests['valid'] }
}

export interface AcquireOwnershipOptions {
  store: SnapshotStore | undefined
  job: string
  partition: string
  /** How long to wait for the previous owner's release before taking the claim by force. */
  waitMs: number
  signal?: AbortSignal
  /**
   * Called once when the claim is held by another owner, whose release this
   * acquirer now waits for, with the listing made before: the restore that
   * follows can start downloading its newest snapshot meanwhile.
   */
  onWait?: (known: NonNullable<PartitionOwnership['known']>) => void
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
 * Takes a partition's claim (src/ownership) for a consumer-group assignee.
 * Inside a group the assignment decides who may own a partition, so the
 * claim has no lease and is taken by force in the end; but first the
 * previous owner gets up to `waitMs` to release it, which it does right
 * after its hand-off snapshot, so that this owner restores that snapshot
 * instead of an older one and a replay. The claim's epoch is above every
 * snapshot that verifies, so it fences every writer before it.
 *
 * A snapshot store that cannot write conditionally cannot hold claims; the
 * epoch is then one above the newest snapshot's (as PartitionProcessor
 * does), which fences owners that started before this one only.
 */
export async function acquireOwnership(options: AcquireOwnershipOptions): Promise<PartitionOwnership> {
  const { store, job, partition } = options
  if (store === undefined) return unclaimed(0)
  const { newest, known } = await newestEpoch(store, job, partition)
  if (store.capabilities?.conditionalPut !== true || store.capabilities.compareAndSwap !== true) return { ...unclaimed(newest === undefined ? 0 : newest + 1), known }
  const started = performance.now()
  const deadline = started + options.waitMs
  const layout = new SnapshotLayout(job, partition)
  for (let attempt = 1; ; attempt++) {
    const force = performance.now() >= deadline
    try {
      const claim = await acquireClaim({ store, job, partition, leaseMs: null, takeover: force ? 'force' : 'if-expired', minEpoch: newest ?? 0 })
      // Taken at once and not by force: no owner held it then, so the
      // listing is the partition as this owner takes it over, unless the
      // previous owner released it after the listing with a snapshot the
      // listing lacks (its hand-off): then the restore lists again.
      return attempt === 1 && !force && claim.listingIsCurrent(known.refs) ? { ...claimed(claim), known } : claimed(claim)
    } catch (err) {
      // Held by the previous owner (not yet released) or lost in a race with
      // it: wait for its release, until the deadline makes it a takeover.
      if (force || !isTidemarkError(err, 'TIDEMARK_OWNERSHIP_CONFLICT') || aborted(options.signal)) throw err
      if (attempt === 1) options.onWait?.(known)
      const seen = typeof err.details.etag === 'string' ? err.details.etag : undefined
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

function aborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true
}

async function newestEpoch(store: SnapshotStore, job: string, partition: string): Promise<{ newest: number | undefined; known: NonNullable<PartitionOwnership['known']> }> {
  const layout = new SnapshotLayout(job, partition)
  const refs = await listManifests(store, layout)
  const { valid } = await readValidManifests(store, layout, refs)
  const newest = valid[0]?.ref
  if (newest !== undefined && newest.epoch >= MAX_EPOCH) {
    throw new TidemarkError(
      'TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED',
      `snapshot ${newest.key} has epoch ${newest.epoch}, the largest there is: no new owner of ${layout.prefix} can take an epoch above it; move the partition's snapshots aside`,
      { details: { job, partition, key: newest.key, epoch: newest.epoch } },
    )
  }
  return { newest: newest?.epoch, known: { refs, valid } }
}

function unclaimed(epoch: number): PartitionOwnership {
  return { epoch, claimed: false, check: async () => undefined, release: async () => undefined }
}

function claimed(claim: Claim): PartitionOwnership {
  return {
    epoch: claim.epoch,
    claimed: true,
    check: () => claim.check(),
    release: async (lastSnapshot?: string) => {
      await claim.release(lastSnapshot === undefined ? {} : { lastSnapshot })
    },
  }
}
