import { callListener } from '../logging/listener.js'
import { SCHEDULER_DEFAULTS } from '../snapshot/options.js'
import type { SnapshotResult } from '../snapshot/snapshotter-types.js'

export interface ProgressSnapshotsOptions {
  /** Takes a snapshot of everything committed (the processor's snapshot()); undefined when it failed. */
  take: () => Promise<SnapshotResult | undefined>
  onTaken: (result: SnapshotResult) => void
  intervalMs: number
  everyEvents: number
}

/**
 * The replay's progress snapshots (`checkpoints`), started here after a
 * commit instead of by the processor's own schedule, so that the replay
 * knows when none is in flight: the final snapshot must be taken after
 * every record was delivered, and no snapshot may start before it with
 * records still in the outbox. Such a snapshot is at `to` as well, so a
 * later call restored from it would deliver those records again.
 *
 * Due as the processor's schedule would be: `everyEvents` events, or
 * `intervalMs` since the last one started, counted at commits. After a
 * failure the counts stay and the next attempt waits the scheduler's retry
 * delay.
 */
export class ProgressSnapshots {
  readonly #o: ProgressSnapshotsOptions
  #events = 0
  #lastStart = performance.now()
  #notBefore = 0
  #running: Promise<void> | undefined
  #stopped = false

  constructor(options: ProgressSnapshotsOptions) {
    this.#o = options
  }

  /** After each commit of `events` events: starts a snapshot when one is due and none is in flight. */
  noteCommit(events: number): void {
    this.#events += events
    if (this.#stopped || this.#running !== undefined || !this.#due()) return
    const counted = this.#events
    this.#events = 0
    this.#lastStart = performance.now()
    const failed = (): void => {
      this.#events += counted
      this.#notBefore = performance.now() + SCHEDULER_DEFAULTS.retryDelayMs
    }
    this.#running = this.#o.take()
      // The processor reports why it failed ('snapshot-failed', or the partition stopped).
      // Nobody awaits it: a throw of onTaken must stay here.
      .then((result) => (result === undefined ? failed() : callListener(() => this.#o.onTaken(result), undefined)), failed)
      .finally(() => { this.#running = undefined })
  }

  /** Starts no more snapshots, and resolves once the one in flight has ended. */
  async stop(): Promise<void> {
    this.#stopped = true
    await this.#running
  }

  #due(): boolean {
    const { intervalMs, everyEvents } = this.#o
    if (this.#events === 0 || performance.now() < this.#notBefore) return false
    if (everyEvents > 0 && this.#events >= everyEvents) return true
    return intervalMs > 0 && performance.now() - this.#lastStart >= intervalMs
  }
}
