import { Readable } from 'node:stream'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'

/** Time as a SnapshotFollower sees it; tests pass their own to drive polling and the byte budget without waiting. */
export interface FollowerClock {
  /** Milliseconds; only differences are used. */
  now(): number
  setTimeout(fn: () => void, ms: number): unknown
  clearTimeout(handle: unknown): void
}

export const systemClock: FollowerClock = Object.freeze({
  now: () => performance.now(),
  setTimeout: (fn: () => void, ms: number): unknown => setTimeout(fn, ms),
  clearTimeout: (handle: unknown): void => clearTimeout(handle as ReturnType<typeof setTimeout>),
})

/**
 * A token bucket of bytes per second, one second deep, shared by a
 * follower's downloads. A chunk larger than what is left is let through
 * and paid for by waiting until the debt is repaid, so that a stream never
 * stalls on a chunk larger than the bucket. The store's TransferLimiter
 * bounds requests in flight, not bytes per second, so it cannot stand in.
 */
export class ByteRate {
  readonly bytesPerSecond: number
  readonly #clock: FollowerClock
  #tokens: number
  #last: number

  constructor(bytesPerSecond: number, clock: FollowerClock) {
    this.bytesPerSecond = bytesPerSecond
    this.#clock = clock
    this.#tokens = bytesPerSecond
    this.#last = clock.now()
  }

  async take(bytes: number): Promise<void> {
    const now = this.#clock.now()
    this.#tokens = Math.min(this.bytesPerSecond, this.#tokens + ((now - this.#last) * this.bytesPerSecond) / 1000)
    this.#last = now
    this.#tokens -= bytes
    if (this.#tokens >= 0) return
    const waitMs = (-this.#tokens * 1000) / this.bytesPerSecond
    await new Promise<void>((resolve) => this.#clock.setTimeout(resolve, waitMs))
  }
}

/**
 * The store as a follower's prefetch reads it: every get body is counted,
 * and paced by `rate` when there is one. The other calls go to the store
 * as they are.
 */
export function meteredStore(store: SnapshotStore, onBytes: (n: number) => void, rate: ByteRate | undefined): SnapshotStore {
  return pacedStore(store, (n) => {
    if (n === 0) return undefined
    onBytes(n)
    return rate?.take(n)
  })
}

/**
 * `store` with every get paced: `pace(0)` before the request, `pace(n)`
 * before a chunk of n bytes goes on, and each waits for what it returns
 * (undefined: go on at once). The other calls go to the store as they are.
 */
export function pacedStore(store: SnapshotStore, pace: (bytes: number) => Promise<void> | undefined): SnapshotStore {
  return {
    get url() { return store.url },
    get capabilities() { return store.capabilities },
    put: (key, body, options) => store.put(key, body, options),
    get: async (key, options) => {
      await pace(0)
      return paced(await store.get(key, options), pace)
    },
    head: (key) => store.head(key),
    list: (prefix, options) => store.list(prefix, options),
    deleteMany: (keys) => store.deleteMany(keys),
    close: () => store.close(),
  }
}

function paced(body: Readable, pace: (bytes: number) => Promise<void> | undefined): Readable {
  // Ending or destroying the returned stream ends the loop, which destroys
  // the body: the store's download slot is released either way.
  return Readable.from((async function* () {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      await pace(chunk.byteLength)
      yield chunk
    }
  })(), { objectMode: false })
}
