import { readdir } from 'node:fs/promises'
import { TidemarkError } from '../errors.js'
import { openFileLog, type FileLog } from './file-log/index.js'

/** A segment file's name: the 20-digit base revision. */
export const SEGMENT_NAME = /^\d{20}\.seg$/

/**
 * Refuses a path that holds no file log: a read-only open would read a
 * missing or foreign directory as an empty log, and a tool that reads a log
 * the user named (the tidemark command, a replay) must say it is not there
 * rather than report zero entries.
 */
export async function checkFileLogExists(dir: string): Promise<void> {
  let names: string[]
  try {
    names = await readdir(dir)
  } catch (err) {
    const errno = (err as NodeJS.ErrnoException).code
    if (errno !== 'ENOENT' && errno !== 'ENOTDIR') throw err
    throw new TidemarkError('TIDEMARK_LOG_NOT_FOUND', `no file log at ${dir}: ${errno === 'ENOENT' ? 'it does not exist' : 'it is not a directory'}`, { cause: err, details: { path: dir } })
  }
  if (!names.some((n) => SEGMENT_NAME.test(n))) {
    throw new TidemarkError('TIDEMARK_LOG_NOT_FOUND', `no file log at ${dir}: the directory holds no log segment (*.seg)`, { details: { path: dir } })
  }
}

/** Opens an existing file log read-only (no lock, nothing created); TIDEMARK_LOG_NOT_FOUND when there is none. */
export async function openLogForReading(dir: string): Promise<FileLog> {
  await checkFileLogExists(dir)
  return openFileLog(dir, { readOnly: true })
}
