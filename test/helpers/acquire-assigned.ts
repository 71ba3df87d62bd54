import type { SnapshotStore } from '../../src/snapshot-store/snapshot-store.js'
import { acquireAssigned } from '../../src/ownership/assigned.js'
import type { Claim } from '../../src/ownership/claim.js'
import { listVerifiedManifests, type VerifiedManifests } from '../../src/snapshot/catalog.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'

/** A consumer-group assignee's acquire as the lifecycle makes it: list, then take the claim (waiting up to waitMs for a release). */
export async function acquireAsAssignee(options: { store: SnapshotStore; job: string; partition: string; waitMs: number; onWait?: () => void; onChange?: () => void }): Promise<{ claim: Claim; known: VerifiedManifests | undefined }> {
  const listed = await listVerifiedManifests(options.store, new SnapshotLayout(options.job, options.partition))
  const { claim, listingIsCurrent } = await acquireAssigned({ ...options, listed })
  return { claim, known: listingIsCurrent ? listed : undefined }
}
