import { TidemarkError } from '../errors.js'
import { archiveSize, type PackedEntry } from './archive.js'
import type { Checkpoint, CheckpointFile } from './checkpoint.js'
import { MANIFEST_FORMAT, MANIFEST_VERSION, type SnapshotFile, type SnapshotManifest, type SnapshotObject } from './manifest.js'
import type { SnapshotFileResult } from './snapshotter-types.js'
import type { SnapshotLayout } from './layout.js'

export function uploadFailed(what: string, layout: SnapshotLayout, err: unknown): unknown {
  if (err instanceof TidemarkError && err.code.startsWith('TIDEMARK_SNAPSHOT_')) return err
  if (err instanceof TypeError) return err
  const retriable = err instanceof TidemarkError ? err.retriable : true
  return new TidemarkError(
    'TIDEMARK_SNAPSHOT_UPLOAD_FAILED',
    `snapshot of ${layout.prefix} failed: could not ${what}: ${(err as Error)?.message ?? String(err)}; the previous snapshot stays the latest`,
    { cause: err, retriable, details: { job: layout.job, partition: layout.partition } },
  )
}

/** Consecutive files in groups whose archives stay under maxBytes (a larger file gets a group of its own). */
export function groupBySize(files: readonly CheckpointFile[], maxBytes: number): CheckpointFile[][] {
  const groups: CheckpointFile[][] = []
  let current: CheckpointFile[] = []
  let size = archiveSize([])
  for (const file of files) {
    const add = archiveSize([file]) - archiveSize([])
    if (current.length > 0 && size + add > maxBytes) {
      groups.push(current)
      current = []
      size = archiveSize([])
    }
    current.push(file)
    size += add
  }
  if (current.length > 0) groups.push(current)
  return groups
}

/** The new snapshot's manifest, and its files as takeSnapshot() reports them, from what was reused and what was uploaded. */
export function describeSnapshot(s: {
  layout: SnapshotLayout
  id: string
  epoch: number
  sequence: number
  parent: SnapshotManifest | undefined
  checkpoint: Checkpoint
  stateBytes: number
  /** Files the parent holds, by name. */
  reuse: ReadonlyMap<string, SnapshotFile>
  uploaded: ReadonlyMap<string, PackedEntry & { object: string }>
  newObjects: readonly SnapshotObject[]
  /** The parent's objects that exist, with their size. */
  available: ReadonlyMap<string, number>
}): { files: SnapshotFileResult[]; manifest: SnapshotManifest } {
  const { layout, id, epoch, sequence, parent, checkpoint, stateBytes, reuse, uploaded, newObjects, available } = s
  const files: SnapshotFileResult[] = checkpoint.files.map((file) => {
    const old = reuse.get(file.name)
    if (old !== undefined) return { ...old, uploaded: false }
    const entry = uploaded.get(file.name)!
    return { name: file.name, size: file.size, sha256: entry.sha256, object: entry.object, offset: entry.offset, uploaded: true }
  })
  const objectSizes = new Map<string, number>(newObjects.map((o) => [o.key, o.size]))
  for (const f of reuse.values()) objectSizes.set(f.object, available.get(f.object)!)
  const manifest: SnapshotManifest = {
    format: MANIFEST_FORMAT,
    version: MANIFEST_VERSION,
    id,
    job: layout.job,
    partition: layout.partition,
    epoch,
    sequence,
    createdAt: new Date().toISOString(),
    parent: parent?.id ?? null,
    base: reuse.size === 0 ? id : parent!.base,
    full: reuse.size === 0,
    positions: checkpoint.positions,
    states: checkpoint.states,
    ...(checkpoint.lineage === undefined ? {} : { lineage: checkpoint.lineage }),
    stateBytes,
    objects: [...objectSizes].map(([key, size]) => ({ key, size })).sort((a, b) => (a.key < b.key ? -1 : 1)),
    files: files.map(({ uploaded: _u, ...f }) => f),
  }
  return { files, manifest }
}
