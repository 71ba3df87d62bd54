import { createHash } from 'node:crypto'
import fs, { createReadStream } from 'node:fs'
import { open } from 'node:fs/promises'
import { promisify } from 'node:util'

export async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256')
  for await (const chunk of createReadStream(path, { highWaterMark: 1024 * 1024 }) as AsyncIterable<Buffer>) hash.update(chunk)
  return hash.digest('hex')
}

/**
 * Descriptor calls through the callback API, which costs the event loop less
 * than FileHandle: written snapshot files are handed from the archive reader
 * to the restore's fsync queue as plain descriptors.
 */
export const fdClose = promisify(fs.close)
export const fdSync = promisify(fs.fsync)
export const fdOpen = promisify(fs.open)

/** fsyncs a descriptor and closes it, also when the fsync fails. */
export async function fsyncAndClose(fd: number): Promise<void> {
  try {
    await fdSync(fd)
  } finally {
    await fdClose(fd)
  }
}

/**
 * fsync a directory, so the entries just created or renamed in it survive a
 * crash. Some network and FUSE file systems refuse fsync on a directory
 * (EINVAL, ENOTSUP); their rename and link are durable when they return.
 */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r')
  try {
    await handle.sync()
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code !== 'EINVAL' && code !== 'ENOTSUP') throw err
  } finally {
    await handle.close()
  }
}
