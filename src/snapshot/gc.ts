import type { ObjectInfo, SnapshotStore } from '../snapshot-store/snapshot-store.js'
import type { CorruptReason } from './archive.js'
import { listManifests, listObjects, newestFirst, readTrusted, type ManifestRef } from './catalog.js'
import type { SnapshotLayout } from './layout.js'
import type { SnapshotManifest } from './manifest.js'

export interface GcResult {
  /** Ids of the kept snapshots that verify (their manifest parses and every object exists with its size), newest first: the ones `retain` counts. */
  retained: string[]
  /** Kept manifests that do not verify, newest first: they do not count towards `retain`, and their objects (where known) stay. */
  unverified: UnverifiedSnapshot[]
  deletedManifests: string[]
  deletedObjects: string[]
  /** Unreferenced data objects kept because they are younger than the grace period (an upload may be writing them). */
  youngObjects: number
  /** Unreferenced data objects kept because their snapshot id is newer than the newest manifest: an upload that has not committed yet (or crashed). */
  pendingObjects: number
  /** Temporary files of killed uploads that the store removed (stores that have them: the file-system store). */
  temporaryFilesRemoved: number
  /** Set when no data object was deleted because a kept manifest was written by a newer Tidemark (its references are unknown). */
  objectsSkipped?: string
}

export interface UnverifiedSnapshot {
  id: string
  key: string
  /** manifest-unreadable, object-missing, object-truncated (shorter than recorded) or archive-corrupt (longer). */
  reason: CorruptReason
  message: string
}

export interface GcOptions {
  retain: number
  graceMs: number
  now: number
  /** Relative data keys that must survive whatever their age (uploads of this process in flight). */
  protect: ReadonlySet<string>
  /** Parsed manifests by key; manifests are immutable, so a cache never goes stale. */
  cache: Map<string, SnapshotManifest>
  /**
   * Called with what the run listed, as it is after its deletions: a
   * snapshotter takes it as its view of the store, so that the GC's listing
   * is also the snapshotter's periodic full listing (no second LIST).
   */
  observe?: (listing: GcListing) => void
}

/** What a GC run saw, minus what it deleted. */
export interface GcListing {
  /** Every manifest key still listed, newest first. */
  refs: ManifestRef[]
  /** The kept manifests that parse (not necessarily verified), newest first. */
  parsed: Array<{ ref: ManifestRef; manifest: SnapshotManifest }>
  /** Data objects still there: full key -> size. */
  objects: Map<string, number>
}

/**
 * How often a Snapshotter collects garbage after its snapshots: after the
 * first snapshot of each Snapshotter, then once `gcEverySnapshots` snapshots
 * or `gcIntervalMs` have passed since the last run, whichever comes first.
 * A run costs two LISTs (manifests, data) and a batched DELETE when there is
 * something to delete; objects younger than `graceMs` (1 hour by default)
 * cannot go anyway, so running more often than that gains little.
 */
export const GC_CADENCE_DEFAULTS = Object.freeze({
  gcEverySnapshots: 10,
  gcIntervalMs: 60 * 60 * 1000,
})

interface Kept {
  ref: ManifestRef
  /** Undefined when the manifest cannot be read. */
  manifest: SnapshotManifest | undefined
  problem?: { reason: CorruptReason; message: string }
  /** The format version of a manifest that a newer Tidemark wrote: it may reference any object. */
  newerVersion?: number
}

/**
 * Retention and garbage collection in one pass.
 *
 * Manifests: walking from the newest, keeps manifests until `retain` of them
 * verify (parse, and every object they name exists with its recorded size),
 * so a broken newest manifest never pushes the last restorable snapshot out;
 * the ones that do not verify are kept too but do not count. Older manifests
 * are deleted, and so are unreadable ones older than every kept one that
 * verifies.
 *
 * Objects: deletes every data object that no kept manifest references, unless
 * it is younger than the grace period, or protected, or its key's snapshot id
 * is newer than the newest manifest that parses (an upload that has not
 * committed its manifest yet: GC cannot tell it from a crashed one, and
 * sweeps it once a newer manifest exists). The last rules also sweep what a
 * crashed upload left behind.
 *
 * A manifest that cannot be read is junk (not JSON, not a manifest, of
 * another key, too large: nothing can restore it, whatever its name says):
 * it is kept and reported but trusted with nothing, neither retention nor
 * references. Only a manifest of a newer format version may reference
 * objects this GC cannot see; while one is kept, no object is deleted.
 *
 * Safe against concurrent snapshots of the same partition: an upload's own
 * objects are newer than every manifest until it commits, and a new manifest
 * only references objects of the newest `retain` manifests that parse, all of
 * which GC keeps. The data listing is taken after the manifest listing, so a
 * listed manifest's objects are listed too unless they are really gone.
 */
export async function collectGarbage(store: SnapshotStore, layout: SnapshotLayout, options: GcOptions): Promise<GcResult> {
  if (!Number.isSafeInteger(options.retain) || options.retain < 1) throw new RangeError(`retain must be an integer of at least 1, got ${options.retain}`)
  const refs = await listManifests(store, layout)
  const listed = new Map<string, ObjectInfo>()
  for (const info of await listObjects(store, layout.dataPrefix)) listed.set(info.key, info)

  const kept: Kept[] = []
  const doomed: ManifestRef[] = []
  let verified = 0
  let newestParsed: ManifestRef | undefined
  for (const ref of refs) {
    if (verified >= options.retain) {
      doomed.push(ref)
      continue
    }
    const outcome = await readTrusted(store, layout, ref, options.cache)
    if (!('manifest' in outcome)) {
      const { newerVersion, ...problem } = outcome
      kept.push({ ref, manifest: undefined, problem, ...(newerVersion === undefined ? {} : { newerVersion }) })
      continue
    }
    newestParsed ??= ref
    const problem = unavailable(layout, outcome.manifest, listed)
    kept.push({ ref, manifest: outcome.manifest, ...(problem === undefined ? {} : { problem }) })
    if (problem === undefined) verified++
  }
  // Unreadable manifests older than every kept verified one protect nothing.
  // (Ones that parse stay: a snapshot in flight may reuse their objects.)
  while (verified > 0 && kept.length > 0 && kept[kept.length - 1]!.manifest === undefined) doomed.unshift(kept.pop()!.ref)

  const deletedManifests = doomed.map((r) => r.key)
  if (deletedManifests.length > 0) await store.deleteMany(deletedManifests)
  for (const key of deletedManifests) options.cache.delete(key)

  const result: GcResult = {
    retained: kept.filter((k) => k.problem === undefined).map((k) => k.ref.id),
    unverified: kept.filter((k) => k.problem !== undefined).map((k) => ({ id: k.ref.id, key: k.ref.key, ...k.problem! })),
    deletedManifests,
    deletedObjects: [],
    youngObjects: 0,
    pendingObjects: 0,
    temporaryFilesRemoved: 0,
  }
  const newer = kept.find((k) => k.newerVersion !== undefined)
  if (newer !== undefined) {
    result.objectsSkipped = `manifest ${newer.ref.key} has format version ${newer.newerVersion}, written by a newer Tidemark, so the objects it references are unknown: run the newer Tidemark's GC`
  } else {
    result.deletedObjects = await deleteUnreferenced(store, layout, options, kept, listed, newestParsed, result)
  }
  if (options.observe !== undefined) {
    const gone = new Set([...deletedManifests, ...result.deletedObjects])
    const objects = new Map<string, number>()
    for (const info of listed.values()) if (!gone.has(info.key)) objects.set(info.key, info.size)
    options.observe({
      refs: refs.filter((r) => !gone.has(r.key)),
      parsed: kept.flatMap((k) => (k.manifest === undefined ? [] : [{ ref: k.ref, manifest: k.manifest }])),
      objects,
    })
  }
  // Last: a store that cannot sweep (permissions) should not keep objects from being collected.
  if (store.sweepTemporaryFiles !== undefined) result.temporaryFilesRemoved = await store.sweepTemporaryFiles(layout.prefix)
  return result
}

/** Deletes the listed data objects that nothing keeps; counts the ones kept as pending or young into `counts`. */
async function deleteUnreferenced(
  store: SnapshotStore,
  layout: SnapshotLayout,
  options: GcOptions,
  kept: readonly Kept[],
  listed: ReadonlyMap<string, ObjectInfo>,
  newestParsed: ManifestRef | undefined,
  counts: { pendingObjects: number; youngObjects: number },
): Promise<string[]> {
  const referenced = new Set<string>()
  for (const k of kept) for (const o of k.manifest?.objects ?? []) referenced.add(layout.dataKey(o.key))
  for (const key of options.protect) referenced.add(layout.dataKey(key))
  const doomedObjects: string[] = []
  for (const info of listed.values()) {
    if (referenced.has(info.key)) continue
    const owner = layout.parseDataKey(info.key)
    if (owner !== undefined && (newestParsed === undefined || newestFirst(owner, newestParsed) < 0)) {
      counts.pendingObjects++
      continue
    }
    if (options.now - info.lastModified.getTime() < options.graceMs) {
      counts.youngObjects++
      continue
    }
    doomedObjects.push(info.key)
  }
  if (doomedObjects.length > 0) await store.deleteMany(doomedObjects)
  return doomedObjects
}

/** Why a parsed manifest cannot be restored from what the data listing holds, or undefined when it can. */
function unavailable(layout: SnapshotLayout, manifest: SnapshotManifest, listed: ReadonlyMap<string, ObjectInfo>): { reason: CorruptReason; message: string } | undefined {
  for (const o of manifest.objects) {
    const key = layout.dataKey(o.key)
    const info = listed.get(key)
    if (info === undefined) return { reason: 'object-missing', message: `snapshot ${manifest.id}: data object ${key} does not exist` }
    if (info.size !== o.size) {
      return { reason: info.size < o.size ? 'object-truncated' : 'archive-corrupt', message: `snapshot ${manifest.id}: data object ${key} has ${info.size} bytes, its manifest says ${o.size}` }
    }
  }
  return undefined
}
