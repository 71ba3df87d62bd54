import { stat } from 'node:fs/promises'
import { join } from 'node:path'
import type { CheckpointFile } from './checkpoint.js'
import { fileKind } from './leveldb-files.js'
import { sha256File } from '../util/index.js'

interface Entry { size: number; ino: number; dev: number; mtimeMs: number; sha256: string }

/**
 * The sha256 of checkpoint files, remembered from one snapshot to the next so
 * that an unchanged table file is not read again just to learn it is unchanged.
 *
 * Only table files are remembered. A checkpoint hard-links them, and LevelDB
 * never rewrites one, so name + size + device + inode + mtime identify the
 * bytes. CURRENT, the MANIFEST and the write-ahead logs are fresh copies in
 * every checkpoint: once the previous checkpoint directory is deleted the file
 * system may hand its inode numbers to the new copies, and a CURRENT of the
 * same name, size and inode can name another MANIFEST. Trusting such a match
 * once made a snapshot reference the previous snapshot's CURRENT; so these
 * small files are hashed every time.
 */
export class FileHashCache {
  readonly #entries = new Map<string, Entry>()

  async hash(file: CheckpointFile): Promise<string> {
    const cached = this.#lookup(file)
    if (cached !== undefined) return cached
    const sha256 = await sha256File(file.path)
    this.remember(file, sha256)
    return sha256
  }

  /** Records a hash computed elsewhere (while packing the file for upload). */
  remember(file: CheckpointFile, sha256: string): void {
    if (fileKind(file.name) !== 'table') return
    this.#entries.set(file.name, { size: file.size, ino: file.ino, dev: file.dev, mtimeMs: file.mtimeMs, sha256 })
  }

  /**
   * Records hashes known from elsewhere for the table files of the store at
   * `dir` (a restore checked each file it wrote against its manifest): each
   * is bound to the file as it is now (inode, mtime), so a file that changed
   * since does not match. A file that is gone or of another size is left out.
   */
  async seed(dir: string, files: ReadonlyArray<{ name: string; size: number; sha256: string }>): Promise<void> {
    await Promise.all(files.map(async (f) => {
      const file = await describe(dir, f.name, f.size)
      if (file !== undefined) this.remember(file, f.sha256)
    }))
  }

  /**
   * Hashes the table file `name` of the store at `dir` ahead of a snapshot,
   * if it has `size` bytes and no hash is known for it as it is now. It is
   * remembered only if the file is the same (inode, size, mtime) before and
   * after the read. Never throws: a file it cannot read is left to the snapshot.
   */
  async warm(dir: string, name: string, size: number): Promise<void> {
    const file = await describe(dir, name, size)
    if (file === undefined || this.#lookup(file) !== undefined) return
    try {
      const sha256 = await sha256File(file.path)
      // Remembered only for the version that was read.
      if (same(file, await describe(dir, name, size))) this.remember(file, sha256)
    } catch {
      // Deleted by a compaction meanwhile, say: nothing to remember.
    }
  }

  /** Forgets every file that is not in `files` (LevelDB deleted it). */
  retain(files: readonly CheckpointFile[]): void {
    const names = new Set(files.map((f) => f.name))
    for (const name of this.#entries.keys()) if (!names.has(name)) this.#entries.delete(name)
  }

  #lookup(file: CheckpointFile): string | undefined {
    if (fileKind(file.name) !== 'table') return undefined
    const e = this.#entries.get(file.name)
    const same = e !== undefined && e.size === file.size && e.ino === file.ino && e.dev === file.dev && e.mtimeMs === file.mtimeMs
    return same ? e.sha256 : undefined
  }
}

/** The table file `name` of `dir` as it is now, if it is there with `size` bytes. */
async function describe(dir: string, name: string, size: number): Promise<CheckpointFile | undefined> {
  if (fileKind(name) !== 'table') return undefined
  const path = join(dir, name)
  const s = await stat(path).catch(() => undefined)
  if (s === undefined || s.size !== size) return undefined
  return { name, path, size, ino: s.ino, dev: s.dev, mtimeMs: s.mtimeMs }
}

function same(a: CheckpointFile, b: CheckpointFile | undefined): boolean {
  return b !== undefined && a.ino === b.ino && a.dev === b.dev && a.size === b.size && a.mtimeMs === b.mtimeMs
}
