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
  /** Lets the next owner in at once; call after the store is closed. */
  release(): Promise<void>
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
}

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
  const deadline = performance.now() + options.waitMs
  let delay = 25
  for (let attempt = 1; ; attempt++) {
    const force = performance.now() >= deadline
    try {
      const claim = await acquireClaim({ store, job, partition, leaseMs: null, takeover: force ? 'force' : 'if-expired', minEpoch: newest ?? 0 })
      // Taken at once and not by force: no owner held it then, so the
      // listing is the partition as this owner takes it over (but for a
      // release within the listing, which costs an older restore, not a wrong one).
      return attempt === 1 && !force ? { ...claimed(claim), known } : claimed(claim)
    } catch (err) {
      // Held by the previous owner (not yet released) or lost in a race with
      // it: wait for its release, until the deadline makes it a takeover.
      if (force || !isTidemarkError(err, 'TIDEMARK_OWNERSHIP_CONFLICT') || options.signal?.aborted === true) throw err
      await new Promise((resolve) => setTimeout(resolve, Math.max(1, Math.min(delay, deadline - performance.now()))))
      delay = Math.min(delay * 2, 250)
    }
  }
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
    release: async () => {
      await claim.release()
    },
  }
}
