/**
 * A fixed number of slots, handed to waiters first come, first served: a
 * release passes its slot straight to the oldest waiter, so a burst of new
 * callers cannot overtake one that waits.
 */
export class Slots {
  readonly limit: number
  #active = 0
  readonly #waiting: Array<() => void> = []

  constructor(limit: number) {
    this.limit = limit
  }

  /** Slots held now. */
  get active(): number {
    return this.#active
  }

  /** Callers waiting for a slot. */
  get waiting(): number {
    return this.#waiting.length
  }

  /** Waits for a slot; the returned function gives it back (once, however often it is called). */
  async acquire(): Promise<() => void> {
    if (this.#active < this.limit) {
      this.#active++
    } else {
      // The releasing holder passes its slot on without lowering #active.
      await new Promise<void>((resolve) => this.#waiting.push(resolve))
    }
    let held = true
    return () => {
      if (!held) return
      held = false
      const next = this.#waiting.shift()
      if (next !== undefined) next()
      else this.#active--
    }
  }

  /** Runs `fn` in a slot, given back when it settles. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    const release = await this.acquire()
    try {
      return await fn()
    } finally {
      release()
    }
  }
}
