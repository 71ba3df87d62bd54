import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'

/**
 * Checked once, where each runtime validates its options: the partition's
 * claim lives in the snapshot store, and a store that cannot write
 * conditionally cannot hold it. Such a store is refused rather than run
 * without a claim: two owners of one partition would then both commit
 * snapshots, and only epoch order (not a claim) would tell them apart.
 */
export function checkClaimStore(store: SnapshotStore, field: string): void {
  if (store.capabilities?.conditionalPut !== true || store.capabilities.compareAndSwap !== true) {
    throw new RangeError(`${field} (${store.url}) cannot hold the partition's claim: it needs capabilities.conditionalPut and capabilities.compareAndSwap (conditional puts; a server that ignores them is opened with conditionalPut: false)`)
  }
}
