import { isTidemarkError } from '../errors.js'
import type { SnapshotStore } from '../dfs/snapshot-store.js'
import { listManifests, listObjects, readManifest, type ManifestRef } from './catalog.js'
import type { SnapshotLayout } from './layout.js'
import type { SnapshotManifest } from './manifest.js'

export interface GcResult {
  /** Ids of the snapshots kept, newest first. */
  retained: string[]
  deletedManifests: string[]
  deletedObjects: string[]
  /** Unreferenced data objects kept because they are younger than the grace period (an upload may be writing them). */
  youngObjects: number
  /** Set when no data object was deleted because a kept manifest could not be read (its references are unknown). */
  objectsSkipped?: string
}

export interface GcOptions {
  retain: number
  graceMs: number
  now: number
  /** Relative data keys that must survive whatever their age (uploads of this process in flight). */
  protect: ReadonlySet<string>
  /** Parsed manifests by key; manifests are immutable, so a cache never goes stale. */
  cache: Map<string, SnapshotManifest>
}

/**
 * Retention and garbage collection in one pass. Keeps the newest `retain`
 * manifests that parse (and any manifest newer than the oldest of them, even
 * one that does not parse), deletes older manifests, then deletes every data
 * object that no kept manifest references and that is older than the grace
 * period. The last rule also sweeps what a crashed upload left behind: its
 * data objects are referenced by no manifest.
 *
 * Safe against concurrent snapshots of the same partition: an object being
 * uploaded is younger than the grace period, and a new manifest only
 * references objects of manifests that are kept (the newest ones).
 */
export async function collectGarbage(store: SnapshotStore, layout: SnapshotLayout, options: GcOptions): Promise<GcResult> {
  const refs = await listManifests(store, layout)
  const kept: Array<{ ref: ManifestRef; manifest: SnapshotManifest | undefined; problem?: string }> = []
  const doomed: ManifestRef[] = []
  let valid = 0
  for (const ref of refs) {
    if (valid >= options.retain) {
      doomed.push(ref)
      continue
    }
    try {
      const manifest = options.cache.get(ref.key) ?? (await readManifest(store, layout, ref))
      options.cache.set(ref.key, manifest)
      kept.push({ ref, manifest })
      valid++
    } catch (err) {
      if (!isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT')) throw err
      kept.push({ ref, manifest: undefined, problem: (err as Error).message })
    }
  }
  // Unreadable manifests older than every kept valid one protect nothing.
  while (kept.length > 0 && kept[kept.length - 1]!.manifest === undefined && valid > 0) doomed.unshift(kept.pop()!.ref)

  const deletedManifests = doomed.map((r) => r.key)
  if (deletedManifests.length > 0) await store.deleteMany(deletedManifests)
  for (const key of deletedManifests) options.cache.delete(key)

  const result: GcResult = {
    retained: kept.filter((k) => k.manifest !== undefined).map((k) => k.ref.id),
    deletedManifests,
    deletedObjects: [],
    youngObjects: 0,
  }
  const unknown = kept.find((k) => k.manifest === undefined)
  if (unknown !== undefined) {
    result.objectsSkipped = `manifest ${unknown.ref.key} cannot be read, so the objects it references are unknown: ${unknown.problem}`
    return result
  }

  const referenced = new Set<string>()
  for (const k of kept) for (const o of k.manifest!.objects) referenced.add(layout.dataKey(o.key))
  for (const key of options.protect) referenced.add(layout.dataKey(key))
  const doomedObjects: string[] = []
  for (const info of await listObjects(store, layout.dataPrefix)) {
    if (referenced.has(info.key)) continue
    if (options.now - info.lastModified.getTime() < options.graceMs) {
      result.youngObjects++
      continue
    }
    doomedObjects.push(info.key)
  }
  if (doomedObjects.length > 0) await store.deleteMany(doomedObjects)
  result.deletedObjects = doomedObjects
  return result
}
