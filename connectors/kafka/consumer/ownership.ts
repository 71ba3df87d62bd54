import { TidemarkError } from '../../../src/errors.js'
import type { SnapshotStore } from '../../../src/dfs/snapshot-store.js'
import { listManifests, readValidManifests } from '../../../src/snapshot/catalog.js'
import { MAX_EPOCH, SnapshotLayout } from '../../../src/snapshot/layout.js'

/**
 * What a partition task holds while it owns a partition. The seam where the
 * ownership claims of src/ownership/ plug in (acquire with force on
 * assignment, since inside a group the group's assignment decides who may
 * claim; the claim's epoch as the snapshotter's epoch; check() before a
 * manifest commit; release() after the hand-off). Until they land, the
 * epoch is the one PartitionProcessor takes: one above every snapshot that
 * verifies, which fences the snapshots of a previous owner that started
 * before this one, but not one that starts at the same moment.
 */
export interface PartitionOwnership {
  readonly epoch: number
  release(): Promise<void>
}

export async function acquireOwnership(store: SnapshotStore | undefined, job: string, partitionKey: string): Promise<PartitionOwnership> {
  if (store === undefined) return { epoch: 0, release: async () => undefined }
  const layout = new SnapshotLayout(job, partitionKey)
  const { valid } = await readValidManifests(store, layout, await listManifests(store, layout))
  const newest = valid[0]?.ref
  if (newest !== undefined && newest.epoch >= MAX_EPOCH) {
    throw new TidemarkError(
      'TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED',
      `snapshot ${newest.key} has epoch ${newest.epoch}, the largest there is: no new owner of ${layout.prefix} can take an epoch above it; move the partition's snapshots aside`,
      { details: { job, partition: partitionKey, key: newest.key, epoch: newest.epoch } },
    )
  }
  return { epoch: newest === undefined ? 0 : newest.epoch + 1, release: async () => undefined }
}
