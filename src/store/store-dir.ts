import { mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { ClassicLevel } from 'classic-level'
import { TidemarkError } from '../errors.js'
import { describeValue } from '../util/describe-value.js'

/** utf8 by default: see PartitionStore for why. */
type Level = ClassicLevel<string, string>

/** What a LevelDB is opened with: a store's share of its budget, or its explicit sizes. */
export interface LevelOptions {
  cacheSize: number
  writeBufferSize: number
  maxOpenFiles: number
  maxFileSize: number
}

/**
 * What a directory that Tidemark may open, fill or delete holds, and the
 * opening of a partition store's LevelDB in one (openStoreDir).
 *
 * Tidemark deletes only what it can prove it made. The proof is a marker
 * file that it writes into every partition store it creates, every store it
 * restores and every checkpoint directory: a directory without it is never
 * removed, whatever LevelDB-like names (LOG, CURRENT, *.log) it holds. The
 * one exception is a store of an earlier version, which had no marker: a
 * directory that holds nothing but LevelDB's own files and a CURRENT naming
 * one of its MANIFESTs is taken for one, and gets the marker when it opens.
 */
export const STORE_MARKER = 'TIDEMARK-STORE'
export const STORE_MARKER_FORMAT = 1

export type MarkerKind = 'store' | 'checkpoint'

export interface StoreMarker {
  format: number
  kind: MarkerKind
  createdAt: string
}

/** The names LevelDB gives its own files (classic-level writes no others). */
const LEVELDB_NAME = /^(?:CURRENT|LOCK|LOG|LOG\.old|MANIFEST-\d+|\d+\.(?:log|ldb|sst|dbtmp))$/
/** Table files: a directory with these holds data, whether or not its CURRENT survived. */
const TABLE_NAME = /^\d+\.(?:ldb|sst)$/
/**
 * The files that hold a store's state: tables, write-ahead logs, MANIFEST
 * and CURRENT. What a snapshot may contain (src/snapshot/leveldb-files.ts)
 * and what a store's size counts (store-size.ts); LevelDB's LOCK and info
 * LOG, and Tidemark's marker, hold none of it.
 */
export const STATE_FILE_NAME = /^(?:CURRENT|MANIFEST-\d{1,20}|\d{1,20}\.(?:ldb|sst|log))$/

export type StoreDir =
  | { kind: 'absent' }
  | { kind: 'empty'; dev: number; ino: number }
  /** Holds the marker: Tidemark made it. */
  | { kind: 'marked'; names: string[]; dev: number; ino: number }
  /** Only LevelDB's files and a valid CURRENT: a store of a version before the marker. */
  | { kind: 'legacy'; names: string[]; dev: number; ino: number }
  /** Anything else: not Tidemark's, never to be changed. */
  | { kind: 'foreign'; reason: string }

/**
 * Looks at `path` without changing anything. Fails only on errors other than
 * "does not exist" and "is not a directory" (EACCES, EIO), which the caller
 * reports in its own terms.
 */
export async function inspectStoreDir(path: string): Promise<StoreDir> {
  let info
  try {
    info = await stat(path)
  } catch (err) {
    const code = errnoOf(err)
    if (code === 'ENOENT') return { kind: 'absent' }
    if (code === 'ENOTDIR') return { kind: 'foreign', reason: 'a part of the path is a file, not a directory' }
    throw err
  }
  if (!info.isDirectory()) return { kind: 'foreign', reason: 'it is not a directory' }
  const { dev, ino } = info
  const names = await readdir(path)
  if (names.length === 0) return { kind: 'empty', dev, ino }
  if (names.includes(STORE_MARKER)) return { kind: 'marked', names, dev, ino }
  const others = strangerNames(names)
  if (others.length > 0) {
    const shown = others.slice(0, 3).map((n) => JSON.stringify(n)).join(', ')
    return { kind: 'foreign', reason: `it holds files that are not a partition store's (${shown}${others.length > 3 ? `, and ${others.length - 3} more` : ''}) and no ${STORE_MARKER} marker` }
  }
  const manifest = await readCurrent(path)
  if (manifest === undefined || !names.includes(manifest)) {
    return { kind: 'foreign', reason: `it holds LevelDB files but no ${STORE_MARKER} marker and no CURRENT naming one of its MANIFESTs, so it cannot be told from a damaged or foreign database` }
  }
  return { kind: 'legacy', names, dev, ino }
}

/** Names in a store directory that neither LevelDB nor Tidemark made: a user's files, never to be deleted. */
export function strangerNames(names: readonly string[]): string[] {
  return names.filter((n) => n !== STORE_MARKER && !LEVELDB_NAME.test(n))
}

/** Whether a directory's names include table files: it held data, and a missing CURRENT means damage, not a new store. */
export function hasTables(names: readonly string[]): boolean {
  return names.some((n) => TABLE_NAME.test(n))
}

/** Writes the marker into `dir`. `sync` flushes it: a store's marker must outlive a machine crash. */
export async function writeMarker(dir: string, kind: MarkerKind, sync = false): Promise<void> {
  const marker: StoreMarker = { format: STORE_MARKER_FORMAT, kind, createdAt: new Date().toISOString() }
  await writeFile(join(dir, STORE_MARKER), `${JSON.stringify(marker)}\n`, { flush: sync })
}

/** The marker of `dir`, or undefined when it has none or one that does not parse. */
export async function readMarker(dir: string): Promise<StoreMarker | undefined> {
  try {
    const value = JSON.parse(await readFile(join(dir, STORE_MARKER), 'utf8')) as Partial<StoreMarker>
    if (typeof value.format === 'number' && (value.kind === 'store' || value.kind === 'checkpoint')) return value as StoreMarker
  } catch {
    // absent, unreadable or torn: not a proof
  }
  return undefined
}

/**
 * mkdir -p. Not fs.mkdir({ recursive: true }): under /proc mkdir fails with
 * ENOENT although the parent exists, and Node's recursive mkdir retries that
 * forever. Here a second ENOENT after the parent was made is final.
 */
export async function makeDirectory(path: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await mkdir(path)
      return
    } catch (err) {
      const code = errnoOf(err)
      if (code === 'EEXIST') {
        if ((await stat(path)).isDirectory()) return
        throw err
      }
      const parent = dirname(path)
      if (code !== 'ENOENT' || attempt > 0 || parent === path) throw err
      await makeDirectory(parent)
    }
  }
}

async function readCurrent(dir: string): Promise<string | undefined> {
  try {
    const text = await readFile(join(dir, 'CURRENT'), 'utf8')
    const name = text.trim()
    return text.endsWith('\n') && /^MANIFEST-\d+$/.test(name) ? name : undefined
  } catch {
    return undefined
  }
}

export function errnoOf(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code
}

/**
 * Opens the store at `path` after checking what is there (see store-dir.ts):
 * only an absent path or an empty directory becomes a new store, and only
 * with `create`; a directory Tidemark cannot tell for a store is refused
 * before LevelDB touches it.
 */
export async function openStoreDir(path: string, options: LevelOptions, create: boolean): Promise<Level> {
  let dir: StoreDir
  try {
    dir = await inspectStoreDir(path)
  } catch (err) {
    throw new TidemarkError('TIDEMARK_STORE_OPEN_FAILED', `cannot open partition store ${path}: ${(err as Error).message}`, { cause: err })
  }
  switch (dir.kind) {
    case 'foreign':
      throw new TidemarkError('TIDEMARK_STORE_NOT_A_STORE', `${path} is not a partition store: ${dir.reason}; it was left as it is`, { details: { path } })
    case 'absent':
    case 'empty': {
      if (!create) {
        throw new TidemarkError('TIDEMARK_STORE_NOT_FOUND', `there is no partition store at ${path}: ${dir.kind === 'absent' ? 'the path does not exist' : 'it is an empty directory'}`, { details: { path } })
      }
      try {
        if (dir.kind === 'absent') await makeDirectory(path)
        // Something other than a Tidemark store may have appeared since the look.
        const names = await readdir(path)
        if (names.length > 0 && !names.includes(STORE_MARKER)) {
          throw new TidemarkError('TIDEMARK_STORE_NOT_A_STORE', `${path} is not a partition store: files appeared in it while the store was being created; they were left as they are`, { details: { path } })
        }
        // The marker first: whatever a crash leaves in the directory from
        // here on, it is provably Tidemark's.
        if (names.length === 0) await writeMarker(path, 'store', true)
      } catch (err) {
        if (err instanceof TidemarkError) throw err
        throw new TidemarkError('TIDEMARK_STORE_OPEN_FAILED', `cannot create partition store ${path}: ${(err as Error).message}`, { cause: err, details: { path, errno: errnoOf(err) } })
      }
      return openLevel(path, options, true)
    }
    case 'marked': {
      if (dir.names.includes('CURRENT')) return openLevel(path, options, false)
      // A marker without CURRENT: a creation that a crash interrupted, or a
      // store that lost its CURRENT. Only the first may start afresh.
      if (hasTables(dir.names)) {
        throw new TidemarkError('TIDEMARK_STORE_OPEN_FAILED', `partition store ${path} is damaged: it has table files but no CURRENT; restore it from a snapshot`, { details: { path } })
      }
      if (!create) throw new TidemarkError('TIDEMARK_STORE_NOT_FOUND', `there is no partition store at ${path}: it was never completely created`, { details: { path } })
      return openLevel(path, options, true)
    }
    case 'legacy': {
      // A store of a version before the marker; from now on it carries one.
      const db = await openLevel(path, options, false)
      try {
        await writeMarker(path, 'store', true)
      } catch (err) {
        await db.close()
        throw new TidemarkError('TIDEMARK_STORE_OPEN_FAILED', `cannot write the ${STORE_MARKER} marker into partition store ${path}: ${(err as Error).message}`, { cause: err, details: { path } })
      }
      return db
    }
  }
}

/** The error underneath abstract-level's "Database is not open" and our own wrapping. */
export function levelCause(err: unknown): unknown {
  let e = err
  while ((e instanceof TidemarkError || (e as { code?: string } | undefined)?.code === 'LEVEL_DATABASE_NOT_OPEN') && (e as Error).cause !== undefined) e = (e as Error).cause
  return e
}

export async function openLevel(path: string, options: LevelOptions, createIfMissing: boolean): Promise<Level> {
  const db = new ClassicLevel<string, string>(path, { keyEncoding: 'utf8', valueEncoding: 'utf8' })
  try {
    await db.open({ createIfMissing, cacheSize: options.cacheSize, writeBufferSize: options.writeBufferSize, maxOpenFiles: options.maxOpenFiles, maxFileSize: options.maxFileSize })
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause
    if (cause?.code === 'LEVEL_LOCKED') {
      throw new TidemarkError('TIDEMARK_STORE_LOCKED', `partition store ${path} is already open in this or another process`, { cause: err })
    }
    throw new TidemarkError('TIDEMARK_STORE_OPEN_FAILED', `cannot open partition store ${path}: ${(cause as Error | undefined)?.message ?? (err as Error).message}`, { cause: err })
  }
  return db
}

const LEVELDB_PROPERTY = /^leveldb\.(num-files-at-level[0-6]|stats|sstables|approximate-memory-usage)$/

/** The names PartitionStore.leveldbProperty() takes: LevelDB's figures that say something about one store. */
export function checkLeveldbProperty(name: unknown): asserts name is string {
  if (typeof name !== 'string' || !LEVELDB_PROPERTY.test(name)) {
    throw new RangeError(`leveldbProperty(name): name must be leveldb.num-files-at-level0 to 6, leveldb.stats, leveldb.sstables or leveldb.approximate-memory-usage, got ${describeValue(name)}`)
  }
}
