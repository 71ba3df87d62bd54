/**
 * A snapshot store that counts the requests it passes to the real one, by
 * the kind S3 bills: PUT-class (PUT, multipart, COPY, POST: DeleteObjects,
 * LIST) and GET-class (GET, HEAD). Shared by `npm run bench -- requests` and
 * test/snapshot/request-cost.test.ts.
 *
 * Counting is per API call, which is one request on S3, with two
 * exceptions counted as S3 sends them: a listing costs one LIST per page of
 * 1,000 keys, a deleteMany one DeleteObjects per 1,000 keys. A multipart
 * upload is counted as one PUT (S3 bills its create, each part and its
 * complete: a data object above the S3 store's partSize costs more).
 */
import type { Readable } from 'node:stream'
import type { GetOptions, ListOptions, ObjectInfo, PutOptions, PutResult, SnapshotStore, SnapshotStoreCapabilities } from '../src/snapshot-store/snapshot-store.js'

export interface RequestCounts {
  put: number
  get: number
  head: number
  list: number
  delete: number
}

const PAGE = 1000

export function zeroCounts(): RequestCounts {
  return { put: 0, get: 0, head: 0, list: 0, delete: 0 }
}

/** PUT-class requests: what S3 bills at the PUT rate (LIST and DeleteObjects included). */
export function putClass(c: RequestCounts): number {
  return c.put + c.list + c.delete
}

/** GET-class requests: GET and HEAD. */
export function getClass(c: RequestCounts): number {
  return c.get + c.head
}

export function diffCounts(after: RequestCounts, before: RequestCounts): RequestCounts {
  return { put: after.put - before.put, get: after.get - before.get, head: after.head - before.head, list: after.list - before.list, delete: after.delete - before.delete }
}

export class CountingStore implements SnapshotStore {
  readonly inner: SnapshotStore
  readonly counts: RequestCounts = zeroCounts()
  /** Every request in order, `kind key`, for tests that say what was asked for. */
  readonly log: string[] = []

  constructor(inner: SnapshotStore) {
    this.inner = inner
  }

  get url(): string {
    return this.inner.url
  }

  get capabilities(): SnapshotStoreCapabilities {
    return this.inner.capabilities
  }

  /** The counts so far (a copy). */
  snapshot(): RequestCounts {
    return { ...this.counts }
  }

  put(key: string, body: Readable | Uint8Array, options?: PutOptions): Promise<PutResult> {
    this.#count('put', key)
    return this.inner.put(key, body, options)
  }

  get(key: string, options?: GetOptions): Promise<Readable> {
    this.#count('get', key)
    return this.inner.get(key, options)
  }

  head(key: string): Promise<ObjectInfo | undefined> {
    this.#count('head', key)
    return this.inner.head(key)
  }

  list(prefix: string, options?: ListOptions): AsyncIterable<ObjectInfo> {
    const inner = this.inner.list(prefix, options)
    const count = (key: string): void => this.#count('list', key)
    return {
      async *[Symbol.asyncIterator]() {
        count(prefix)
        let n = 0
        for await (const info of inner) {
          if (n > 0 && n % PAGE === 0) count(prefix)
          n++
          yield info
        }
      },
    }
  }

  async deleteMany(keys: readonly string[]): Promise<void> {
    for (let i = 0; i < keys.length; i += PAGE) this.#count('delete', keys[i]!)
    return this.inner.deleteMany(keys)
  }

  sweepTemporaryFiles(prefix: string): Promise<number> {
    return this.inner.sweepTemporaryFiles?.(prefix) ?? Promise.resolve(0)
  }

  close(): Promise<void> {
    return this.inner.close()
  }

  #count(kind: keyof RequestCounts, key: string): void {
    this.counts[kind]++
    this.log.push(`${kind} ${key}`)
  }
}
