// Synthetic snapshots for the catalog and GC tests: manifests and data
// objects written straight into a snapshot store, so that a test can make a
// manifest broken, junk or oversized without a LevelDB store behind it.
import { randomBytes } from 'node:crypto'
import type { SnapshotStore } from '../../src/snapshot-store/snapshot-store.js'
import { SnapshotLayout, snapshotId } from '../../src/snapshot/layout.js'
import { encodeManifest, type SnapshotManifest } from '../../src/snapshot/manifest.js'

export const layout = new SnapshotLayout('job', 0)

/** One data object of `size` bytes at (epoch, sequence); returns its key relative to the partition. */
export async function putObject(store: SnapshotStore, epoch: number, sequence: number, size = 2048): Promise<string> {
  const key = layout.relativeDataKey(snapshotId(epoch, sequence), randomBytes(4).toString('hex'), 0)
  await store.put(layout.dataKey(key), Buffer.alloc(size, sequence % 256))
  return key
}

/** A manifest at (epoch, sequence) whose files lie in `objects` (each at least 2048 bytes); nothing is written. */
export function manifestOf(epoch: number, sequence: number, objects: Array<{ key: string; size: number }>): SnapshotManifest {
  const files = objects.flatMap((o, i) => [
    { name: i === 0 ? 'CURRENT' : `${String(i).padStart(6, '0')}.ldb`, size: 16, sha256: 'a'.repeat(64), object: o.key, offset: 512 },
    ...(i === 0 ? [{ name: 'MANIFEST-000001', size: 16, sha256: 'b'.repeat(64), object: o.key, offset: 1536 }] : []),
  ])
  return {
    format: 'tidemark-snapshot',
    version: 1,
    id: snapshotId(epoch, sequence),
    job: layout.job,
    partition: layout.partition,
    epoch,
    sequence,
    createdAt: new Date(0).toISOString(),
    parent: null,
    base: snapshotId(epoch, sequence),
    full: true,
    positions: [],
    stateBytes: files.reduce((sum, f) => sum + f.size, 0),
    objects,
    files,
  }
}

/**
 * A snapshot at (epoch, sequence): a new object of its own plus `reuse`
 * (objects of older snapshots), then its manifest. Returns the manifest.
 */
export async function putSnapshot(store: SnapshotStore, epoch: number, sequence: number, reuse: Array<{ key: string; size: number }> = []): Promise<SnapshotManifest> {
  const own = { key: await putObject(store, epoch, sequence), size: 2048 }
  const manifest = manifestOf(epoch, sequence, [own, ...reuse])
  await store.put(layout.manifestKey(epoch, sequence), encodeManifest(manifest))
  return manifest
}

/** Every key under the partition's data folder, sorted. */
export async function dataKeys(store: SnapshotStore): Promise<string[]> {
  const keys: string[] = []
  for await (const info of store.list(layout.dataPrefix)) keys.push(info.key)
  return keys.sort()
}

/** Every key under the partition's manifest folder, sorted. */
export async function manifestKeys(store: SnapshotStore): Promise<string[]> {
  const keys: string[] = []
  for await (const info of store.list(layout.manifestPrefix)) keys.push(info.key)
  return keys.sort()
}
