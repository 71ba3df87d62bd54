import { errorFields, type Logger } from '../logging/logger.js'
import { storeStateBytes } from '../store/store-size.js'
import { describeValue } from '../util/describe-value.js'

export const STATE_SIZE_DEFAULTS = Object.freeze({
  /**
   * A partition's state size is measured when it starts, at each snapshot
   * (whose files are the measure), and after a commit at most once per this
   * many milliseconds (Prometheus's default scrape interval): a directory
   * listing per measure, never one per event.
   */
  measureEveryMs: 15_000,
})

/** A partition's state went above its soft limit (`stateSizeLimit`). */
export interface StateSizeExceeded {
  /** The size measured: bytes of the partition store's state files. */
  bytes: number
  limit: number
}

/** The soft limit option of both runtimes (`stateSizeLimit`), checked once; undefined when it is not set. */
export function checkStateSizeLimit(value: unknown, field: string): number | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'number') throw new TypeError(`${field} must be a number of bytes, got ${describeValue(value)}`)
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${field} must be a positive safe integer (bytes), got ${value}`)
  return value
}

/**
 * Whether measured sizes cross a limit: true for the first one above it,
 * not again while they stay above, and again once one at or below it was
 * followed by one above.
 */
export class SoftLimit {
  readonly limit: number
  #above = false

  constructor(limit: number) {
    this.limit = limit
  }

  /** Notes a measure; true when it is the one that went above the limit. */
  crossed(bytes: number): boolean {
    const above = bytes > this.limit
    const crossed = above && !this.#above
    this.#above = above
    return crossed
  }
}

/** How a partition's state size is measured; a lifecycle's `stateSize`. */
export interface StateSizeSettings {
  /** The soft limit in bytes (checkStateSizeLimit); without one the size is only measured. */
  limit?: number | undefined
  /** Default STATE_SIZE_DEFAULTS.measureEveryMs. */
  everyMs?: number
  /** Milliseconds, for the pace of the measures (default performance.now); tests move it. */
  clock?: () => number
}

export interface StateSizeWatchOptions {
  /** The partition store's directory. */
  path: string
  job: string
  topic: string
  partition: number
  logger: Logger
  stateSize?: StateSizeSettings
  /** Where each measure and each crossing go; they must not throw. */
  events: {
    stateSize?(bytes: number, limit: number | undefined): void
    stateSizeExceeded?(exceeded: StateSizeExceeded): void
  }
}

/**
 * A partition's state size, measured from its store's files at a bounded
 * rate, and its soft limit: nothing is refused or stopped above it; a
 * crossing is a warn line and an event, so that operators know to add
 * partitions before restores grow slow (docs/partition-store.md).
 */
export class StateSizeWatch {
  readonly #o: StateSizeWatchOptions
  readonly #limit: SoftLimit | undefined
  readonly #everyMs: number
  readonly #clock: () => number
  /** Clock reading from which a commit measures again. */
  #next = -Infinity
  #measuring: Promise<void> | undefined

  constructor(options: StateSizeWatchOptions) {
    this.#o = options
    const s = options.stateSize
    this.#limit = s?.limit === undefined ? undefined : new SoftLimit(s.limit)
    this.#everyMs = s?.everyMs ?? STATE_SIZE_DEFAULTS.measureEveryMs
    this.#clock = s?.clock ?? (() => performance.now())
  }

  /**
   * The measure at the partition's start: the files of the snapshot it was
   * restored from, when it was (as a snapshot's files are its measure),
   * rather than a stat of each of a large store's files on the start's path.
   */
  started(restoredBytes: number | undefined): Promise<void> {
    if (restoredBytes === undefined) return this.measure()
    this.measured(restoredBytes)
    return Promise.resolve()
  }

  /** After a commit: a measure when the last one is everyMs old (its promise), else nothing. */
  committed(): Promise<void> | undefined {
    if (this.#measuring !== undefined || this.#clock() < this.#next) return undefined
    return this.measure()
  }

  /** Measures now (one at a time); never rejects. */
  measure(): Promise<void> {
    this.#next = this.#clock() + this.#everyMs
    this.#measuring ??= this.#measure().finally(() => { this.#measuring = undefined })
    return this.#measuring
  }

  async #measure(): Promise<void> {
    const o = this.#o
    let bytes: number | undefined
    try {
      bytes = await storeStateBytes(o.path)
    } catch (error) {
      o.logger.debug({ job: o.job, topic: o.topic, partition: o.partition, ...errorFields(error) }, 'measuring the state size failed')
      return
    }
    if (bytes !== undefined) this.measured(bytes)
  }

  /** A size measured elsewhere (a snapshot's files): reported like a measure of its own, and the next after a commit is everyMs away. */
  measured(bytes: number): void {
    const o = this.#o
    this.#next = this.#clock() + this.#everyMs
    o.events.stateSize?.(bytes, this.#limit?.limit)
    if (this.#limit?.crossed(bytes) !== true) return
    const limit = this.#limit.limit
    o.logger.warn({ job: o.job, topic: o.topic, partition: o.partition, bytes, limit }, 'the partition\'s state is above its soft limit (stateSizeLimit): add partitions to spread the state; nothing is refused')
    o.events.stateSizeExceeded?.({ bytes, limit })
  }
}
