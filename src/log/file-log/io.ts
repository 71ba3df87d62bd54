import type { FileHandle } from 'node:fs/promises'
import { TidemarkError } from '../../errors.js'

/** Runs file-system work, reporting its failures as TIDEMARK_LOG_UNAVAILABLE. */
export async function io<T>(op: string, where: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work()
  } catch (err) {
    if (err instanceof TidemarkError || err instanceof TypeError || err instanceof RangeError) throw err
    throw ioError(err, op, where)
  }
}

/** write(2) may write less than asked (interrupted, or a nearly full disk); the rest goes after it. */
export async function writeAll(file: FileHandle, buffer: Buffer, pos: number): Promise<void> {
  for (let done = 0; done < buffer.length; ) {
    const { bytesWritten } = await file.write(buffer, done, buffer.length - done, pos + done)
    if (bytesWritten === 0) throw new Error(`wrote 0 of ${buffer.length - done} bytes at position ${pos + done}`)
    done += bytesWritten
  }
}


export function corrupt(dir: string, revision: bigint, problem: string, path?: string, position?: number): TidemarkError {
  return new TidemarkError('TIDEMARK_LOG_CORRUPT', `the file log at ${dir} is corrupt at revision ${revision}: ${problem}`, {
    details: { revision, path, position },
  })
}

export function truncated(dir: string, from: bigint, oldest: bigint, cause?: unknown): TidemarkError {
  return new TidemarkError('TIDEMARK_LOG_TRUNCATED', `revision ${from} was truncated from the log at ${dir}; it now starts at ${oldest}`, {
    cause,
    details: { from, oldest },
  })
}

const PERMANENT_ERRNOS = new Set(['EACCES', 'EPERM', 'ENOTDIR', 'EISDIR', 'EROFS', 'ENAMETOOLONG', 'ELOOP'])

export function ioError(err: unknown, op: string, where: string): TidemarkError {
  const code = (err as NodeJS.ErrnoException)?.code
  return new TidemarkError('TIDEMARK_LOG_UNAVAILABLE', `${op} failed on the file log at ${where}: ${(err as Error)?.message ?? err}`, {
    cause: err,
    retriable: code === undefined || !PERMANENT_ERRNOS.has(code),
    details: { op, path: where, errno: code },
  })
}
