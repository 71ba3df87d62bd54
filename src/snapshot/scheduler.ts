import { isTidemarkError } from '../errors.js'
import { callListener } from '../logging/listener.js'
import type { Position } from '../store/position.js'
import { checkInt, checkKnown, describeValue } from '../util/index.js'
import { checkFunction, checkObject, checkSchedulerClock, SCHEDULER_DEFAULTS, type SchedulerClock } from './options.js'
import { checkPacer, type SnapshotPacer } from './pacer.js'
import type { Snapshotter } from './snapshotter.js'
import type { SnapshotResult, TakeSnapshotOptions } from './snapshotter-types.js'

// The runtimes' default pacer, beside the scheduler that takes it.
export { defaultSnapshotPacer } from './pacer.js'

export interface SnapshotSchedulerOptions {
  /** Take a snapshot when this long has passed since the last one started and something was committed since. 0 turns time off. Default 5 minutes. */
  intervalMs?: number
  /** ... when this many events were committed since the last snapshot. 0 turns it off. Default 0. */
  everyEvents?: number
  /** ... when this many bytes were committed since the last snapshot. 0 turns it off. Default 256 MiB. */
  everyBytes?: number
  /** After a failed snapshot, wait this long before the next attempt. Default 10 s. */
  retryDelayMs?: number
  /**
   * The part of `intervalMs` counted as passed when the scheduler is made,
   * from 0 (the first time-based snapshot one whole interval after) up to
   * but not including 1. Default 0; the PartitionProcessor and the
   * StatefulConsumer give each partition a random one unless the schedule
   * names it, so that partitions that start together (a process with a
   * thousand of them) spread their snapshots over an interval instead of
   * all taking one in the same second, and keep apart afterwards.
   */
  phase?: number
  /**
   * Shared by the schedulers of many partitions: their time-based snapshots
   * take turns, at most `slots` of them per `intervalMs`, the most bytes
   * committed since its snapshot first (SnapshotPacer).
   * Default none here; the PartitionProcessor and the StatefulConsumer use
   * the process's, defaultSnapshotPacer(), unless the schedule names a
   * pacer or its own clock.
   */
  pacer?: SnapshotPacer
  onSnapshot?: (result: SnapshotResult) => void
  onError?: (error: unknown) => void
  /** What time and intervals are measured with (`{ now(), every(ms, fn) }`). Default: performance.now() and an unref'd setInterval. */
  clock?: SchedulerClock
}

export type { SchedulerClock }

const KNOWN = ['onSnapshot', 'onError', 'clock', 'phase', 'pacer', ...Object.keys(SCHEDULER_DEFAULTS)]

/**
 * Decides when to snapshot a partition: by time, by events and by bytes
 * committed since the last snapshot. The runtime calls noteCommit() after
 * each commit; the scheduler starts at most one snapshot at a time and never
 * waits for it, so commits are only held for the checkpoint's stall.
 *
 * What a snapshot captured is counted off when its checkpoint was taken;
 * what was committed during the upload counts toward the next one. A failed
 * snapshot gives its counts back.
 */
export class SnapshotScheduler {
  readonly snapshotter: Snapshotter
  readonly options: Readonly<Required<Omit<SnapshotSchedulerOptions, 'onSnapshot' | 'onError' | 'clock' | 'phase' | 'pacer'>>>
  /** SnapshotSchedulerOptions.phase, as given or 0. */
  readonly phase: number
  /** SnapshotSchedulerOptions.pacer, if any. */
  readonly pacer: SnapshotPacer | undefined
  readonly #clock: SchedulerClock
  readonly #onSnapshot: ((result: SnapshotResult) => void) | undefined
  readonly #onError: ((error: unknown) => void) | undefined
  #events = 0
  #bytes = 0
  #lastStart: number
  #notBefore = -Infinity
  #stopTimer: (() => void) | undefined
  #running: Promise<SnapshotResult | undefined> | undefined
  #stopped = false

  constructor(snapshotter: Snapshotter, options: SnapshotSchedulerOptions = {}) {
    if (snapshotter === null || typeof snapshotter !== 'object' || typeof (snapshotter as Snapshotter).takeSnapshot !== 'function') {
      throw new TypeError('snapshotter must be a Snapshotter')
    }
    const o = checkObject(options, 'SnapshotScheduler options')
    checkKnown(o, KNOWN, 'SnapshotScheduler')
    const d = SCHEDULER_DEFAULTS
    this.snapshotter = snapshotter
    this.options = Object.freeze({
      intervalMs: checkInt(o.intervalMs ?? d.intervalMs, 'intervalMs', 0),
      everyEvents: checkInt(o.everyEvents ?? d.everyEvents, 'everyEvents', 0),
      everyBytes: checkInt(o.everyBytes ?? d.everyBytes, 'everyBytes', 0),
      retryDelayMs: checkInt(o.retryDelayMs ?? d.retryDelayMs, 'retryDelayMs', 0),
    })
    this.#onSnapshot = checkFunction(o.onSnapshot, 'onSnapshot')
    this.#onError = checkFunction(o.onError, 'onError')
    this.#clock = checkSchedulerClock(o.clock, 'clock')
    const phase: unknown = o.phase === undefined ? 0 : o.phase
    if (typeof phase !== 'number' || !(phase >= 0 && phase < 1)) throw new RangeError(`phase must be a number from 0 up to but not including 1, got ${describeValue(phase)}`)
    this.phase = phase
    this.pacer = checkPacer(o.pacer)
    this.#lastStart = this.#clock.now() - phase * this.options.intervalMs
  }

  /** Starts the timer for time-based snapshots. */
  start(): void {
    if (this.#stopped) throw new Error('the scheduler was stopped; create a new one')
    if (this.#stopTimer !== undefined || this.options.intervalMs === 0) return
    const tick = Math.max(10, Math.min(1000, Math.floor(this.options.intervalMs / 4)))
    this.#stopTimer = this.#clock.every(tick, () => this.#maybeStart())
  }

  /** Stops scheduling and waits for snapshots in flight (also one that a waiting trigger() starts). */
  async stop(): Promise<void> {
    this.#stopped = true
    this.pacer?.leave(this)
    this.#stopTimer?.()
    this.#stopTimer = undefined
    while (this.#running !== undefined) await this.#running
  }

  /** Counts a commit of `events` events and `bytes` bytes, and starts a snapshot if a threshold is crossed. */
  noteCommit(events: number, bytes = 0): void {
    if (!(events >= 0) || !(bytes >= 0)) throw new RangeError(`noteCommit needs non-negative counts, got events ${events} and bytes ${bytes}`)
    this.#events += events
    this.#bytes += bytes
    this.#maybeStart()
  }

  /** Counts since the last snapshot's checkpoint. */
  get pending(): { events: number; bytes: number } {
    return { events: this.#events, bytes: this.#bytes }
  }

  get inFlight(): boolean {
    return this.#running !== undefined
  }

  /**
   * Takes a snapshot that covers the store's positions as they are now, and
   * resolves with its result (undefined if it failed). A snapshot already in
   * flight is waited for first; its result is returned only when its
   * checkpoint already covers those positions (it was taken after the call),
   * else a new snapshot is taken: a caller that asks for a snapshot before
   * closing must not get one from before its last commits. Callers that wait
   * for the same in-flight snapshot share the one that follows it; if stop()
   * was called meanwhile, none is taken and they get undefined. `options`
   * go to the snapshot it starts (takeSnapshot's).
   */
  trigger(options: TakeSnapshotOptions = {}): Promise<SnapshotResult | undefined> {
    const running = this.#running
    if (running === undefined) return this.#start(options)
    return this.#after(running, this.snapshotter.partitionStore.positions(), options)
  }

  async #after(running: Promise<SnapshotResult | undefined>, wanted: readonly Position[], options: TakeSnapshotOptions): Promise<SnapshotResult | undefined> {
    const result = await running
    if (result !== undefined && covers(result.positions, wanted)) return result
    // Stopped meanwhile (its partition stopped, say): nothing new starts.
    if (this.#stopped) return undefined
    // One started since `running` settled began after this call, so it covers it too.
    return this.#running ?? this.#start(options)
  }

  #due(): boolean {
    const { intervalMs, everyEvents, everyBytes } = this.options
    if (this.#events === 0 && this.#bytes === 0) return false
    if (everyEvents > 0 && this.#events >= everyEvents) return true
    if (everyBytes > 0 && this.#bytes >= everyBytes) return true
    const now = this.#clock.now()
    if (intervalMs === 0 || now - this.#lastStart < intervalMs) return false
    // Due by time only: the pacer's turn, if any (bytes and events do not wait for one).
    return this.pacer === undefined || this.pacer.request(this, intervalMs, now, this.#bytes)
  }

  #maybeStart(): void {
    if (this.#stopped || this.#running !== undefined || this.#clock.now() < this.#notBefore || !this.#due()) return
    void this.#start()
  }

  #start(options: TakeSnapshotOptions = {}): Promise<SnapshotResult | undefined> {
    const events = this.#events
    const bytes = this.#bytes
    this.#events = 0
    this.#bytes = 0
    this.#lastStart = this.#clock.now()
    // Whatever started it, this snapshot is the one a time-based turn would give.
    this.pacer?.leave(this)
    const run = (async () => {
      let result: SnapshotResult
      try {
        result = await this.snapshotter.takeSnapshot(options)
      } catch (error) {
        this.#events += events
        this.#bytes += bytes
        // Another caller's snapshot of the same store is no failure of ours.
        if (!isTidemarkError(error, 'TIDEMARK_SNAPSHOT_IN_PROGRESS')) this.#notBefore = this.#clock.now() + this.options.retryDelayMs
        // Nobody awaits a scheduled snapshot: a callback's throw must stay here.
        callListener(() => this.#onError?.(error), undefined)
        return undefined
      } finally {
        this.#running = undefined
      }
      // Outside the try: a callback's throw is no failed snapshot.
      callListener(() => this.#onSnapshot?.(result), undefined)
      return result
    })()
    this.#running = run
    return run
  }
}

/** Every position of `wanted` is at or before the one of its source partition in `have`. */
function covers(have: readonly Position[], wanted: readonly Position[]): boolean {
  return wanted.every((w) => have.some((h) => h.topic === w.topic && h.partition === w.partition && h.offset >= w.offset))
}
