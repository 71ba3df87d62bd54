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
    await this.#take()
    let held = true
    return () => {
      if (!held) return
      held = false
      this.#release()
    }
  }

  /** Runs `fn` in a slot, given back when it settles (no release function made: it runs on commit paths). */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    await this.#take()
    try {
      return await fn()
    } finally {
      this.#release()
    }
  }

  #take(): Promise<void> | undefined {
    if (this.#active < this.limit) {
      this.#active++
      return undefined
    }
    // The releasing holder passes its slot on without lowering #active.
    return new Promise<void>((resolve) => this.#waiting.push(resolve))
  }

  #release(): void {
    const next = this.#waiting.shift()
    if (next !== undefined) next()
    else this.#active--
  }
}
