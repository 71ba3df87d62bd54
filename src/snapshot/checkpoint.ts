import { randomBytes } from 'node:crypto'
import { copyFile, link, mkdir, readdir, readFile, rm, stat, unlink } from 'node:fs/promises'
import { join } from 'node:path'
import { isTidemarkError, TidemarkError } from '../errors.js'
import type { PartitionStore } from '../store/partition-store.js'
import type { Position } from '../store/position.js'
import { readMarker, STORE_MARKER, writeMarker } from '../store/store-dir.js'
import { fileKind, fileNumber, isLiveLog, manifestFromCurrent, parseLevelDbManifest } from './leveldb-files.js'

export interface CheckpointFile {
  name: string
  path: string
  size: number
  /** Device and inode of the file: with the name and size they identify an immutable table file on this machine. */
  ino: number
  dev: number
  mtimeMs: number
}

export interface Checkpoint {
  dir: string
  positions: Position[]
  files: CheckpointFile[]
  /** How long commits waited: from asking the store to quiesce until it was open again. */
  stallMs: number
  /** Set when the MANIFEST could not be read and every table file in the directory was kept. */
  liveSetUnknown?: string
}

/**
 * A consistent copy of a partition store at a committed position. Inside
 * quiesce() LevelDB is closed: table files are immutable, so they are hard
 * linked (cheap, and the bytes stay even when LevelDB deletes the files
 * later); the small mutable files are copied. Everything else (parsing the
 * MANIFEST, dropping files that are not live) happens after the store has
 * reopened, outside the stall.
 */
export async function takeCheckpoint(store: PartitionStore, parent: string): Promise<Checkpoint> {
  const dir = join(parent, `ckpt-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`)
  let positions: Position[] = []
  let current = ''
  let started = performance.now()
  try {
    await mkdir(dir, { recursive: true })
    // What proves the directory is a checkpoint, so that a later cleanup may
    // delete it; it is not one of the snapshot's files (restore writes its own).
    await writeMarker(dir, 'checkpoint')
    // Commits go on during the flush; the stall starts at quiesce().
    await store.flush()
    started = performance.now()
    await store.quiesce(async (path) => {
      positions = store.positions()
      // CURRENT is copied first and the MANIFEST it names is taken from the
      // copy, so the pair in the checkpoint always agrees: should anything
      // switch LevelDB's MANIFEST meanwhile, the copy of the old one fails
      // loudly (it is deleted) instead of leaving a CURRENT that names a
      // MANIFEST the snapshot does not hold. (The mismatch once seen in CI
      // came from the snapshotter's hash cache, see file-hashes.ts.)
      await copyFile(join(path, 'CURRENT'), join(dir, 'CURRENT'))
      current = await readFile(join(dir, 'CURRENT'), 'utf8')
      const manifest = manifestFromCurrent(current)
      const names = await readdir(path)
      const work: Array<Promise<void>> = [copyFile(join(path, manifest), join(dir, manifest))]
      for (const name of names) {
        const kind = fileKind(name)
        if (kind === 'table') work.push(link(join(path, name), join(dir, name)))
        else if (kind === 'log') work.push(copyFile(join(path, name), join(dir, name)))
      }
      await Promise.all(work)
    })
  } catch (err) {
    await rm(dir, { recursive: true, force: true }).catch(() => undefined)
    if (isTidemarkError(err, 'TIDEMARK_STORE_CLOSED') || isTidemarkError(err, 'TIDEMARK_STORE_OPEN_FAILED')) throw err
    throw new TidemarkError('TIDEMARK_SNAPSHOT_CHECKPOINT_FAILED', `checkpoint of ${store.path} failed: ${(err as Error)?.message}`, { cause: err, details: { path: store.path } })
  }
  const stallMs = performance.now() - started
  try {
    return { dir, positions, stallMs, ...(await pruneToLiveSet(dir, manifestFromCurrent(current))) }
  } catch (err) {
    await rm(dir, { recursive: true, force: true }).catch(() => undefined)
    throw new TidemarkError('TIDEMARK_SNAPSHOT_CHECKPOINT_FAILED', `checkpoint of ${store.path} is incomplete: ${(err as Error)?.message}`, { cause: err, details: { path: store.path } })
  }
}

async function pruneToLiveSet(dir: string, manifest: string): Promise<{ files: CheckpointFile[]; liveSetUnknown?: string }> {
  let liveSetUnknown: string | undefined
  let live: ReturnType<typeof parseLevelDbManifest> | undefined
  try {
    live = parseLevelDbManifest(await readFile(join(dir, manifest)))
  } catch (err) {
    // A superset of the live files is still a correct snapshot: LevelDB
    // deletes what it does not need when the restored store opens.
    liveSetUnknown = (err as Error).message
  }
  const files: CheckpointFile[] = []
  const seenTables = new Set<number>()
  for (const name of await readdir(dir)) {
    if (name === STORE_MARKER) continue
    const kind = fileKind(name)
    const path = join(dir, name)
    if (kind === undefined) { // LOCK, LOG: LevelDB's own bookkeeping of the replay
      await rm(path, { recursive: true, force: true })
      continue
    }
    const keep = live === undefined || kind === 'current' || kind === 'manifest'
      || (kind === 'table' && live.tables.has(fileNumber(name)))
      || (kind === 'log' && isLiveLog(name, live))
    if (!keep) {
      await unlink(path)
      continue
    }
    const info = await stat(path)
    if (kind === 'table' && live !== undefined) {
      const expected = live.tables.get(fileNumber(name))
      if (info.size !== expected) throw new Error(`table file ${name} is ${info.size} bytes, the MANIFEST says ${expected}`)
      seenTables.add(fileNumber(name))
    }
    files.push({ name, path, size: info.size, ino: info.ino, dev: info.dev, mtimeMs: info.mtimeMs })
  }
  if (live !== undefined) {
    const missing = [...live.tables.keys()].filter((n) => !seenTables.has(n))
    if (missing.length > 0) throw new Error(`live table files ${missing.slice(0, 5).join(', ')} are missing from the store directory`)
  }
  files.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  return liveSetUnknown === undefined ? { files } : { files, liveSetUnknown }
}

/**
 * Removes the checkpoint directories (ckpt-*) that a process which died
 * while taking a snapshot left in `checkpointDir`. Only directories that
 * carry the checkpoint marker are removed: anything else there, whatever its
 * name, was not made by takeCheckpoint. Returns the names removed.
 */
export async function removeStaleCheckpoints(checkpointDir: string): Promise<string[]> {
  let names: string[]
  try {
    names = await readdir(checkpointDir)
  } catch {
    return [] // no directory, nothing left behind
  }
  const removed: string[] = []
  await Promise.all(names.filter((n) => n.startsWith('ckpt-')).map(async (name) => {
    const dir = join(checkpointDir, name)
    if ((await readMarker(dir))?.kind !== 'checkpoint') return
    await rm(dir, { recursive: true, force: true })
    removed.push(name)
  }))
  return removed.sort()
}
