/**
 * Progress of a restore (bytes downloaded), a replay (events applied after a
 * restore) or a catch-up of live processing, with an estimate of the time
 * left from the rate so far. Emitted at most every `intervalMs` and once at
 * the end, so a CLI or a metrics exporter can subscribe without flooding.
 */
export interface Progress {
  phase: 'restore' | 'replay' | 'process'
  unit: 'bytes' | 'events'
  done: number
  total: number
  elapsedMs: number
  /** Estimated time left; undefined until there is a rate to go by. */
  etaMs: number | undefined
  /** The last report of this phase. */
  final: boolean
}

export class ProgressMeter {
  readonly #phase: Progress['phase']
  readonly #emit: (p: Progress) => void
  readonly #intervalMs: number
  readonly #start = performance.now()
  #last = -Infinity
  #done = 0
  #total = 0

  constructor(phase: Progress['phase'], emit: (p: Progress) => void, intervalMs = 250) {
    this.#phase = phase
    this.#emit = emit
    this.#intervalMs = intervalMs
  }

  update(done: number, total: number): void {
    this.#done = done
    this.#total = total
    const now = performance.now()
    if (now - this.#last < this.#intervalMs) return
    this.#last = now
    this.#emit(this.#report(now, false))
  }

  finish(): void {
    this.#emit(this.#report(performance.now(), true))
  }

  #report(now: number, final: boolean): Progress {
    const elapsedMs = now - this.#start
    const rate = this.#done / elapsedMs
    const etaMs = final ? 0 : rate > 0 ? Math.max(0, (this.#total - this.#done) / rate) : undefined
    return { phase: this.#phase, unit: this.#phase === 'restore' ? 'bytes' : 'events', done: this.#done, total: this.#total, elapsedMs, etaMs, final }
  }
}
