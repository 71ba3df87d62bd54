import { checkInt, checkKnown, describeValue } from '../util/index.js'
import { checkObject } from './options.js'

export interface SnapshotPacerOptions {
  /**
   * Time-based snapshots that the schedulers sharing this pacer start within
   * any one scheduler's `intervalMs`. Default 16.
   */
  slots?: number
}

export const PACER_DEFAULTS = Object.freeze({
  slots: 16,
})

/**
 * Paces the time-based snapshots of the schedulers that share it (a
 * process's partitions): at most `slots` of them start within a
 * scheduler's `intervalMs`; the schedulers due beyond that wait their turn,
 * the one with the most bytes committed since its last snapshot first (its
 * replay is the longest), then the first come. Snapshots for bytes or
 * events committed, and those asked for (`trigger()`, hand-offs), are not
 * paced.
 *
 * Why: a partition's time-based snapshot costs requests whatever it holds,
 * so a process of a thousand partitions would make sixty times the requests
 * of one of sixteen for the same writes (issue 38). Paced, it makes as many
 * time-based snapshots as sixteen partitions would; what bounds a partition's
 * replay, the bytes since its snapshot (`everyBytes`), still triggers at
 * once. Only the age of a quiet partition's snapshot grows:
 * `intervalMs` × partitions / `slots` at most.
 *
 * The schedulers give the time (their clock's `now()`): those sharing a
 * pacer must share a clock.
 *
 * SnapshotFollowers take turns the same way (`start({ pacer })`): a member's
 * standby copies list the store `slots` times per interval, not once per copy.
 */
export class SnapshotPacer {
  readonly slots: number
  /** Start times of the newest time-based snapshots, oldest first, at most `slots`. */
  readonly #starts: number[] = []
  /** The schedulers due by time that wait, in the order they came (a Map keeps it): when each last asked, and its bytes since its last snapshot. */
  readonly #waiting = new Map<object, { asked: number; debt: number }>()
  /** The waiting scheduler that gets the next free slot, chosen when one came free. */
  #next: object | undefined

  constructor(options: SnapshotPacerOptions = {}) {
    const o = checkObject(options, 'SnapshotPacer options')
    checkKnown(o, Object.keys(PACER_DEFAULTS), 'SnapshotPacer')
    this.slots = checkInt(o.slots ?? PACER_DEFAULTS.slots, 'slots', 1)
  }

  /**
   * Whether `who`, due by time with `debt` bytes committed since its last
   * snapshot, may start its snapshot at `now` (its clock's); if not, it
   * keeps its place in the line and asks again later.
   */
  request(who: object, intervalMs: number, now: number, debt = 0): boolean {
    this.#waiting.set(who, { asked: now, debt })
    if (this.#starts.length >= this.slots && now - this.#starts[0]! < intervalMs) return false
    const next = this.#next
    if (next === undefined || this.#gone(next, now)) this.#next = this.#choose(now)
    if (this.#next !== who) return false
    this.#leave(who)
    this.#starts.push(now)
    if (this.#starts.length > this.slots) this.#starts.shift()
    return true
  }

  /** `who` no longer waits: it snapshotted for bytes or events, was asked to, or stopped. */
  leave(who: object): void {
    this.#leave(who)
  }

  #leave(who: object): void {
    this.#waiting.delete(who)
    if (this.#next === who) this.#next = undefined
  }

  /** Not waiting, or not asking any more: a scheduler asks every second at most while it waits, so one dropped without stop() must not hold the line. */
  #gone(who: object, now: number): boolean {
    const w = this.#waiting.get(who)
    return w === undefined || now - w.asked >= GONE_AFTER_MS
  }

  /** The waiting scheduler with the most debt, the first come of equals. Once per slot: not per request. */
  #choose(now: number): object | undefined {
    let best: object | undefined
    let most = -1
    for (const [who, { debt }] of this.#waiting) {
      if (this.#gone(who, now)) {
        this.#waiting.delete(who)
        continue
      }
      if (debt > most) {
        best = who
        most = debt
      }
    }
    return best
  }

  /** Schedulers due by time that wait for their turn. */
  get waiting(): number {
    return this.#waiting.size
  }
}

/** An optional `pacer` option (a scheduler's, a follower's start()): a SnapshotPacer or undefined. */
export function checkPacer(value: unknown): SnapshotPacer | undefined {
  if (value !== undefined && !(value instanceof SnapshotPacer)) throw new TypeError(`pacer must be a SnapshotPacer, got ${describeValue(value)}`)
  return value
}

/** A waiting scheduler that has not asked for this long is no longer in the line (SnapshotScheduler asks every second at most). */
const GONE_AFTER_MS = 10_000

let processDefault: SnapshotPacer | undefined

/**
 * The pacer of the `PartitionProcessor`s and `StatefulConsumer`s whose
 * schedule names none (and runs on the default clock): one per process, made
 * on first use with the default options.
 */
export function defaultSnapshotPacer(): SnapshotPacer {
  processDefault ??= new SnapshotPacer()
  return processDefault
}
