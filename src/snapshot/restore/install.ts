import { randomBytes } from 'node:crypto'
import { readFile, rename, rm, rmdir, stat } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { isTidemarkError, TidemarkError } from '../../errors.js'
import { PartitionStore } from '../../store/partition-store.js'
import { readLineage } from '../../store/lineage.js'
import { errnoOf, inspectStoreDir, strangerNames, type StoreDir } from '../../store/store-dir.js'
import type { Position } from '../../store/position.js'
import { WRITER_THREAD_ERROR } from '../file-writer.js'
import { corrupt } from '../archive.js'
import { fileKind, fileNumber, manifestFromCurrent, parseLevelDbManifest, tableFileName } from '../leveldb-files.js'
import { positionsAtOrAfter, type SnapshotManifest } from '../manifest.js'
import { fsyncDir } from '../../util/index.js'
import type { RestoreEvent } from './types.js'

/** What is at the target; `dir` identifies an existing directory, so that a swap finds out when it was replaced meanwhile. */
export type LocalState =
  | { state: 'absent'; dir: Identity | undefined }
  /**
   * `store`: kept open for the caller (inspectLocal's `open`), to be closed
   * before anything replaces it. `lineage`: the store's (src/store/lineage.ts);
   * `otherLineage`: set by the restore when a snapshot's lineage differs.
   */
  | { state: 'intact'; positions: Position[]; lineage: string | undefined; dir: Identity; store?: PartitionStore; otherLineage?: true }
  | { state: 'damaged'; reason: string; dir: Identity }

interface Identity {
  dev: number
  ino: number
  /** Files in the store directory that neither LevelDB nor Tidemark made (a user's): the store may be used, never replaced. */
  strangers: string[]
}
/** The downloaded files must open as a LevelDB store at the manifest's positions. */
export async function checkRestoredStore(dir: string, manifest: SnapshotManifest): Promise<Position[]> {
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
export async function install(temp: string, target: string, local: LocalState, emit: (event: RestoreEvent) => void): Promise<void> {
  if (local.state === 'intact' || local.state === 'damaged') {
    const reason = local.state === 'damaged' ? local.reason : local.otherLineage === true ? 'the local store is of another lineage: an offline transform rewrote the state since' : 'the local store is behind the snapshot'
    emit({ type: 'local-store-replaced', reason })
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

export async function replaceWithEmpty(target: string, dir: Identity): Promise<void> {
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
export function localWriteFailed(err: unknown, target: string): unknown {
  const code = errnoOf(err)
  // The restore's writer thread failing (not an errno) is as local as a full disk.
  if (err instanceof TidemarkError || code === undefined || (code !== WRITER_THREAD_ERROR && !/^E[A-Z]+$/.test(code))) return err
  return new TidemarkError('TIDEMARK_RESTORE_WRITE_FAILED', `the restore into ${target} could not write its files (${code}): ${(err as Error).message}; nothing was installed and the target is as it was`, { cause: err, details: { target, errno: code } })
}

/** A store that holds a user's files is not Tidemark's alone to delete. */
export function assertReplaceable(target: string, dir: Identity): void {
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
 *
 * With `open`, an intact store is opened with it and kept open (the caller's
 * options: its states, its settings), so that a store used as it is opens
 * once; an error of `open` is thrown as it is instead of calling the store
 * damaged, since it may be the caller's options that do not fit.
 */
export async function inspectLocal(target: string, useLocal: boolean, open?: () => Promise<PartitionStore>): Promise<LocalState> {
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
  if (open !== undefined) {
    const store = await open()
    try {
      return { state: 'intact', positions: store.positions(), lineage: await readLineage(store), dir, store }
    } catch (err) {
      await store.close()
      throw err
    }
  }
  try {
    const store = await PartitionStore.open({ path: target, create: false })
    try {
      return { state: 'intact', positions: store.positions(), lineage: await readLineage(store), dir }
    } finally {
      await store.close()
    }
  } catch (err) {
    if (isTidemarkError(err, 'TIDEMARK_STORE_LOCKED')) throw err
    return damaged(`the local store does not open: ${(err as Error).message}`)
  }
}
