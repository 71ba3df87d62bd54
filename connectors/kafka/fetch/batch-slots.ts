/**
 * At most `limit` batches handled at once, over every fetch loop of a
 * member. A batch of a partition that was fetched on its own (it started or
 * resumed while its broker's round was handled) waits ahead of the round's
 * batches: in the order they came among themselves, before every batch of a
 * round that waits.
 */
export class BatchSlots {
  readonly #limit: number
  #active = 0
  readonly #ahead: Array<() => void> = []
  readonly #behind: Array<() => void> = []

  constructor(limit: number) {
    this.#limit = limit
  }

  async run<T>(fn: () => Promise<T>, ahead: boolean): Promise<T> {
    if (this.#active < this.#limit) this.#active++
    // The releasing batch passes its slot on without lowering #active.
    else await new Promise<void>((resolve) => (ahead ? this.#ahead : this.#behind).push(resolve))
    try {
      return await fn()
    } finally {
      const next = this.#ahead.shift() ?? this.#behind.shift()
      if (next !== undefined) next()
      else this.#active--
    }
  }
}
