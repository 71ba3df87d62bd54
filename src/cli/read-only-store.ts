/**
 * Opens a partition store for reading without writing a byte into its
 * directory. LevelDB has no read-only mode: every open takes the LOCK,
 * rotates LOG and writes a new MANIFEST and log file, even with create:
 * false. So the commands that only read (positions, state) open a copy in a
 * temporary directory: table files (immutable) are hard-linked where the
 * file system allows it and copied otherwise, the small mutable files are
 * copied. The copy also works while the owner's process holds the store's
 * LOCK (a torn last log record is dropped by LevelDB's recovery, as after a
 * crash); a compaction that deletes a table file during the copy fails the
 * read, and running it again reads the new files.
 */
import { copyFile, link, mkdir, readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { TidemarkError } from '../errors.js'
import { PartitionStore } from '../store/partition-store.js'
import type { StateDefinition } from '../store/state.js'
import { errnoOf, inspectStoreDir } from '../store/store-dir.js'
import { withTempDir } from './cleanup.js'

/** Files of a store that a reader's copy leaves out: LevelDB's lock and its text log. */
const NOT_COPIED = new Set(['LOCK', 'LOG', 'LOG.old'])
const TABLE = /^\d+\.(?:ldb|sst)$/

export async function withReadOnlyStore<T>(path: string, fn: (store: PartitionStore) => Promise<T>): Promise<T> {
  let dir
  try {
    dir = await inspectStoreDir(path)
  } catch (err) {
    throw new TidemarkError('TIDEMARK_STORE_OPEN_FAILED', `cannot open partition store ${path}: ${(err as Error).message}`, { cause: err })
  }
  const complete = (dir.kind === 'marked' && dir.names.includes('CURRENT')) || dir.kind === 'legacy'
  if (!complete) {
    // Absent, empty, foreign, or never completely created: open() with
    // create: false refuses each of them before LevelDB touches anything,
    // with the error that says which.
    const store = await PartitionStore.open({ path, create: false })
    await store.close()
    throw new TidemarkError('TIDEMARK_STORE_OPEN_FAILED', `partition store ${path} opened, though it looked incomplete`)
  }
  return withTempDir('tidemark-read-', async (temp) => {
    const copy = join(temp, 'store')
    await copyStore(path, copy)
    try {
      return await withOpenStore(copy, undefined, fn)
    } catch (err) {
      throw namingOriginal(err, copy, path)
    }
  })
}

/**
 * An error about the copy, told about the user's store: the temporary
 * directory means nothing to the user and is gone once the command ends
 * (`state get DIR k --state nostate` named it). Code, retriable and cause
 * stay; the message and the string details name `original`.
 */
function namingOriginal(err: unknown, copy: string, original: string): unknown {
  if (!(err instanceof TidemarkError) || !err.message.includes(copy)) return err
  const details = Object.fromEntries(Object.entries(err.details).map(([k, v]) => [k, typeof v === 'string' ? v.replaceAll(copy, original) : v]))
  return new TidemarkError(err.code, err.message.replaceAll(copy, original), { cause: err, details, retriable: err.retriable })
}

async function copyStore(from: string, to: string): Promise<void> {
  await mkdir(to)
  for (const name of await readdir(from)) {
    if (NOT_COPIED.has(name)) continue
    const source = join(from, name)
    const target = join(to, name)
    try {
      if (TABLE.test(name)) {
        try {
          await link(source, target)
          continue
        } catch (err) {
          // Another file system (EXDEV) or one without hard links: copy it.
          if (errnoOf(err) === 'ENOENT') throw err
        }
      }
      await copyFile(source, target)
    } catch (err) {
      if (errnoOf(err) === 'ENOENT') {
        throw new TidemarkError('TIDEMARK_STORE_OPEN_FAILED', `partition store ${from} changed while it was read (${name} went away: a compaction of a running store); run the command again`, { cause: err, details: { path: from } })
      }
      throw new TidemarkError('TIDEMARK_STORE_OPEN_FAILED', `cannot read partition store ${from}: ${(err as Error).message}`, { cause: err, details: { path: from } })
    }
  }
}

/** Opens an existing store (never creating one), runs `fn` on it and closes it, whatever `fn` does. */
export async function withOpenStore<T>(path: string, states: readonly StateDefinition[] | undefined, fn: (store: PartitionStore) => Promise<T>): Promise<T> {
  const store = await PartitionStore.open({ path, create: false, ...(states === undefined ? {} : { states }) })
  try {
    return await fn(store)
  } finally {
    await store.close()
  }
}
