import { createHash, randomBytes } from 'node:crypto'
import { Readable } from 'node:stream'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'

/** Reads a stream to its end. */
export async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

export async function sha256(stream: Readable): Promise<string> {
  const hash = createHash('sha256')
  for await (const chunk of stream) hash.update(chunk as Buffer)
  return hash.digest('hex')
}

/** A stream of `size` random bytes in odd-sized chunks, and the sha256 of what it produced. */
export function randomStream(size: number): { stream: Readable; digest: () => string; size: number } {
  const hash = createHash('sha256')
  let left = size
  const stream = Readable.from((async function* () {
    while (left > 0) {
      const chunk = randomBytes(Math.min(left, 65_537))
      left -= chunk.length
      hash.update(chunk)
      yield chunk
    }
  })())
  return { stream, digest: () => hash.digest('hex'), size }
}

export function* chunksOf(data: Buffer, size: number): Generator<Buffer> {
  for (let i = 0; i < data.length; i += size) yield data.subarray(i, i + size)
}

/** The keys a store lists under `prefix`. */
export async function listKeys(store: SnapshotStore, prefix: string, options?: { startAfter?: string; limit?: number }): Promise<string[]> {
  return (await collect(store.list(prefix, options))).map((info) => info.key)
}

export async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const items: T[] = []
  for await (const item of iterable) items.push(item)
  return items
}
