import { mkdir, readdir, readFile, rename, rm, rmdir, stat, unlink, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { validatePosition } from '../store/position.js'
import type { SnapshotManifest } from './manifest.js'
import type { CheckedFile } from './options.js'
import type { ReusableFile, SnapshotSummary } from './restore/index.js'
import { fdOpen, fsyncAndClose, mapLimit, sha256File } from '../util/index.js'

const STATE_FORMAT = 'tidemark-follower'
const STATE_VERSION = 1
/** Two of libuv's four threads, so that the owner's own work on this member keeps the others. */
const ADOPT_FSYNC_CONCURRENCY = 2

/**
 * The files a SnapshotFollower holds, on disk:
 *
 *   <dir>/follower.json            which snapshot the copy matches, and its files
 *   <dir>/files/<name>.<sha256>    one verified file each
 *   <dir>/incoming/                the download in progress (a prefetch's directory)
 *
 * A file's path names its content, so a file is never overwritten: a newer
 * CURRENT or MANIFEST of the same name is another path, and a restore that
 * linked the older one keeps what it verified. follower.json is replaced
 * whole (rename). The copy itself needs no fsync: opening a copy hashes
 * every file it lists and drops the ones that do not verify. Its files are
 * fsynced all the same, once each (adopt(), open()), so that a restore
 * links them without syncing them on its critical path: reusable() says
 * they are `synced`.
 */
export class FollowerCopy {
  readonly dir: string
  readonly filesDir: string
  readonly incomingDir: string
  readonly #statePath: string
  readonly #job: string
  readonly #partition: string
  /** Every file on disk under files/, by name and hash. */
  readonly #pool = new Map<string, CheckedFile>()
  #snapshot: SnapshotSummary | undefined
  /** The files of the copy: the matched snapshot's, or what is left of them after a prune. */
  #files: CheckedFile[] = []

  constructor(dir: string, job: string, partition: string) {
    this.dir = dir
    this.filesDir = join(dir, 'files')
    this.incomingDir = join(dir, 'incoming')
    this.#statePath = join(dir, 'follower.json')
    this.#job = job
    this.#partition = partition
  }

  get snapshot(): SnapshotSummary | undefined {
    return this.#snapshot
  }

  get files(): readonly CheckedFile[] {
    return this.#files
  }

  /** Bytes of the files on disk (the copy, and what a sync downloaded for a snapshot it has not committed). */
  get bytesOnDisk(): number {
    let sum = 0
    for (const f of this.#pool.values()) sum += f.size
    return sum
  }

  get bytesHeld(): number {
    return this.#files.reduce((sum, f) => sum + f.size, 0)
  }

  has(file: CheckedFile): boolean {
    return this.#pool.has(poolName(file))
  }

  pathOf(file: CheckedFile): string {
    return join(this.filesDir, poolName(file))
  }

  reusable(): ReusableFile[] {
    return this.#files.map((f) => ({ name: f.name, size: f.size, sha256: f.sha256, path: this.pathOf(f), synced: true }))
  }

  /**
   * Reads what an earlier follower left in the directory and hashes every
   * file it lists: those that do not verify (a crash mid-write, a damaged
   * disk) are dropped, and the copy then matches no snapshot. Anything else
   * under files/ and incoming/ is removed. Returns the names dropped. The
   * files kept are fsynced: the follower that wrote them may have died
   * between their write and adopt()'s sync, and their bytes be in the page
   * cache only.
   */
  async open(): Promise<string[]> {
    await mkdir(this.filesDir, { recursive: true })
    await rm(this.incomingDir, { recursive: true, force: true })
    const state = await readFile(this.#statePath, 'utf8').then((text) => this.#parse(text), () => undefined)
    const dropped: string[] = []
    const kept: CheckedFile[] = []
    for (const f of state?.files ?? []) {
      const path = this.pathOf(f)
      const ok = await stat(path).then(async (info) => info.isFile() && info.size === f.size && await sha256File(path) === f.sha256, () => false)
      if (ok) await fsyncAndClose(await fdOpen(path, 'r'))
      if (ok) kept.push(f)
      else dropped.push(f.name)
    }
    for (const f of kept) this.#pool.set(poolName(f), f)
    for (const name of await readdir(this.filesDir)) {
      if (!this.#pool.has(name)) await rm(join(this.filesDir, name), { recursive: true, force: true })
    }
    this.#files = kept
    this.#snapshot = dropped.length === 0 ? state?.snapshot : undefined
    if (state !== undefined && dropped.length > 0) await this.#writeState()
    return dropped
  }

  /**
   * Moves verified files a prefetch wrote into incoming/ into the copy's
   * pool (not yet the copy's), and writes them back to disk. A restore from
   * the copy links these files without syncing them (reusable() says they
   * are synced); a file still dirty in the page cache (a warm-up downloaded
   * seconds before its move) would otherwise be written on the new owner's
   * critical path: 512 MiB took about 0.5 s on this machine's disk. A file
   * joins the pool once it is synced, so a failed sync leaves none that
   * would say so untruly.
   */
  async adopt(files: readonly ReusableFile[]): Promise<void> {
    const moved = files.map((f) => ({ name: f.name, size: f.size, sha256: f.sha256 }))
    for (const [i, file] of moved.entries()) await rename(files[i]!.path, this.pathOf(file))
    await mapLimit(moved, ADOPT_FSYNC_CONCURRENCY, async (f) => fsyncAndClose(await fdOpen(this.pathOf(f), 'r')))
    for (const file of moved) this.#pool.set(poolName(file), file)
  }

  /** The copy now matches `manifest`, whose files must all be in the pool; the pool's other files are removed. */
  async commit(manifest: SnapshotManifest, summary: SnapshotSummary): Promise<void> {
    this.#files = manifest.files.map((f) => ({ name: f.name, size: f.size, sha256: f.sha256 }))
    this.#snapshot = summary
    await this.#writeState()
    await this.trim()
  }

  /**
   * Removes every file that `manifest` does not hold, to make room for its
   * download under a disk budget. The copy then matches no snapshot (until
   * the download commits) but keeps what is left, which a restore still reuses.
   */
  async prune(manifest: SnapshotManifest): Promise<void> {
    const wanted = new Set(manifest.files.map(poolName))
    const before = this.#files.length
    this.#files = this.#files.filter((f) => wanted.has(poolName(f)))
    if (this.#files.length !== before || this.#snapshot !== undefined) {
      this.#snapshot = undefined
      await this.#writeState()
    }
    await this.#remove((name) => !wanted.has(name))
  }

  /** Removes the pool's files that are not the copy's (downloads of a sync that did not commit). */
  async trim(): Promise<void> {
    const kept = new Set(this.#files.map(poolName))
    await this.#remove((name) => !kept.has(name))
  }

  /** Removes what a follower writes in the directory, and the directory when nothing else is left in it. */
  async remove(): Promise<void> {
    for (const path of [this.filesDir, this.incomingDir, this.#statePath, `${this.#statePath}.tmp`]) await rm(path, { recursive: true, force: true })
    this.#pool.clear()
    this.#files = []
    this.#snapshot = undefined
    await rmdir(this.dir).catch(() => undefined)
  }

  async #remove(doomed: (name: string) => boolean): Promise<void> {
    for (const name of [...this.#pool.keys()]) {
      if (!doomed(name)) continue
      await unlink(join(this.filesDir, name)).catch((err: unknown) => {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
      })
      this.#pool.delete(name)
    }
  }

  async #writeState(): Promise<void> {
    const s = this.#snapshot
    const doc = {
      format: STATE_FORMAT,
      version: STATE_VERSION,
      job: this.#job,
      partition: this.#partition,
      snapshot: s === undefined ? null : { ...s, positions: s.positions.map((p) => ({ topic: p.topic, partition: p.partition, offset: p.offset.toString() })) },
      files: this.#files,
    }
    const temp = `${this.#statePath}.tmp`
    await writeFile(temp, `${JSON.stringify(doc)}\n`)
    await rename(temp, this.#statePath)
  }

  /** A state file of another job, partition or format, or one that does not parse, is ignored: the copy starts empty. */
  #parse(text: string): { snapshot: SnapshotSummary | undefined; files: CheckedFile[] } | undefined {
    try {
      const doc = JSON.parse(text) as Record<string, unknown>
      if (doc.format !== STATE_FORMAT || doc.version !== STATE_VERSION || doc.job !== this.#job || doc.partition !== this.#partition || !Array.isArray(doc.files)) return undefined
      const files = (doc.files as unknown[]).map((f) => {
        const { name, size, sha256 } = f as Record<string, unknown>
        if (typeof name !== 'string' || !/^[A-Za-z0-9._-]+$/.test(name) || !Number.isSafeInteger(size) || typeof sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(sha256)) throw new Error('bad file')
        return { name, size: size as number, sha256 }
      })
      const s = doc.snapshot as (Omit<SnapshotSummary, 'positions'> & { positions: Array<{ topic: unknown; partition: unknown; offset: string }> }) | null
      const snapshot = s === null ? undefined : { ...s, positions: s.positions.map((p, i) => validatePosition({ ...p, offset: BigInt(p.offset) }, `positions[${i}]`)) }
      return { snapshot, files }
    } catch {
      return undefined
    }
  }
}

function poolName(f: CheckedFile): string {
  return `${f.name}.${f.sha256}`
}
