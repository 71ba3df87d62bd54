import type { Readable } from 'node:stream'
import { isTidemarkError } from '../errors.js'
import type { ObjectInfo, SnapshotStore } from '../dfs/snapshot-store.js'
import { corrupt } from './archive.js'
import type { SnapshotLayout } from './layout.js'
import { parseManifest, type SnapshotManifest } from './manifest.js'

/** A manifest as listed, before it is read. */
export interface ManifestRef {
  key: string
  id: string
  epoch: number
  sequence: number
  size: number
  lastModified: Date
}

/** Manifests are small; anything far larger is not one of ours. */
const MAX_MANIFEST_BYTES = 64 * 1024 * 1024

/** The partition's manifests, newest (highest epoch, then sequence) first. */
export async function listManifests(store: SnapshotStore, layout: SnapshotLayout): Promise<ManifestRef[]> {
  const refs: ManifestRef[] = []
  for await (const info of store.list(layout.manifestPrefix)) {
    const parsed = layout.parseManifestKey(info.key)
    if (parsed !== undefined) refs.push({ key: info.key, ...parsed, size: info.size, lastModified: info.lastModified })
  }
  return refs.sort(newestFirst)
}

export function newestFirst(a: { epoch: number; sequence: number }, b: { epoch: number; sequence: number }): number {
  return b.epoch - a.epoch || b.sequence - a.sequence
}

export async function listObjects(store: SnapshotStore, prefix: string): Promise<ObjectInfo[]> {
  const out: ObjectInfo[] = []
  for await (const info of store.list(prefix)) out.push(info)
  return out
}

/**
 * Reads and validates one manifest. A manifest that is missing, too large or
 * does not parse is TIDEMARK_SNAPSHOT_CORRUPT (reason manifest-unreadable);
 * errors of the store itself (unavailable, access denied) pass through, since
 * they say nothing about the snapshot.
 */
export async function readManifest(store: SnapshotStore, layout: SnapshotLayout, ref: ManifestRef): Promise<SnapshotManifest> {
  let bytes: Buffer
  try {
    bytes = await readAll(await store.get(ref.key), MAX_MANIFEST_BYTES)
  } catch (err) {
    if (isTidemarkError(err, 'TIDEMARK_DFS_NOT_FOUND')) throw corrupt('manifest-unreadable', `manifest ${ref.key} disappeared`, { manifest: ref.key }, err)
    if (err instanceof RangeError) throw corrupt('manifest-unreadable', `manifest ${ref.key}: ${err.message}`, { manifest: ref.key }, err)
    throw err
  }
  try {
    return parseManifest(bytes, { job: layout.job, partition: layout.partition, epoch: ref.epoch, sequence: ref.sequence })
  } catch (err) {
    throw corrupt('manifest-unreadable', `manifest ${ref.key} is not a valid snapshot manifest: ${(err as Error).message}`, { manifest: ref.key }, err)
  }
}

export async function readAll(stream: Readable, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = []
  let size = 0
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      size += chunk.byteLength
      if (size > limit) throw new RangeError(`object is larger than ${limit} bytes`)
      chunks.push(chunk)
    }
  } finally {
    stream.destroy()
  }
  return Buffer.concat(chunks)
}
