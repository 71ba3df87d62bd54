/**
 * The target partition's claim, held by a transform from before it reads
 * the source until its snapshot is committed. Its epoch is above every
 * snapshot of the target, so the transform's snapshot is the newest; taken
 * by force, it fences a running owner, whose next claim check, renewal or
 * snapshot fails with TIDEMARK_OWNERSHIP_LOST (docs/ownership.md).
 */
import { TidemarkError, isTidemarkError } from '../errors.js'
import { acquireClaim, type Claim } from '../ownership/index.js'
import { listVerifiedManifests, type SnapshotLayout } from '../snapshot/index.js'
import type { SnapshotStore } from '../snapshot-store/index.js'

export class TargetClaim {
  readonly claim: Claim
  #timer: NodeJS.Timeout | undefined
  /** A renewal found the claim taken: the transform must not commit its snapshot. */
  #lost: TidemarkError | undefined

  private constructor(claim: Claim) {
    this.claim = claim
    const every = claim.renewIntervalMs
    if (every !== undefined) {
      this.#timer = setInterval(() => void this.#renew(), every)
      // A transform ends by its own work, never kept alive by its lease.
      this.#timer.unref()
    }
  }

  /**
   * Takes the claim: by force when `replace` (a running owner is fenced),
   * else only when no live owner holds it, and then the target must hold no
   * snapshot (TIDEMARK_TRANSFORM_TARGET_NOT_EMPTY, the claim released again).
   */
  static async take(store: SnapshotStore, layout: SnapshotLayout, options: { replace: boolean; owner: string; sourceNote: string }): Promise<TargetClaim> {
    const listed = await listVerifiedManifests(store, layout)
    const claim = await acquireClaim({
      store, job: layout.job, partition: layout.partition, owner: options.owner,
      takeover: options.replace ? 'force' : 'if-expired', minEpoch: listed.newestEpoch,
    })
    if (!options.replace) {
      // Listed again under the claim: an owner that wrote a snapshot between
      // the first listing and the claim is seen now.
      const now = listed.refs.length > 0 ? listed : await listVerifiedManifests(store, layout)
      if (now.refs.length > 0) {
        await claim.release().catch(() => false)
        throw new TidemarkError(
          'TIDEMARK_TRANSFORM_TARGET_NOT_EMPTY',
          `${layout.prefix} in ${store.url} already holds ${now.refs.length} snapshot(s) (newest ${now.refs[0]!.id}); ${options.sourceNote} writes only into a partition without snapshots unless told to replace its state (to.replace: true, --replace), which fences its running owner`,
          { details: { job: layout.job, partition: layout.partition, snapshots: now.refs.length, newest: now.refs[0]!.id } },
        )
      }
    }
    return new TargetClaim(claim)
  }

  async #renew(): Promise<void> {
    if (this.claim.state !== 'held') return
    try {
      await this.claim.renew()
    } catch (error) {
      if (isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST')) this.#lost = error
      // Another failure: the next tick tries again, and the check before the snapshot decides.
    }
  }

  /** Right before the snapshot's manifest is written (the Snapshotter's beforeCommit). */
  async check(): Promise<void> {
    if (this.#lost !== undefined) throw this.#lost
    await this.claim.check()
  }

  /** Stops renewing and releases the claim, recording the transform's snapshot for the next owner; a lost claim is left as it is. */
  async release(lastSnapshot: string | undefined): Promise<void> {
    if (this.#timer !== undefined) clearInterval(this.#timer)
    this.#timer = undefined
    await this.claim.release(lastSnapshot === undefined ? {} : { lastSnapshot })
  }
}
