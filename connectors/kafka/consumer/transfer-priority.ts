import type { SnapshotStore } from '../../../src/snapshot-store/index.js'
import { pacedStore } from '../../../src/snapshot/index.js'

/**
 * Restores and hand-offs first, standby and warm-up syncs after them. A
 * member that takes partitions over restores them while its standby copies
 * of other partitions sync, and both download from the same store over the
 * same link: the moved partitions' restores took two to three times as long
 * while re-homed standbys downloaded (issue 39). A partition task enters
 * while it starts (claim, restore) and while it closes (hand-off snapshot);
 * the standbys' downloads wait until no task is in either, chunk by chunk.
 *
 * A standby copy of a partition that is itself being started here does not
 * wait: that start takes the copy over and waits for its sync in flight.
 */
export class TransferPriority {
  /** Partitions starting or closing here, with how many times each (a start may overlap the previous task's close). */
  readonly #active = new Map<string, number>()
  #idle: { promise: Promise<void>; resolve: () => void } | undefined

  /** A partition's start or close begins; the returned function ends it (once). */
  enter(key: string): () => void {
    this.#active.set(key, (this.#active.get(key) ?? 0) + 1)
    let left = false
    return () => {
      if (left) return
      left = true
      const n = this.#active.get(key)! - 1
      if (n > 0) this.#active.set(key, n)
      else this.#active.delete(key)
      this.#wake()
    }
  }

  /** Undefined when `key`'s standby may go on now, else a promise that settles when it may look again. */
  wait(key: string): Promise<void> | undefined {
    if (this.#active.size === 0 || this.#active.has(key)) return undefined
    if (this.#idle === undefined) {
      let resolve!: () => void
      const promise = new Promise<void>((r) => { resolve = r })
      this.#idle = { promise, resolve }
    }
    return this.#idle.promise
  }

  /** Whether any start or close runs. */
  get busy(): boolean {
    return this.#active.size > 0
  }

  #wake(): void {
    const idle = this.#idle
    this.#idle = undefined
    idle?.resolve()
  }

  /** `store` for the standby copy of `key`: each download starts, and goes on chunk by chunk, only while no other partition starts or closes. */
  yielding(store: SnapshotStore, key: string): SnapshotStore {
    return pacedStore(store, () => this.#pass(key))
  }

  /** Undefined when `key`'s standby may go on now, else a promise that settles once it may. */
  #pass(key: string): Promise<void> | undefined {
    const w = this.wait(key)
    return w === undefined ? undefined : w.then(() => this.#pass(key))
  }
}
