// A FollowerClock that only moves when a test moves it: timers fire in
// advance(), in the order they were set.
import type { FollowerClock } from '../../src/index.js'

export class ManualClock implements FollowerClock {
  #now = 0
  #next = 1
  readonly #timers = new Map<number, { at: number; fn: () => void }>()
  get pending(): number {
    return this.#timers.size
  }
  now(): number {
    return this.#now
  }
  setTimeout(fn: () => void, ms: number): unknown { // ok: the manual clock's timer, moved by the test
    const id = this.#next++
    this.#timers.set(id, { at: this.#now + ms, fn })
    return id
  }
  clearTimeout(handle: unknown): void {
    this.#timers.delete(handle as number)
  }
  advance(ms: number): void {
    this.#now += ms
    for (const [id, t] of [...this.#timers]) {
      if (t.at > this.#now) continue
      this.#timers.delete(id)
      t.fn()
    }
  }
}

/** Resolves once `check` holds, looking again at each turn of the event loop (no timers). */
export async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 100_000; i++) {
    if (check()) return
    await new Promise((resolve) => setImmediate(resolve))
  }
  throw new Error('the awaited condition did not come')
}
