import { randomBytes } from 'node:crypto'
import { copyFile, link, mkdir, open, readdir, readFile, rm, stat, unlink } from 'node:fs/promises'
import { join } from 'node:path'
import { isTidemarkError, TidemarkError } from '../errors.js'
import type { PartitionStore } from '../store/partition-store.js'
import type { Position } from '../store/position.js'
import type { RecordedState } from '../store/state-registry.js'
import { readLineage } from '../store/lineage.js'
import { readMarker, STORE_MARKER, writeMarker } from '../store/store-dir.js'
import { completeRecordsLength, fileKind, fileNumber, isLiveLog, manifestFromCurrent, parseLevelDbManifest } from './leveldb-files.js'

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
  /** The store's states as its registry recorded them at the checkpoint (kind, highest version written). */
  states: RecordedState[]
  /** The store's lineage (src/store/lineage.ts), if a transform built it. */
  lineage?: string
  files: CheckpointFile[]
  /** How long commits waited: from asking the store to quiesce until it let them go on. */
  stallMs: number
  /** Set when the MANIFEST could not be read and every table file in the directory was kept. */
  liveSetUnknown?: string
}

/**
 * Attempts with the store open before a checkpoint closes it. An attempt
 * fails only when a compaction deleted a live table file between the moment
 * the MANIFEST's size was taken and the file's hard link: milliseconds.
 */
const OPEN_ATTEMPTS = 3
/**
 * An open database appends every compaction to its MANIFEST, which only a
 * reopen starts afresh; beyond this size the next checkpoint closes the
 * store, so that snapshots do not carry an ever longer MANIFEST.
 */
const OPEN_MANIFEST_LIMIT = 4 * 1024 * 1024
/** Suffix of the hard links to files LevelDB still appends to, in a checkpoint being made. */
const GROWING = '.growing'

/**
 * A consistent copy of a partition store at a committed position.
 *
 * Table files are immutable, so they are hard linked (cheap, and the bytes
 * stay even when LevelDB deletes the files later); what LevelDB appends to
 * (write-ahead logs, MANIFEST) is copied up to a size. Commits wait only
 * while the positions are read and those sizes taken, with the database
 * open (quiesce with keepOpen); compactions go on, and a table file they
 * delete before its link makes the attempt fail and start again. After
 * OPEN_ATTEMPTS such failures, or when the MANIFEST has grown past
 * OPEN_MANIFEST_LIMIT, the store is closed for the checkpoint instead (and
 * reopened with a fresh MANIFEST). Parsing the MANIFEST and dropping files
 * that are not live happens outside the stall.
 */
export async function takeCheckpoint(store: PartitionStore, parent: string, options: { open?: boolean } = {}): Promise<Checkpoint> {
  for (let attempt = 0; options.open !== false && attempt < OPEN_ATTEMPTS; attempt++) {
    const checkpoint = await attemptCheckpoint(store, parent, true)
    if (checkpoint === 'close') break
    if (checkpoint !== 'again') return checkpoint
  }
  return (await attemptCheckpoint(store, parent, false)) as Checkpoint
}

/** A checkpoint; or, taken with the store open, 'again' (a table file went before its link) or 'close' (the MANIFEST is long). */
async function attemptCheckpoint(store: PartitionStore, parent: string, open: boolean): Promise<Checkpoint | 'again' | 'close'> {
  const dir = join(parent, `ckpt-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`)
  let positions: Position[] = []
  let states: RecordedState[] = []
  let current = ''
  let started = performance.now()
  let stallMs = 0
  const growing: Array<{ name: string; size: number }> = []
  let lineage: string | undefined
  try {
    await mkdir(dir, { recursive: true })
    // What proves the directory is a checkpoint, so that a later cleanup may
    // delete it; it is not one of the snapshot's files (restore writes its own).
    await writeMarker(dir, 'checkpoint')
    // Outside the stall: only a transform writes it, before the store's first snapshot.
    lineage = await readLineage(store)
    // Commits go on during the flush; the stall starts at quiesce(). With the
    // memtable in a table file the logs to copy are short.
    await store.flush()
    started = performance.now()
    if (open) {
      await store.quiesce(async (path) => {
        positions = store.positions()
        states = store.recordedStates()
        current = await readFile(join(path, 'CURRENT'), 'utf8') // rewritten only when LevelDB opens
        const manifest = manifestFromCurrent(current)
        const logs = (await readdir(path)).filter((name) => fileKind(name) === 'log')
        // Logs before the MANIFEST's size: LevelDB deletes a log only after
        // its MANIFEST says it is not needed, so a log gone by now is one the
        // MANIFEST, as far as it is copied, does not need.
        await Promise.all(logs.map(async (name) => {
          if (await linkUnlessGone(join(path, name), join(dir, name + GROWING))) growing.push({ name, size: (await stat(join(dir, name + GROWING))).size })
        }))
        await link(join(path, manifest), join(dir, manifest + GROWING))
        growing.push({ name: manifest, size: (await stat(join(dir, manifest + GROWING))).size })
      }, { keepOpen: true })
      stallMs = performance.now() - started
      await writeWhole(join(dir, 'CURRENT'), Buffer.from(current))
      for (const { name, size } of growing) {
        const from = join(dir, name + GROWING)
        if (fileKind(name) === 'manifest') {
          if (size > OPEN_MANIFEST_LIMIT) {
            await discard(dir)
            return 'close'
          }
          // A compaction may have been writing an edit: only complete ones count.
          const data = await readPrefix(from, size)
          await writeWhole(join(dir, name), data.subarray(0, completeRecordsLength(data)))
        } else {
          // Commits waited while the size was taken: the log ends after a whole commit.
          await copyPrefix(from, join(dir, name), size)
        }
        await unlink(from)
      }
      // Every table file the copied MANIFEST names was there when its size
      // was taken; one that a compaction deleted since is missing from the
      // links, which pruneToLiveSet finds.
      const path = store.path
      await Promise.all((await readdir(path)).filter((name) => fileKind(name) === 'table').map((name) => linkUnlessGone(join(path, name), join(dir, name))))
    } else {
      await store.quiesce(async (path) => {
        positions = store.positions()
        states = store.recordedStates()
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
      stallMs = performance.now() - started
    }
  } catch (err) {
    await discard(dir)
    if (isTidemarkError(err, 'TIDEMARK_STORE_CLOSED') || isTidemarkError(err, 'TIDEMARK_STORE_OPEN_FAILED')) throw err
    throw new TidemarkError('TIDEMARK_SNAPSHOT_CHECKPOINT_FAILED', `checkpoint of ${store.path} failed: ${(err as Error)?.message}`, { cause: err, details: { path: store.path } })
  }
  try {
    return { dir, positions, states, ...(lineage === undefined ? {} : { lineage }), stallMs, ...(await pruneToLiveSet(dir, manifestFromCurrent(current), open)) }
  } catch (err) {
    await discard(dir)
    if (open) return 'again'
    throw new TidemarkError('TIDEMARK_SNAPSHOT_CHECKPOINT_FAILED', `checkpoint of ${store.path} is incomplete: ${(err as Error)?.message}`, { cause: err, details: { path: store.path } })
  }
}

async function discard(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true }).catch(() => undefined)
}

/** Hard-links a file; false when it is gone (LevelDB deleted it meanwhile). */
async function linkUnlessGone(from: string, to: string): Promise<boolean> {
  try {
    await link(from, to)
    return true
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false
    throw err
  }
}

/** Writes `data` as a new file (a full disk fails it as any write). */
async function writeWhole(path: string, data: Uint8Array): Promise<void> {
  const file = await open(path, 'wx')
  try {
    for (let at = 0; at < data.byteLength;) at += (await file.write(data, at, data.byteLength - at, at)).bytesWritten
  } finally {
    await file.close()
  }
}

/** Copies the first `size` bytes of `from` (which may go on growing) into a new file `to`. */
async function copyPrefix(from: string, to: string, size: number): Promise<void> {
  const source = await open(from, 'r')
  try {
    const target = await open(to, 'wx')
    try {
      const chunk = Buffer.allocUnsafe(Math.min(size, 1024 * 1024))
      for (let at = 0; at < size;) {
        const { bytesRead } = await source.read(chunk, 0, Math.min(chunk.byteLength, size - at), at)
        if (bytesRead === 0) throw new Error(`${from} is shorter than the ${size} bytes it had`)
        for (let done = 0; done < bytesRead;) done += (await target.write(chunk, done, bytesRead - done, at + done)).bytesWritten
        at += bytesRead
      }
    } finally {
      await target.close()
    }
  } finally {
    await source.close()
  }
}

async function readPrefix(path: string, size: number): Promise<Buffer> {
  const file = await open(path, 'r')
  try {
    const data = Buffer.alloc(size)
    let at = 0
    while (at < size) {
      const { bytesRead } = await file.read(data, at, size - at, at)
      if (bytesRead === 0) throw new Error(`${path} is shorter than the ${size} bytes it had`)
      at += bytesRead
    }
    return data
  } finally {
    await file.close()
  }
}

/**
 * Drops what the MANIFEST does not name and describes the rest. With
 * `requireLiveSet` (a checkpoint of an open store, whose directory may hold
 * table files still being written) a MANIFEST that cannot be read fails it.
 */
async function pruneToLiveSet(dir: string, manifest: string, requireLiveSet: boolean): Promise<{ files: CheckpointFile[]; liveSetUnknown?: string }> {
  let liveSetUnknown: string | undefined
  let live: ReturnType<typeof parseLevelDbManifest> | undefined
  try {
    live = parseLevelDbManifest(await readFile(join(dir, manifest)))
  } catch (err) {
    if (requireLiveSet) throw err
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
