import type { Readable } from 'node:stream'
import { isTidemarkError, TidemarkError } from '../errors.js'
import type { ObjectInfo, SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { corrupt, type CorruptReason } from './archive.js'
import { MAX_EPOCH, type SnapshotLayout } from './layout.js'
import { MAX_MANIFEST_BYTES, NewerManifestVersionError, parseManifest, type SnapshotManifest } from './manifest.js'
import { mapLimit } from '../util/index.js'

/** A manifest as listed, before it is read. */
export interface ManifestRef {
  key: string
  id: string
  epoch: number
  sequence: number
  size: number
  lastModified: Date
}

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
 * does not parse is TIDEMARK_SNAPSHOT_CORRUPT (reason manifest-unreadable;
 * details.newerVersion when a newer Tidemark wrote it);
 * errors of the store itself (unavailable, access denied) pass through, since
 * they say nothing about the snapshot. The listed size is checked before the
 * read and the bytes while they stream, so an oversized object costs one
 * listing entry, not its size in memory.
 */
export async function readManifest(store: SnapshotStore, layout: SnapshotLayout, ref: ManifestRef): Promise<SnapshotManifest> {
  if (ref.size > MAX_MANIFEST_BYTES) {
    throw corrupt('manifest-unreadable', `manifest ${ref.key} has ${ref.size} bytes, more than a manifest may have (${MAX_MANIFEST_BYTES})`, { manifest: ref.key })
  }
  let bytes: Buffer
  try {
    bytes = await readAll(await store.get(ref.key, { metadata: true }), MAX_MANIFEST_BYTES)
  } catch (err) {
    if (isTidemarkError(err, 'TIDEMARK_DFS_NOT_FOUND')) throw corrupt('manifest-unreadable', `manifest ${ref.key} disappeared`, { manifest: ref.key }, err)
    if (err instanceof RangeError) throw corrupt('manifest-unreadable', `manifest ${ref.key}: ${err.message}`, { manifest: ref.key }, err)
    throw err
  }
  try {
    return parseManifest(bytes, { job: layout.job, partition: layout.partition, epoch: ref.epoch, sequence: ref.sequence })
  } catch (err) {
    const details = err instanceof NewerManifestVersionError ? { manifest: ref.key, newerVersion: err.version } : { manifest: ref.key }
    throw corrupt('manifest-unreadable', `manifest ${ref.key} is not a valid snapshot manifest: ${(err as Error).message}`, details, err)
  }
}

/** A listed manifest that could not be trusted, and why. */
export interface InvalidManifest {
  ref: ManifestRef
  /** Always 'manifest-unreadable' today; typed as CorruptReason so that it reads like restore's skipped snapshots. */
  reason: CorruptReason
  message: string
}

export interface ValidManifests {
  /** Manifests that parse and whose body matches their key (job, partition, epoch, sequence), newest first. */
  valid: Array<{ ref: ManifestRef; manifest: SnapshotManifest }>
  /** The others, newest first: missing by now, too large, not JSON, not a manifest, or of another key. */
  invalid: InvalidManifest[]
}

/**
 * Reads every manifest of `refs` and sorts them into those that can be
 * trusted and those that cannot. A key is only a name: anyone can write
 * `9999999999-000000000000.json`, so numbering, fencing and retention must
 * go by `valid` alone. Errors of the store itself pass through.
 * `options.cache` holds parsed manifests by key (manifests are immutable,
 * so it never goes stale); valid ones are added to it.
 */
export async function readValidManifests(
  store: SnapshotStore,
  layout: SnapshotLayout,
  refs: readonly ManifestRef[],
  options: { cache?: Map<string, SnapshotManifest> } = {},
): Promise<ValidManifests> {
  const { cache } = options
  const sorted = [...refs].sort(newestFirst)
  const outcomes = await mapLimit(sorted, 8, (ref) => readTrusted(store, layout, ref, cache))
  const result: ValidManifests = { valid: [], invalid: [] }
  sorted.forEach((ref, i) => {
    const outcome = outcomes[i]!
    if ('manifest' in outcome) result.valid.push({ ref, manifest: outcome.manifest })
    else result.invalid.push({ ref, reason: outcome.reason, message: outcome.message })
  })
  return result
}

/** One manifest through the cache, with TIDEMARK_SNAPSHOT_CORRUPT turned into a value. */
export async function readTrusted(
  store: SnapshotStore,
  layout: SnapshotLayout,
  ref: ManifestRef,
  cache: Map<string, SnapshotManifest> | undefined,
): Promise<{ manifest: SnapshotManifest } | { reason: CorruptReason; message: string; newerVersion?: number }> {
  const cached = cache?.get(ref.key)
  if (cached !== undefined) return { manifest: cached }
  try {
    const manifest = await readManifest(store, layout, ref)
    cache?.set(ref.key, manifest)
    return { manifest }
  } catch (err) {
    if (!isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT')) throw err
    const { reason, newerVersion } = err.details as { reason: CorruptReason; newerVersion?: number }
    return { reason, message: err.message, ...(newerVersion === undefined ? {} : { newerVersion }) }
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

/** A partition's manifests as a new owner lists them before it takes the claim. */
export interface VerifiedManifests {
  refs: ManifestRef[]
  valid: ValidManifests['valid']
  invalid: InvalidManifest[]
  /** The highest epoch among the manifests that verify (0 for none): a new claim's epoch goes above it. */
  newestEpoch: number
}

/**
 * Lists and reads a partition's manifests for a new owner: the highest
 * epoch that verifies fences every writer before the new claim (only
 * manifests that verify count: a key is only a name, and junk named with
 * the largest epoch must not make the job unstartable). Fails with
 * TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED when that epoch is the largest there is.
 */
export async function listVerifiedManifests(store: SnapshotStore, layout: SnapshotLayout, before?: VerifiedManifests): Promise<VerifiedManifests> {
  const refs = await listManifests(store, layout)
  // Manifests never change under their key: those an earlier listing read are not read again.
  const cache = before === undefined ? undefined : new Map(before.valid.map((v) => [v.ref.key, v.manifest]))
  const { valid, invalid } = await readValidManifests(store, layout, refs, cache === undefined ? {} : { cache })
  const newest = valid[0]?.ref
  if (newest !== undefined && newest.epoch >= MAX_EPOCH) {
    throw new TidemarkError(
      'TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED',
      `snapshot ${newest.key} has epoch ${newest.epoch}, the largest there is: no new owner of ${layout.prefix} can take an epoch above it to fence the previous one; move the partition's snapshots aside`,
      { details: { job: layout.job, partition: layout.partition, key: newest.key, epoch: newest.epoch } },
    )
  }
  return { refs, valid, invalid, newestEpoch: newest?.epoch ?? 0 }
}
