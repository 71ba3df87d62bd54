import { constants as fsConstants } from 'node:fs'
import { copyFile, link, lstat, mkdtemp, rm } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { isTidemarkError, TidemarkError } from '../../errors.js'
import type { SnapshotStore } from '../../snapshot-store/snapshot-store.js'
import { errnoOf, makeDirectory, writeMarker } from '../../store/store-dir.js'
import type { Position } from '../../store/position.js'
import { corrupt, extractRun, paddedSize, TAR_BLOCK, type ExpectedEntry } from '../archive.js'
import type { SnapshotLayout } from '../layout.js'
import { fileKind } from '../leveldb-files.js'
import type { SnapshotFile, SnapshotManifest } from '../manifest.js'
import { fdClose, fdOpen, fsyncAndClose, fsyncDir, mapLimit, sha256File } from '../../util/index.js'
import type { RestoreEvent, RestoreProgress, ReusableFile, VerifiedFile } from './types.js'
import { type LocalState, checkRestoredStore, install } from './install.js'

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
export class LocalTables {
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

export async function download(
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
  const sources = new Map<SnapshotFile, ReusableFile>()
  for (const f of manifest.files) {
    const r = [settings.reuse.get(f.name), localTables.get(f.name)].find((c) => matches(c, f))
    if (r !== undefined) sources.set(f, r)
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
      const linked = await link(source.path, path).then(() => true, async (err: unknown) => {
        if (errnoOf(err) !== 'EXDEV') throw err
        await copyFile(source.path, path, fsConstants.COPYFILE_EXCL)
        return false
      })
      // A prefetch does not sync what it wrote: synced here with the rest.
      // A link to synced bytes is not: the directory's fsync below makes the
      // link durable, and an fsync per file costs a disk cache flush each
      // (261 links of a 512 MiB store: 125-160 ms under another writer's
      // fsyncs on this machine's ext4, against 7 ms without them).
      if (syncs !== undefined && !(linked && source.synced === true)) syncs.add(await fdOpen(path, 'r'))
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
