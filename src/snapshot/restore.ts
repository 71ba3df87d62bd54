import { randomBytes } from 'node:crypto'
import { constants as fsConstants } from 'node:fs'
import { copyFile, link, lstat, mkdtemp, readFile, rename, rm, rmdir, stat } from 'node:fs/promises'
import { basename, dirname, join, resolve } from 'node:path'
import { isTidemarkError, TidemarkError } from '../errors.js'
import type { SnapshotStore } from '../dfs/snapshot-store.js'
import { PartitionStore } from '../store/partition-store.js'
import { errnoOf, inspectStoreDir, makeDirectory, strangerNames, writeMarker, type StoreDir } from '../store/store-dir.js'
import type { Position } from '../store/position.js'
import { WRITER_THREAD_ERROR } from './file-writer.js'
import { corrupt, extractRun, paddedSize, TAR_BLOCK, type CorruptReason, type ExpectedEntry } from './archive.js'
import { listManifests, newestFirst, readManifest, type ManifestRef } from './catalog.js'
import { SNAPSHOT_ID, SnapshotLayout } from './layout.js'
import { fileKind, fileNumber, manifestFromCurrent, parseLevelDbManifest, tableFileName } from './leveldb-files.js'
import { positionsAtOrAfter, type SnapshotFile, type SnapshotManifest } from './manifest.js'
import { checkInt, checkKnown, fdClose, fdOpen, fdSync, fsyncDir, mapLimit, sha256File } from '../util/index.js'
import { checkBoolean, checkFileList, checkFunction, checkObject, checkSnapshotStore, RESTORE_DEFAULTS, type CheckedFile } from './options.js'
import { checkLogger, type Logger } from '../logging/logger.js'
import { callListener } from '../logging/listener.js'
import { restoreEnded, restoreObserved, restoreProgress } from '../metrics/snapshot-metrics.js'

export interface RestoreOptions {
  snapshotStore: SnapshotStore
  job: string
  partition: string | number
  /**
   * The partition store directory to fill. It must be absent, empty, or hold
   * a partition store (which is used or replaced): one Tidemark made (it
   * holds the TIDEMARK-STORE marker) or a plain LevelDB store of an earlier
   * version. Anything else fails with TIDEMARK_STORE_NOT_A_STORE before
   * anything is downloaded, moved or deleted.
   */
  target: string
  /** Restore exactly this snapshot id: no fallback to older ones, the local store is not considered. */
  snapshot?: string
  /** Use the local store at `target` when it is intact and at or after the snapshot. Default true. */
  useLocal?: boolean
  /** When no snapshot is usable (and no local store), create an empty directory instead of failing. Default false. */
  allowEmpty?: boolean
  /** Byte ranges downloaded at once. Default 6. */
  downloadConcurrency?: number
  /** Largest byte range one request reads (consecutive files are read in one range up to this size). Default 128 MiB. */
  rangeBytes?: number
  /** fsync every restored file before it is moved into place. Default true. */
  fsync?: boolean
  /** Minimum time between two onProgress calls (the last one always comes). Default 250 ms. */
  progressIntervalMs?: number
  onProgress?: (progress: RestoreProgress) => void
  onEvent?: (event: RestoreEvent) => void
  /** Where the restore logs what it decided (pino-compatible); nothing is logged without one. */
  logger?: Logger
  /**
   * The partition's manifests as the caller listed and read them right
   * before (`listManifests` and `readValidManifests`, as a processor's start
   * does to choose its epoch), so that the restore lists nothing and reads
   * no manifest twice. The rules stay those of a listing: newest first,
   * a listed manifest that is not among `valid` is read (and skipped when
   * it does not verify), and every snapshot's objects are verified as they
   * download. A manifest committed after that listing is not seen.
   */
  knownManifests?: { refs: readonly ManifestRef[]; valid: ReadonlyArray<{ ref: ManifestRef; manifest: SnapshotManifest }> }
  /**
   * Files already downloaded and verified on the target's file system
   * (prefetchSnapshot, src/snapshot/prefetch.ts; a SnapshotFollower's
   * reusableFiles(), src/snapshot/follow.ts): a file of the restored
   * snapshot with the same name, size and SHA-256 is hard-linked from there
   * instead of downloaded, and fsynced with the downloaded ones.
   */
  reuse?: readonly ReusableFile[]
}

/** A file of a restored store whose bytes were checked against its manifest (RestoreResult.verifiedFiles). */
export type VerifiedFile = CheckedFile

/** A verified local copy of a snapshot file (see RestoreOptions.reuse). */
export interface ReusableFile extends CheckedFile {
  path: string
}

export interface RestoreProgress {
  snapshot: string
  bytesDownloaded: number
  bytesTotal: number
  filesDone: number
  filesTotal: number
}

export interface SkippedSnapshot {
  id: string
  key: string
  reason: CorruptReason
  message: string
}

export type RestoreEvent =
  | { type: 'snapshot-skipped'; skipped: SkippedSnapshot }
  | { type: 'snapshot-restoring'; id: string; key: string; bytesTotal: number; files: number }
  | { type: 'local-store-used'; positions: Position[]; reason: string }
  | { type: 'local-store-replaced'; reason: string }

export interface SnapshotSummary {
  id: string
  key: string
  epoch: number
  sequence: number
  createdAt: string
  positions: Position[]
}

export interface RestoreResult {
  /** Where the state came from: a downloaded snapshot, the local store that was already there, or nothing (allowEmpty). */
  source: 'snapshot' | 'local' | 'empty'
  target: string
  /** The restored snapshot; with source 'local', the newest snapshot the local store was compared with, if any. */
  snapshot?: SnapshotSummary
  /** The store's source positions: replay starts after them. */
  positions: Position[]
  bytesDownloaded: number
  bytesTotal: number
  files: number
  /**
   * With source 'snapshot': the snapshot's files as written into the target,
   * each checked against its size and SHA-256. A Snapshotter of the restored
   * store takes them as `verifiedFiles`, so that its first snapshot does not
   * read the whole store again to learn which files it already holds.
   */
  verifiedFiles?: VerifiedFile[]
  durationMs: number
  /** Newer snapshots that could not be used, newest first, and why. */
  skipped: SkippedSnapshot[]
}

const KNOWN = ['snapshotStore', 'job', 'partition', 'target', 'snapshot', 'onProgress', 'onEvent', 'logger', 'knownManifests', 'reuse', ...Object.keys(RESTORE_DEFAULTS)]

/** What is at the target; `dir` identifies an existing directory, so that a swap finds out when it was replaced meanwhile. */
type LocalState =
  | { state: 'absent'; dir: Identity | undefined }
  | { state: 'intact'; positions: Position[]; dir: Identity }
  | { state: 'damaged'; reason: string; dir: Identity }

interface Identity {
  dev: number
  ino: number
  /** Files in the store directory that neither LevelDB nor Tidemark made (a user's): the store may be used, never replaced. */
  strangers: string[]
}

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

  const local = await inspectLocal(target, settings.useLocal)
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
    if (local.state === 'intact' && positionsAtOrAfter(local.positions, manifest.positions)) {
      return useLocal(`the local store is at or after snapshot ${manifest.id}`, newestReadable)
    }
    try {
      if (local.state !== 'absent') assertReplaceable(target, local.dir)
      const restored = await download(store, layout, manifest, target, local, settings, emit).catch((err: unknown) => { throw localWriteFailed(err, target) })
      return done({ source: 'snapshot', snapshot: summary(layout, manifest), ...restored })
    } catch (err) {
      if (!isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT')) throw err
      skip(ref, err)
      if (wanted !== undefined) throw err
    }
  }
  if (local.state === 'intact') return useLocal(refs.length === 0 ? 'there are no snapshots' : 'no snapshot could be restored', newestReadable)
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
    const entry: SkippedSnapshot = { id: ref.id, key: ref.key, reason: ((err as TidemarkError).details.reason as CorruptReason | undefined) ?? 'manifest-unreadable', message: (err as Error).message }
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

function checkReuse(value: unknown): Map<string, ReusableFile> {
  if (value === undefined) return new Map()
  return new Map(checkFileList<ReusableFile>(value, 'reuse', true, "prefetchSnapshot's stop()").map((f) => [f.name, f]))
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

export interface Run {
  object: string
  /** Byte of the first entry's tar header. */
  start: number
  /** Exclusive end: after the last entry's padding. */
  end: number
  entries: ExpectedEntry[]
}

/** Runs are not cut below this to spread a small restore over the downloads: each request costs a round trip. */
const MIN_SPLIT_BYTES = 4 * 1024 * 1024

/**
 * Consecutive entries of one object become one ranged read, up to
 * rangeBytes, and up to half an even share of the total over `concurrency`
 * (not below MIN_SPLIT_BYTES). A snapshot whose data sits in one or two
 * large objects would otherwise download as one or two streams, each
 * parsing, hashing and writing its bytes in turn while the other downloads
 * stand idle (64 MiB restored in 1.4-1.8x the time of a raw download, 1.1-1.2x
 * split); two runs per download keep the last ones to finish short.
 */
export function planRuns(manifest: SnapshotManifest, rangeBytes: number, concurrency: number): Run[] {
  const total = manifest.files.reduce((sum, f) => sum + TAR_BLOCK + paddedSize(f.size), 0)
  const limit = Math.min(rangeBytes, Math.max(MIN_SPLIT_BYTES, Math.ceil(total / (2 * concurrency))))
  const runs: Run[] = []
  const files = [...manifest.files].sort((a, b) => (a.object < b.object ? -1 : a.object > b.object ? 1 : a.offset - b.offset))
  let run: Run | undefined
  for (const f of files) {
    const start = f.offset - TAR_BLOCK
    const end = f.offset + paddedSize(f.size)
    if (run !== undefined && run.object === f.object && run.end === start && end - run.start <= limit) {
      run.end = end
      run.entries.push(f)
    } else {
      run = { object: f.object, start, end, entries: [f] }
      runs.push(run)
    }
  }
  // Largest first, so that the last request to finish is a short one.
  return runs.sort((a, b) => (b.end - b.start) - (a.end - a.start))
}

type Settings = {
  downloadConcurrency: number
  rangeBytes: number
  fsync: boolean
  progressIntervalMs: number
  onProgress: ((p: RestoreProgress) => void) | undefined
  reuse: ReadonlyMap<string, ReusableFile>
  localTables: LocalTables | undefined
}

/**
 * The table files of the store at the target that a snapshot holds too
 * (same name, size and SHA-256), so that a restore over a store that is
 * only behind downloads what is new and links the rest. Only table files:
 * LevelDB rewrites CURRENT and appends to logs and MANIFESTs, never to a
 * table. Hashes are taken once per file, across the snapshots a restore tries.
 */
class LocalTables {
  readonly #dir: string
  readonly #hashes = new Map<string, Promise<{ size: number; sha256: string } | undefined>>()

  constructor(dir: string) {
    this.#dir = dir
  }

  async matching(files: readonly SnapshotFile[]): Promise<ReusableFile[]> {
    const candidates = files.filter((f) => fileKind(f.name) === 'table')
    const found = await mapLimit(candidates, 2, async (f) => {
      const path = join(this.#dir, f.name)
      const sha256 = await this.#hash(path, f.size)
      return sha256 === f.sha256 ? { name: f.name, size: f.size, sha256, path } : undefined
    })
    return found.filter((f) => f !== undefined)
  }

  /** The file's SHA-256 when it is a plain file of `size` bytes (only those are worth reading). */
  #hash(path: string, size: number): Promise<string | undefined> {
    let hashed = this.#hashes.get(path)
    if (hashed === undefined) {
      // A plain file only: a symbolic link would be followed by the hash but not by link().
      // A file that cannot be read is downloaded instead.
      hashed = lstat(path).then(async (info) => (info.isFile() ? { size: info.size, sha256: info.size === size ? await sha256File(path) : '' } : undefined)).catch(() => undefined)
      this.#hashes.set(path, hashed)
    }
    return hashed.then((h) => (h !== undefined && h.size === size && h.sha256 !== '' ? h.sha256 : undefined))
  }
}

async function download(
  store: SnapshotStore,
  layout: SnapshotLayout,
  manifest: SnapshotManifest,
  target: string,
  local: LocalState,
  settings: Settings,
  emit: (event: RestoreEvent) => void,
): Promise<{ positions: Position[]; bytesDownloaded: number; bytesTotal: number; files: number; verifiedFiles: VerifiedFile[] }> {
  const localTables = settings.localTables === undefined ? new Map<string, ReusableFile>() : new Map((await settings.localTables.matching(manifest.files)).map((f) => [f.name, f]))
  const matches = (r: ReusableFile | undefined, f: SnapshotFile): r is ReusableFile => r !== undefined && r.size === f.size && r.sha256 === f.sha256
  // Where each reused file is linked from: the caller's copy, or the local store's.
  const sources = new Map<SnapshotFile, string>()
  for (const f of manifest.files) {
    const r = [settings.reuse.get(f.name), localTables.get(f.name)].find((c) => matches(c, f))
    if (r !== undefined) sources.set(f, r.path)
  }
  const reused = new Set(sources.keys())
  const runs = planRuns(reused.size === 0 ? manifest : { ...manifest, files: manifest.files.filter((f) => !reused.has(f)) }, settings.rangeBytes, settings.downloadConcurrency)
  const bytesTotal = runs.reduce((sum, r) => sum + (r.end - r.start), 0)
  emit({ type: 'snapshot-restoring', id: manifest.id, key: layout.manifestKey(manifest.epoch, manifest.sequence), bytesTotal, files: manifest.files.length })

  // Missing and short objects are found with a HEAD each, before any download.
  const needed = new Map<string, number>()
  for (const r of runs) needed.set(r.object, Math.max(needed.get(r.object) ?? 0, r.end))
  const objects = [...needed.keys()]
  const infos = await mapLimit(objects, 8, (key) => store.head(layout.dataKey(key)))
  objects.forEach((key, i) => {
    const info = infos[i]
    const full = layout.dataKey(key)
    if (info === undefined) throw corrupt('object-missing', `snapshot ${manifest.id}: data object ${full} does not exist`, { object: full, snapshot: manifest.id })
    if (info.size < needed.get(key)!) throw corrupt('object-truncated', `snapshot ${manifest.id}: data object ${full} has ${info.size} bytes, its files need ${needed.get(key)!}`, { object: full, snapshot: manifest.id })
  })

  await makeDirectory(dirname(target))
  const temp = await mkdtemp(join(dirname(target), `.${basename(target)}.restore-`))
  let bytesDownloaded = 0
  let filesDone = 0
  let lastReport = 0
  const report = (force: boolean): void => {
    if (settings.onProgress === undefined) return
    const now = performance.now()
    if (!force && now - lastReport < settings.progressIntervalMs) return
    lastReport = now
    settings.onProgress({ snapshot: manifest.id, bytesDownloaded, bytesTotal, filesDone, filesTotal: manifest.files.length })
  }
  // Files are fsynced after the last one is written, not each after its
  // write: an fsync forces an ext4 journal commit, and the writes of the
  // other downloads wait for it (strace of a restore that fsynced each file:
  // 8 ms per 2 MiB writev). Synced together at the end, 300 files of 2 MiB
  // took about as long as one file of their total size.
  const syncs = settings.fsync ? new FsyncQueue() : undefined
  try {
    await Promise.all([...reused].map(async (f) => {
      const path = join(temp, f.name)
      const source = sources.get(f)!
      // A copy on another file system (a follower's directory elsewhere) is copied instead: its bytes were verified already.
      await link(source, path).catch(async (err: unknown) => {
        if (errnoOf(err) !== 'EXDEV') throw err
        await copyFile(source, path, fsConstants.COPYFILE_EXCL)
      })
      // A prefetch does not sync what it wrote: synced here with the rest.
      if (syncs !== undefined) syncs.add(await fdOpen(path, 'r'))
    }))
    filesDone += reused.size
    await mapLimit(runs, settings.downloadConcurrency, async (run) => {
      const key = layout.dataKey(run.object)
      try {
        const body = await store.get(key, { range: { start: run.start, end: run.end - 1 } })
        await extractRun(body, run.start, run.entries, temp, {
          object: key,
          ...(syncs === undefined ? {} : { onFile: (fd: number) => syncs.add(fd) }),
          onBytes: (n) => {
            bytesDownloaded += n
            report(false)
          },
        })
      } catch (err) {
        if (isTidemarkError(err, 'TIDEMARK_DFS_NOT_FOUND')) throw corrupt('object-missing', `snapshot ${manifest.id}: data object ${key} does not exist`, { object: key, snapshot: manifest.id }, err)
        if (err instanceof RangeError) throw corrupt('object-truncated', `snapshot ${manifest.id}: data object ${key} is shorter than its manifest says: ${err.message}`, { object: key, snapshot: manifest.id }, err)
        if (isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT')) {
          throw new TidemarkError('TIDEMARK_SNAPSHOT_CORRUPT', `snapshot ${manifest.id}: ${err.message}`, { cause: err.cause, details: { ...err.details, snapshot: manifest.id } })
        }
        throw err
      }
      filesDone += run.entries.length
    })
    report(true)
    // The files are synced while the store is checked: opening it only reads
    // them (what LevelDB writes on open it syncs itself), and both must
    // succeed before anything is installed.
    const [, checked] = await Promise.allSettled([
      syncs?.drain(),
      (async () => {
        // Before the store is opened: a restored store is Tidemark's like one it created.
        await writeMarker(temp, 'store', settings.fsync)
        return checkRestoredStore(temp, manifest)
      })(),
    ]).then(firstFailure)
    const positions = checked as Position[]
    if (settings.fsync) await fsyncDir(temp)
    await install(temp, target, local, emit)
    const verifiedFiles = manifest.files.map((f) => ({ name: f.name, size: f.size, sha256: f.sha256 }))
    return { positions, bytesDownloaded, bytesTotal, files: manifest.files.length, verifiedFiles }
  } catch (err) {
    await syncs?.cancel()
    await rm(temp, { recursive: true, force: true })
    throw err
  }
}

/** The values of settled promises, or the first failure among them (in their order). */
function firstFailure(results: ReadonlyArray<PromiseSettledResult<unknown>>): unknown[] {
  for (const r of results) if (r.status === 'rejected') throw r.reason
  return results.map((r) => (r as PromiseFulfilledResult<unknown>).value)
}

/** libuv's thread pool has four threads: one stays free for the store check that runs beside the syncs. */
const FSYNC_CONCURRENCY = 3
/** Written files held open before syncing starts anyway, which bounds the descriptors a large store takes. */
const MAX_UNSYNCED_FILES = 1024

/**
 * fsyncs and closes written files, FSYNC_CONCURRENCY at a time, once
 * drain() is called (or MAX_UNSYNCED_FILES wait); it owns the descriptors it
 * is given. drain() waits for all and reports the first failure.
 */
class FsyncQueue {
  readonly #pending: number[] = []
  #started = false
  #running = 0
  #failure: { error: unknown } | undefined
  #idle: Array<() => void> = []

  add(fd: number): void {
    this.#pending.push(fd)
    this.#pump()
  }

  async drain(): Promise<void> {
    this.#started = true
    this.#pump()
    if (this.#running > 0 || this.#pending.length > 0) await new Promise<void>((resolve) => this.#idle.push(resolve))
    if (this.#failure !== undefined) throw this.#failure.error
  }

  /** Closes what has not started without syncing it, and waits for what has. */
  async cancel(): Promise<void> {
    await Promise.all(this.#pending.splice(0).map((fd) => fdClose(fd).catch(() => undefined)))
    await this.drain().catch(() => undefined)
  }

  #pump(): void {
    while (this.#running < FSYNC_CONCURRENCY && this.#pending.length > (this.#started ? 0 : MAX_UNSYNCED_FILES)) {
      const fd = this.#pending.shift()!
      this.#running++
      fsyncAndClose(fd).catch((error: unknown) => { this.#failure ??= { error } }).finally(() => {
        this.#running--
        this.#pump()
        if (this.#running === 0 && this.#pending.length === 0) for (const resolve of this.#idle.splice(0)) resolve()
      })
    }
  }
}

async function fsyncAndClose(fd: number): Promise<void> {
  try {
    await fdSync(fd)
  } finally {
    await fdClose(fd)
  }
}


/** The downloaded files must open as a LevelDB store at the manifest's positions. */
async function checkRestoredStore(dir: string, manifest: SnapshotManifest): Promise<Position[]> {
  const invalid = (message: string, cause?: unknown): TidemarkError => corrupt('store-invalid', `snapshot ${manifest.id}: ${message}`, { snapshot: manifest.id }, cause)
  let current: string
  try {
    current = manifestFromCurrent(await readFile(join(dir, 'CURRENT'), 'utf8'))
  } catch (err) {
    throw invalid((err as Error).message, err)
  }
  if (!manifest.files.some((f) => f.name === current)) throw invalid(`CURRENT names ${current}, which the snapshot does not hold`)
  let store: PartitionStore
  try {
    store = await PartitionStore.open({ path: dir })
  } catch (err) {
    throw invalid(`the restored files do not open as a store: ${(err as Error).message}`, err)
  }
  const positions = store.positions()
  await store.close()
  const same = positions.length === manifest.positions.length && positionsAtOrAfter(positions, manifest.positions) && positionsAtOrAfter(manifest.positions, positions)
  if (!same) throw invalid('the restored store\'s positions differ from the manifest\'s')
  return positions
}

/**
 * Renames the verified directory into place; an old store at the target is
 * moved aside first and deleted after. Another restore into the same target
 * that got there first makes this one fail with TIDEMARK_RESTORE_CONFLICT
 * instead of a raw ENOTEMPTY, and its store is left in place.
 */
async function install(temp: string, target: string, local: LocalState, emit: (event: RestoreEvent) => void): Promise<void> {
  if (local.state === 'intact' || local.state === 'damaged') {
    emit({ type: 'local-store-replaced', reason: local.state === 'damaged' ? local.reason : 'the local store is behind the snapshot' })
    const aside = await moveAside(target, local.dir)
    try {
      await rename(temp, target)
    } catch (err) {
      throw conflictOr(err, target)
    } finally {
      // Deleted either way: it is the store this restore was to replace.
      await rm(aside, { recursive: true, force: true })
    }
  } else {
    if (local.dir !== undefined) {
      await checkUnchanged(target, local.dir)
      // rmdir removes only an empty directory; ENOENT: someone else removed it.
      await rmdir(target).catch((err: unknown) => {
        if (errnoOf(err) !== 'ENOENT') throw conflictOr(err, target)
      })
    }
    await rename(temp, target).catch((err: unknown) => { throw conflictOr(err, target) })
  }
  await fsyncDir(dirname(target))
}

async function replaceWithEmpty(target: string, dir: Identity): Promise<void> {
  await rm(await moveAside(target, dir), { recursive: true, force: true })
}

/** Renames the store at `target` (the one inspectLocal saw, nothing else) to a name beside it. */
async function moveAside(target: string, dir: Identity): Promise<string> {
  assertReplaceable(target, dir)
  await checkUnchanged(target, dir)
  const aside = `${target}.replaced-${randomBytes(4).toString('hex')}`
  await rename(target, aside).catch((err: unknown) => { throw conflictOr(err, target) })
  return aside
}

/**
 * A failure of the local file system (ENOSPC, EROFS, EIO) while the restore
 * builds its copy beside the target: the copy is gone, the target untouched.
 * Errors of the snapshot store and verdicts on the snapshot are TidemarkErrors
 * already and pass as they are.
 */
function localWriteFailed(err: unknown, target: string): unknown {
  const code = errnoOf(err)
  // The restore's writer thread failing (not an errno) is as local as a full disk.
  if (err instanceof TidemarkError || code === undefined || (code !== WRITER_THREAD_ERROR && !/^E[A-Z]+$/.test(code))) return err
  return new TidemarkError('TIDEMARK_RESTORE_WRITE_FAILED', `the restore into ${target} could not write its files (${code}): ${(err as Error).message}; nothing was installed and the target is as it was`, { cause: err, details: { target, errno: code } })
}

/** A store that holds a user's files is not Tidemark's alone to delete. */
function assertReplaceable(target: string, dir: Identity): void {
  if (dir.strangers.length === 0) return
  const shown = dir.strangers.slice(0, 3).map((n) => JSON.stringify(n)).join(', ')
  throw new TidemarkError(
    'TIDEMARK_STORE_NOT_A_STORE',
    `the restore target ${target} holds a partition store that would have to be replaced, but also files that are not a store's (${shown}${dir.strangers.length > 3 ? `, and ${dir.strangers.length - 3} more` : ''}); restore will not delete them, and left the directory as it is`,
    { details: { target, strangers: dir.strangers } },
  )
}

async function checkUnchanged(target: string, dir: Identity): Promise<void> {
  const now = await stat(target).catch(() => undefined)
  if (now === undefined || now.dev !== dir.dev || now.ino !== dir.ino) throw conflict(target)
}

function conflict(target: string, cause?: unknown): TidemarkError {
  return new TidemarkError('TIDEMARK_RESTORE_CONFLICT', `the target ${target} was filled or replaced by another restore or process while this restore ran; this restore did not install its copy (retry to use what is there now)`, { cause, details: { target } })
}

/** The errors of a rename or rmdir that lost to another restore; anything else as it is. */
function conflictOr(err: unknown, target: string): unknown {
  const code = errnoOf(err)
  return code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'ENOENT' ? conflict(target, err) : err
}

/**
 * What is at the target: nothing (or an empty directory), an intact store
 * (its positions), or a damaged one. Only a directory that Tidemark can tell
 * for a store (its marker, or nothing but LevelDB's files with a valid
 * CURRENT) may be replaced; anything else is refused before anything is
 * downloaded: it is not ours to delete.
 */
async function inspectLocal(target: string, useLocal: boolean): Promise<LocalState> {
  let found: StoreDir
  try {
    found = await inspectStoreDir(target)
  } catch (err) {
    throw new TidemarkError('TIDEMARK_STORE_OPEN_FAILED', `cannot read the restore target ${target}: ${(err as Error).message}`, { cause: err, details: { target } })
  }
  if (found.kind === 'absent') return { state: 'absent', dir: undefined }
  if (found.kind === 'empty') return { state: 'absent', dir: { dev: found.dev, ino: found.ino, strangers: [] } }
  if (found.kind === 'foreign') {
    throw new TidemarkError('TIDEMARK_STORE_NOT_A_STORE', `the restore target ${target} is not a partition store: ${found.reason}; restore will neither fill nor replace it, and left it as it is`, { details: { target } })
  }
  const { names } = found
  const dir = { dev: found.dev, ino: found.ino, strangers: strangerNames(names) }
  const damaged = (reason: string): LocalState => ({ state: 'damaged', reason, dir })
  if (!useLocal) return damaged('the local store is not considered (useLocal: false or a specific snapshot was asked for)')
  if (!names.includes('CURRENT')) return damaged('the local store has no CURRENT file')
  try {
    const live = parseLevelDbManifest(await readFile(join(target, manifestFromCurrent(await readFile(join(target, 'CURRENT'), 'utf8')))))
    const tables = new Map(names.filter((n) => fileKind(n) === 'table').map((n) => [fileNumber(n), n]))
    for (const [n, size] of live.tables) {
      const name = tables.get(n) ?? tableFileName(n)
      const info = await stat(join(target, name)).catch(() => undefined)
      if (info === undefined) return damaged(`the local store lacks its table file ${name}`)
      if (info.size !== size) return damaged(`the local store's table file ${name} is ${info.size} bytes, its MANIFEST says ${size}`)
    }
  } catch (err) {
    return damaged(`the local store's MANIFEST cannot be read: ${(err as Error).message}`)
  }
  try {
    const store = await PartitionStore.open({ path: target, create: false })
    const positions = store.positions()
    await store.close()
    return { state: 'intact', positions, dir }
  } catch (err) {
    if (isTidemarkError(err, 'TIDEMARK_STORE_LOCKED')) throw err
    return damaged(`the local store does not open: ${(err as Error).message}`)
  }
}

