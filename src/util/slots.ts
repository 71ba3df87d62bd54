/**
 * A fixed number of slots, handed to waiters first come, first served: a
 * release passes its slot straight to the oldest waiter, so a burst of new
 * callers cannot overtake one that waits. Only callers of run() with
 * `ahead` go before the others (first come, first served among themselves).
 */
export class Slots {
  readonly limit: number
  #active = 0
  readonly #waiting: Array<() => void> = []
  /** Callers that wait before #waiting (run's `ahead`), in their own order. */
  readonly #ahead: Array<() => void> = []

  constructor(limit: number) {
    this.limit = limit
  }

  /** Slots held now. */
  get active(): number {
    return this.#active
  }

  /** Callers waiting for a slot. */
  get waiting(): number {
    return this.#waiting.length + this.#ahead.length
  }

  /** Waits for a slot; the returned function gives it back (once, however often it is called). */
  async acquire(): Promise<() => void> {
    await this.#take()
    let held = true
    return () => {
      if (!held) return
      held = false
      this.#release()
    }
  }

  /**
   * Runs `fn` in a slot, given back when it settles (no release function
   * made: it runs on commit paths). `ahead`: it waits before every caller
   * waiting without it (the fetcher's batches of a partition that started
   * during a round, ahead of the round's).
   */
  async run<T>(fn: () => Promise<T>, ahead = false): Promise<T> {
    await this.#take(ahead)
    try {
      return await fn()
    } finally {
      this.#release()
    }
  }

  #take(ahead = false): Promise<void> | undefined {
    if (this.#active < this.limit) {
      this.#active++
      return undefined
    }
    // The releasing holder passes its slot on without lowering #active.
    return new Promise<void>((resolve) => (ahead ? this.#ahead : this.#waiting).push(resolve))
  }

  #release(): void {
    const next = this.#ahead.shift() ?? this.#waiting.shift()
    if (next !== undefined) next()
    else this.#active--
  }
}
