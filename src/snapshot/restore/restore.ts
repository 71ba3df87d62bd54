import { resolve } from 'node:path'
import { isTidemarkError, TidemarkError } from '../../errors.js'
import { makeDirectory } from '../../store/store-dir.js'
import type { Position } from '../../store/position.js'
import type { CorruptReason } from '../archive.js'
import { listManifests, newestFirst, readManifest, type ManifestRef } from '../catalog.js'
import { SNAPSHOT_ID, SnapshotLayout } from '../layout.js'
import { positionsAtOrAfter, type SnapshotManifest } from '../manifest.js'
import { checkInt, checkKnown } from '../../util/index.js'
import { checkBoolean, checkFileList, checkFunction, checkObject, checkSnapshotStore, RESTORE_DEFAULTS } from '../options.js'
import { checkLogger, type Logger } from '../../logging/logger.js'
import { callListener } from '../../logging/listener.js'
import { restoreEnded, restoreObserved, restoreProgress } from '../../metrics/snapshot-metrics.js'
import type { RestoreEvent, RestoreOptions, RestoreProgress, RestoreResult, ReusableFile, SkippedSnapshot, SnapshotSummary } from './types.js'
import { LocalTables, download } from './download.js'
import { assertReplaceable, inspectLocal, localWriteFailed, replaceWithEmpty, type LocalState } from './install.js'
import type { PartitionStore } from '../../store/partition-store.js'
import type { StateDefinition } from '../../store/state.js'
import { checkVersions } from '../../store/state-registry.js'

const KNOWN = ['snapshotStore', 'job', 'partition', 'target', 'snapshot', 'onProgress', 'onEvent', 'logger', 'knownManifests', 'reuse', 'states', ...Object.keys(RESTORE_DEFAULTS)]

/**
 * Restores a partition store into `target` from the newest snapshot that
 * verifies, ordered by (epoch, sequence). A snapshot whose manifest does not
 * parse, whose objects are missing or short, or whose files fail their
 * SHA-256 or the archive checks is skipped for the next older one; each skip
 * is reported (onEvent and result.skipped). Files are downloaded as parallel
 * ranged reads into a temporary directory beside the target, which is renamed
 * into place when everything verified, so the target never holds a partial
 * store. When the local store at `target` is intact and at or after a
 * snapshot's positions, it is used as it is and nothing is downloaded;
 * when it is behind, its table files that the snapshot holds (same name,
 * size and SHA-256) are linked into the copy instead of downloaded.
 *
 * Errors of the snapshot store itself (unavailable, access denied) fail the
 * restore instead of skipping snapshots: they say nothing about a snapshot.
 */
export async function restoreSnapshot(options: RestoreOptions): Promise<RestoreResult> {
  return (await restoreKeepingStore(options)).result
}

/**
 * restoreSnapshot for a runtime that opens the store next: `local` is what
 * its inspectLocal(target, true, open) found before it held the claim, an
 * intact store kept open. When that store is used as it is, it comes back
 * open (one open instead of two); in every other outcome it is closed
 * before anything replaces it.
 */
export async function restoreKeepingStore(options: RestoreOptions, local?: LocalState & { state: 'intact' }): Promise<{ result: RestoreResult; store?: PartitionStore }> {
  let handed = false
  try {
    const restored = await restore(options, local)
    // Closed already when a download was tried first (and its snapshot skipped).
    handed = restored.source === 'local' && local?.store?.closed === false
    return { result: restored, ...(handed ? { store: local!.store! } : {}) }
  } finally {
    if (!handed) await local?.store?.close()
  }
}

async function restore(options: RestoreOptions, early: (LocalState & { state: 'intact' }) | undefined): Promise<RestoreResult> {
  const started = performance.now()
  const o = checkObject(options, 'restore options')
  checkKnown(o, KNOWN, 'restore')
  const store = checkSnapshotStore(o.snapshotStore, 'snapshotStore')
  const layout = new SnapshotLayout(o.job, o.partition)
  if (typeof o.target !== 'string' || o.target === '') throw new TypeError('target must be a non-empty path string')
  const target = resolve(o.target)
  const wanted = o.snapshot === undefined ? undefined : (() => {
    if (typeof o.snapshot !== 'string' || !SNAPSHOT_ID.test(o.snapshot)) throw new RangeError(`snapshot must be a snapshot id like 0000000001-000000000042, got ${JSON.stringify(o.snapshot)}`)
    return o.snapshot
  })()
  const d = RESTORE_DEFAULTS
  const settings = {
    useLocal: checkBoolean(o.useLocal ?? d.useLocal, 'useLocal') && wanted === undefined,
    allowEmpty: checkBoolean(o.allowEmpty ?? d.allowEmpty, 'allowEmpty'),
    downloadConcurrency: checkInt(o.downloadConcurrency ?? d.downloadConcurrency, 'downloadConcurrency', 1, 64),
    rangeBytes: checkInt(o.rangeBytes ?? d.rangeBytes, 'rangeBytes', 64 * 1024),
    fsync: checkBoolean(o.fsync ?? d.fsync, 'fsync'),
    progressIntervalMs: checkInt(o.progressIntervalMs ?? d.progressIntervalMs, 'progressIntervalMs', 0),
    onProgress: checkFunction<(p: RestoreProgress) => void>(o.onProgress, 'onProgress'),
    onEvent: checkFunction<(e: RestoreEvent) => void>(o.onEvent, 'onEvent'),
    reuse: checkReuse(o.reuse),
    localTables: undefined as LocalTables | undefined,
  }
  const logger = checkLogger(o.logger, 'logger')
  const known = checkKnownManifests(o.knownManifests, layout)
  const declared = checkStates(o.states)
  const labels = { job: layout.job, partition: layout.partition }
  // Called from the download loop: the user's throw is logged, like onEvent's.
  // Metrics count downloaded bytes through the same reports, so a subscriber gets them without onProgress.
  const user = settings.onProgress
  const progressFields = { ...labels, callback: 'onProgress' }
  const observed = restoreObserved()
  settings.onProgress = user === undefined && !observed ? undefined : (p) => {
    if (observed) restoreProgress(labels, p.bytesDownloaded, p.bytesTotal)
    if (user !== undefined) callListener(() => user(p), undefined, logger, progressFields)
  }
  const emit = (event: RestoreEvent): void => {
    logRestoreEvent(logger, labels, event)
    callListener(() => settings.onEvent?.(event), undefined, logger, { ...labels, event: event.type })
  }

  if (early !== undefined && !settings.useLocal) throw new TypeError('restoreKeepingStore: a store inspected beforehand is only for a restore that may use it (useLocal, no snapshot named)')
  const local: LocalState = early ?? await inspectLocal(target, settings.useLocal)
  // A store that is there but behind (or damaged) still holds table files the
  // snapshot may share: LevelDB never changes one, so a matching hash is the file.
  if (local.state === 'intact' || (local.state === 'damaged' && settings.useLocal)) settings.localTables = new LocalTables(target)
  const skipped: SkippedSnapshot[] = []
  const done = (result: Omit<RestoreResult, 'durationMs' | 'skipped' | 'target'>): RestoreResult => {
    const restored = { ...result, target, skipped, durationMs: performance.now() - started }
    logger.info({ ...labels, source: restored.source, snapshot: restored.snapshot?.id, bytesDownloaded: restored.bytesDownloaded, durationMs: Math.round(restored.durationMs) }, 'restore done')
    restoreEnded(labels, restored)
    return restored
  }
  const useLocal = (reason: string, newest: SnapshotManifest | undefined): RestoreResult => {
    const positions = (local as { positions: Position[] }).positions
    emit({ type: 'local-store-used', positions, reason })
    return done({ source: 'local', ...(newest === undefined ? {} : { snapshot: summary(layout, newest) }), positions, bytesDownloaded: 0, bytesTotal: 0, files: 0 })
  }

  let refs = known?.refs ?? await listManifests(store, layout)
  if (wanted !== undefined) {
    refs = refs.filter((r) => r.id === wanted)
    if (refs.length === 0) throw new TidemarkError('TIDEMARK_SNAPSHOT_NOT_FOUND', `snapshot ${wanted} of ${layout.prefix} does not exist in ${store.url}`, { details: { snapshot: wanted, skipped } })
  }
  let newestReadable: SnapshotManifest | undefined
  for (const ref of refs) {
    let manifest: SnapshotManifest
    try {
      manifest = known?.read.get(ref.key) ?? await readManifest(store, layout, ref)
    } catch (err) {
      if (!isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT')) throw err
      skip(ref, err)
      continue
    }
    newestReadable ??= manifest
    // An older snapshot of another lineage holds the state as it was before
    // an offline transform rewrote it: never a fallback for the new one.
    if (manifest.lineage !== newestReadable.lineage) {
      skipFor(ref, 'other-lineage', `snapshot ${manifest.id} is of another lineage than the newer snapshot ${newestReadable.id}: an offline transform rewrote the state between them`)
      continue
    }
    // Before the local store is used or anything downloaded: a newer program wrote this state.
    if (declared !== undefined && manifest.states !== undefined) checkVersions(manifest.states, declared, `snapshot ${manifest.id} of ${layout.prefix}`)
    // A store of another lineage holds another history, however far its
    // positions are: an offline transform rewrote the state (src/store/lineage.ts).
    const otherLineage = local.state === 'intact' && local.lineage !== manifest.lineage
    if (local.state === 'intact' && !otherLineage && positionsAtOrAfter(local.positions, manifest.positions)) {
      return useLocal(`the local store is at or after snapshot ${manifest.id}`, newestReadable)
    }
    try {
      if (local.state !== 'absent') assertReplaceable(target, local.dir)
      // LevelDB must not hold the directory that the download may move aside.
      if (local.state === 'intact') await local.store?.close()
      const replacing: LocalState = otherLineage ? { ...local as LocalState & { state: 'intact' }, otherLineage: true } : local
      const restored = await download(store, layout, manifest, target, replacing, settings, emit).catch((err: unknown) => { throw localWriteFailed(err, target) })
      return done({ source: 'snapshot', snapshot: summary(layout, manifest), ...restored })
    } catch (err) {
      if (!isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT')) throw err
      skip(ref, err)
      if (wanted !== undefined) throw err
    }
  }
  if (local.state === 'intact') {
    if (newestReadable === undefined || newestReadable.lineage === local.lineage) return useLocal(refs.length === 0 ? 'there are no snapshots' : 'no snapshot could be restored', newestReadable)
    // The store would bring back the state that a transform replaced; nor
    // may an empty store take its place as if nothing were there.
    throw new TidemarkError('TIDEMARK_SNAPSHOT_NOT_FOUND', `none of the ${refs.length} snapshots of ${layout.prefix} could be restored (${skipped.map((s) => `${s.id}: ${s.reason}`).join('; ')}), and the local store ${target} is of another lineage than snapshot ${newestReadable.id}: an offline transform rewrote the state since; the local store was left as it is`, { details: { skipped, job: layout.job, partition: layout.partition } })
  }
  if (settings.allowEmpty && wanted === undefined) {
    if (local.state === 'damaged') {
      emit({ type: 'local-store-replaced', reason: local.reason })
      await replaceWithEmpty(target, local.dir)
    }
    await makeDirectory(target)
    return done({ source: 'empty', positions: [], bytesDownloaded: 0, bytesTotal: 0, files: 0 })
  }
  const why = refs.length === 0
    ? `there are no snapshots of ${layout.prefix} in ${store.url}`
    : `none of the ${refs.length} snapshots of ${layout.prefix} could be restored (${skipped.map((s) => `${s.id}: ${s.reason}`).join('; ')})`
  throw new TidemarkError('TIDEMARK_SNAPSHOT_NOT_FOUND', `${why}; pass allowEmpty to start from an empty state`, { details: { skipped, job: layout.job, partition: layout.partition } })

  function skip(ref: { id: string; key: string }, err: unknown): void {
    skipFor(ref, ((err as TidemarkError).details.reason as CorruptReason | undefined) ?? 'manifest-unreadable', (err as Error).message)
  }

  function skipFor(ref: { id: string; key: string }, reason: SkippedSnapshot['reason'], message: string): void {
    const entry: SkippedSnapshot = { id: ref.id, key: ref.key, reason, message }
    skipped.push(entry)
    emit({ type: 'snapshot-skipped', skipped: entry })
  }
}

/**
 * A handed listing stands for a listing of this partition only: refs of
 * another prefix, or a "verified" manifest whose body is not its key's,
 * would let a caller's mix-up restore the wrong state.
 */
function checkKnownManifests(value: unknown, layout: SnapshotLayout): { refs: ManifestRef[]; read: Map<string, SnapshotManifest> } | undefined {
  if (value === undefined) return undefined
  const known = value as RestoreOptions['knownManifests']
  if (known === null || typeof known !== 'object' || !Array.isArray(known.refs) || !Array.isArray(known.valid)) {
    throw new TypeError('knownManifests must be { refs, valid } as listManifests and readValidManifests return them')
  }
  const refs = known.refs.map((ref) => {
    const parsed = ref !== null && typeof ref === 'object' && typeof ref.key === 'string' ? layout.parseManifestKey(ref.key) : undefined
    if (parsed === undefined || parsed.epoch !== ref.epoch || parsed.sequence !== ref.sequence) {
      throw new RangeError(`knownManifests.refs holds ${JSON.stringify((ref as { key?: unknown } | null)?.key)}, not a manifest key of ${layout.prefix}`)
    }
    return ref
  })
  const listed = new Set(refs.map((r) => r.key))
  const read = new Map<string, SnapshotManifest>()
  for (const entry of known.valid) {
    const m = entry?.manifest
    if (entry?.ref === undefined || !listed.has(entry.ref.key) || m?.job !== layout.job || m.partition !== layout.partition || m.epoch !== entry.ref.epoch || m.sequence !== entry.ref.sequence) {
      throw new RangeError(`knownManifests.valid holds ${JSON.stringify(entry?.ref?.key)}, which is not a listed manifest of ${layout.prefix} whose body matches its key`)
    }
    read.set(entry.ref.key, m)
  }
  // Newest first, as a listing returns them: the same snapshot is chosen.
  return { refs: [...refs].sort(newestFirst), read }
}

function checkStates(value: unknown): Map<string, StateDefinition> | undefined {
  if (value === undefined) return undefined
  if (!Array.isArray(value)) throw new TypeError('states must be an array of state definitions (valueState(), mapState())')
  const byName = new Map<string, StateDefinition>()
  for (const def of value as unknown[]) {
    if (def === null || typeof def !== 'object' || typeof (def as StateDefinition).name !== 'string') throw new TypeError('states must hold state definitions made by valueState() or mapState()')
    byName.set((def as StateDefinition).name, def as StateDefinition)
  }
  return byName
}

function checkReuse(value: unknown): Map<string, ReusableFile> {
  if (value === undefined) return new Map()
  const files = checkFileList<ReusableFile>(value, 'reuse', true, "prefetchSnapshot's stop()")
  for (const f of files) {
    if (f.synced !== undefined && typeof f.synced !== 'boolean') throw new TypeError(`reuse: ${JSON.stringify(f.name)} has synced ${JSON.stringify(f.synced)}, which must be true, false or left out`)
  }
  return new Map(files.map((f) => [f.name, f]))
}

function logRestoreEvent(logger: Logger, labels: { job: string; partition: string }, event: RestoreEvent): void {
  switch (event.type) {
    case 'snapshot-skipped': return logger.warn({ ...labels, snapshot: event.skipped.id, reason: event.skipped.reason, detail: event.skipped.message }, 'restore skipped a snapshot that does not verify')
    case 'snapshot-restoring': return logger.info({ ...labels, snapshot: event.id, bytesTotal: event.bytesTotal, files: event.files }, 'restoring snapshot')
    case 'local-store-used': return logger.info({ ...labels, reason: event.reason }, 'using the local store')
    case 'local-store-replaced': return logger.info({ ...labels, reason: event.reason }, 'replacing the local store')
  }
}

function summary(layout: SnapshotLayout, m: SnapshotManifest): SnapshotSummary {
  return { id: m.id, key: layout.manifestKey(m.epoch, m.sequence), epoch: m.epoch, sequence: m.sequence, createdAt: m.createdAt, positions: [...m.positions] }
}
