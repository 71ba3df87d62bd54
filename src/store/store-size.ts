import { readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { STATE_FILE_NAME } from './store-dir.js'

/**
 * Bytes of a partition store's state on disk: the sum of its directory's
 * state files, the measure a snapshot's `bytesTotal` takes of its copy.
 * Read from the file system, not through LevelDB: it costs a directory
 * listing and a stat per file, and never opens a store the budget closed
 * while idle (its files are what it holds). A file that LevelDB deletes
 * meanwhile (a compaction's input) counts as nothing; a directory that is
 * gone is undefined.
 */
export async function storeStateBytes(path: string): Promise<number | undefined> {
  let names: string[]
  try {
    names = await readdir(path)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
  const sizes = await Promise.all(names.filter((n) => STATE_FILE_NAME.test(n)).map((n) => stat(join(path, n)).then((s) => s.size, (err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return 0
    throw err
  })))
  return sizes.reduce((sum, size) => sum + size, 0)
}
