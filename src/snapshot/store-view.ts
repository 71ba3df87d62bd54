import { TidemarkError } from '../errors.js'
import { MAX_SEQUENCE, type SnapshotLayout } from './layout.js'
import type { ManifestRef } from './catalog.js'
import type { SnapshotManifest } from './manifest.js'
import type { ObjectInfo } from '../snapshot-store/snapshot-store.js'
import type { SnapshotterEvent } from './snapshotter-types.js'

/**
 * What a snapshotter knows of the snapshot store between full listings.
 * Manifests are immutable and data objects are never overwritten, so what
 * it saw stays true until someone deletes it; who may add a manifest that
 * matters (a newer owner) is what the ownership check is for.
 */
export interface StoreView {
  /** Manifests that verify (parse and match their key), newest first. */
  valid: Array<{ ref: ManifestRef; manifest: SnapshotManifest }>
  /** Every listed manifest key, junk included: numbering passes over them. */
  taken: Set<string>
  /** Data objects (relative keys) known to be there, with their size: the last data listing, plus this snapshotter's uploads since. */
  objects: Map<string, number>
  /** Manifests whose objects were compared with that listing, or written here: an object of theirs that `objects` lacks is missing. */
  complete: Set<string>
}

/**
 * One more than the highest sequence of a manifest that verifies, then the
 * first whose key is not taken: a listed key is never trusted for
 * numbering (junk at the maximum would exhaust it) but never overwritten
 * either (junk at the next key would fence this writer).
 */
export function nextSequence(layout: SnapshotLayout, epoch: number, valid: readonly ManifestRef[], taken: ReadonlySet<string>): number {
  const highest = valid.reduce((max, r) => Math.max(max, r.sequence), -1)
  let sequence = highest + 1
  while (sequence <= MAX_SEQUENCE && taken.has(layout.manifestKey(epoch, sequence))) sequence++
  if (sequence > MAX_SEQUENCE) {
    throw new TidemarkError(
      'TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED',
      `no snapshot sequence of ${layout.prefix} is left: a manifest that verifies has sequence ${highest} and the maximum is ${MAX_SEQUENCE}; move the partition's snapshots aside`,
      { details: { job: layout.job, partition: layout.partition, sequence: highest } },
    )
  }
  return sequence
}

/** Fails with TIDEMARK_SNAPSHOT_FENCED when a manifest of a newer epoch (a new owner) is among refs. */
export function checkFence(refs: readonly ManifestRef[], epoch: number): void {
  const newer = refs.find((r) => r.epoch > epoch)
  if (newer !== undefined) {
    throw new TidemarkError(
      'TIDEMARK_SNAPSHOT_FENCED',
      `snapshot ${newer.key} has epoch ${newer.epoch}, newer than this writer's ${epoch}: the partition has a new owner`,
      { details: { key: newer.key, epoch: epoch, newerEpoch: newer.epoch } },
    )
  }
}

/**
 * Objects of the parent that exist with their recorded size; a file in any
 * other one is uploaded again. Known from the view; an object the view has
 * not seen listed (a manifest another writer added since) costs a HEAD
 * (`head`, by relative key, in order).
 */
export async function availableObjects(
  parent: SnapshotManifest | undefined,
  view: StoreView,
  layout: SnapshotLayout,
  head: (keys: string[]) => Promise<Array<ObjectInfo | undefined>>,
  emit: (event: SnapshotterEvent) => void,
): Promise<Map<string, number>> {
  const available = new Map<string, number>()
  if (parent === undefined) return available
  const complete = view.complete.has(layout.manifestKey(parent.epoch, parent.sequence))
  const unknown = parent.objects.filter((o) => !view.objects.has(o.key) && !complete)
  const infos = await head(unknown.map((o) => o.key))
  unknown.forEach((o, i) => {
    const info = infos[i]
    if (info !== undefined) view.objects.set(o.key, info.size)
  })
  const missing: string[] = []
  for (const o of parent.objects) {
    if (view.objects.get(o.key) === o.size) available.set(o.key, o.size)
    else missing.push(o.key)
  }
  if (missing.length > 0) emit({ type: 'objects-unavailable', objects: missing.map((k) => layout.dataKey(k)), reason: 'missing or of another size than their manifest says; their files are uploaded again' })
  return available
}
