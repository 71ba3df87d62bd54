import { createHash } from 'node:crypto'
import fs, { createReadStream } from 'node:fs'
import { promisify } from 'node:util'

/**
 * Runs fn over items with at most `limit` calls in flight. After the first
 * failure no new call starts; the ones running are awaited (so no work is
 * left behind) and the first error is thrown.
 */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length)
  let next = 0
  let failure: { error: unknown } | undefined
  const worker = async (): Promise<void> => {
    while (failure === undefined && next < items.length) {
      const i = next++
      try {
        results[i] = await fn(items[i]!, i)
      } catch (error) {
        failure ??= { error }
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
  if (failure !== undefined) throw failure.error
  return results
}

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
