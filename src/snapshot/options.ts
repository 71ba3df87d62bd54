import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { PartitionStore } from '../store/partition-store.js'
import { describeValue } from '../util/describe-value.js'

const MiB = 1024 * 1024

export const SNAPSHOT_DEFAULTS = Object.freeze({
  epoch: 0,
  retain: 3,
  graceMs: 60 * 60 * 1000,
  gcAfterSnapshot: true,
  maxObjectBytes: 256 * MiB,
  uploadConcurrency: 1,
  maxAmplification: 2,
  maxChainLength: 16,
  checkpoint: 'open' as 'open' | 'close',
})

export const RESTORE_DEFAULTS = Object.freeze({
  downloadConcurrency: 6,
  rangeBytes: 128 * MiB,
  useLocal: true,
  allowEmpty: false,
  fsync: true,
  progressIntervalMs: 250,
})

export const SCHEDULER_DEFAULTS = Object.freeze({
  intervalMs: 5 * 60 * 1000,
  everyEvents: 0,
  everyBytes: 256 * MiB,
  retryDelayMs: 10_000,
})

/**
 * The time and the timer a SnapshotScheduler runs on. The default is the
 * process's monotonic clock and a real, unref'd interval; a test passes its
 * own to move time by hand instead of waiting for it.
 */
export interface SchedulerClock {
  /** Milliseconds on a monotonic clock; only differences are used. */
  now(): number
  /** Calls `fn` every `ms` milliseconds until the returned function is called; must not keep the process alive. */
  every(ms: number, fn: () => void): () => void
}

export const REAL_SCHEDULER_CLOCK: SchedulerClock = Object.freeze({
  now: () => performance.now(),
  every: (ms: number, fn: () => void): (() => void) => {
    const timer = setInterval(fn, ms)
    timer.unref()
    return () => clearInterval(timer)
  },
})

export function checkSchedulerClock(value: unknown, name: string): SchedulerClock {
  if (value === undefined) return REAL_SCHEDULER_CLOCK
  const clock = value as Partial<SchedulerClock> | null
  if (clock === null || typeof clock !== 'object' || typeof clock.now !== 'function' || typeof clock.every !== 'function') {
    throw new TypeError(`${name} must be an object with now() and every(ms, fn) functions, got ${describeValue(value)}`)
  }
  return clock as SchedulerClock
}

export function checkObject(value: unknown, what: string): Record<string, unknown> {
  if (value === null || typeof value !== 'object') throw new TypeError(`${what} must be an object, got ${describeValue(value)}`)
  return value as Record<string, unknown>
}

export function checkNumber(value: unknown, name: string, min: number): number {
  if (typeof value !== 'number') throw new TypeError(`${name} must be a number, got ${typeof value}`)
  if (!Number.isFinite(value) || value < min) throw new RangeError(`${name} must be a number of at least ${min}, got ${value}`)
  return value
}

export function checkBoolean(value: unknown, name: string): boolean {
  if (typeof value !== 'boolean') throw new TypeError(`${name} must be a boolean, got ${typeof value}`)
  return value
}

export function checkFunction<F>(value: unknown, name: string): F | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'function') throw new TypeError(`${name} must be a function, got ${typeof value}`)
  return value as F
}

export function checkSnapshotStore(value: unknown, name: string): SnapshotStore {
  const store = value as SnapshotStore | null
  if (store === null || typeof store !== 'object' || typeof store.put !== 'function' || typeof store.get !== 'function' || typeof store.list !== 'function') {
    throw new TypeError(`${name} must be a SnapshotStore (openSnapshotStore(url), FsSnapshotStore, S3SnapshotStore)`)
  }
  return store
}

export function checkPartitionStore(value: unknown, name: string): PartitionStore {
  if (!(value instanceof PartitionStore)) throw new TypeError(`${name} must be an open PartitionStore`)
  return value
}

/** A file a restore or a prefetch checked against its manifest: name, size and SHA-256, and where it is when `withPath`. */
export interface CheckedFile {
  name: string
  size: number
  sha256: string
}

/**
 * Validates a list of checked files (restore's `reuse`, the Snapshotter's
 * `verifiedFiles`), each `{ name, size, sha256 }` and, with `withPath`, a
 * `path`; returns copies, so that the caller's objects can change later.
 */
export function checkFileList<F extends CheckedFile>(value: unknown, name: string, withPath: boolean, from: string): F[] {
  const fields = withPath ? '{ name, size, sha256, path }' : '{ name, size, sha256 }'
  const bad = (): TypeError => new TypeError(`${name} must be an array of ${fields} (${from})`)
  if (!Array.isArray(value)) throw bad()
  return value.map((f: unknown) => {
    const file = f as Partial<CheckedFile & { path: unknown }> | null
    if (file === null || typeof file !== 'object' || typeof file.name !== 'string' || typeof file.sha256 !== 'string' || !Number.isSafeInteger(file.size)) throw bad()
    if (withPath && typeof file.path !== 'string') throw bad()
    return { ...(file as F) }
  })
}
