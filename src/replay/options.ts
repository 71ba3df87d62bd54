import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import type { RevisionedLog } from '../log/revisioned-log.js'
import type { OutputSink, EmitContext } from '../outputs/types.js'
import type { EventContext } from '../runtime/partition-synchronizer.js'
import type { Progress } from '../runtime/progress.js'
import type { Codec } from '../store/codec.js'
import type { StateDefinition } from '../store/state.js'
import type { Transaction } from '../store/transaction.js'
import { RESERVED_STATE_NAMES } from '../outputs/states.js'
import { layoutOfOption, type SnapshotLayout } from '../snapshot/layout.js'
import { describeValue } from '../util/describe-value.js'

/** What a replay's handler gets: the event's source position and, with an output, emit(). */
export type ReplayContext = EventContext & EmitContext

/** The operator run by a replay; like a processor's handler, it changes state only through `tx`. */
export type ReplayHandler<E> = (tx: Transaction, event: E, context: ReplayContext) => void | Promise<void>

export interface ReplaySource<E> {
  /** The source log (a file log, or one Kafka partition through tidemark/kafka). Only read. */
  log: RevisionedLog
  /** The source's name and partition, recorded with the store's position (and in output ids). */
  topic: string
  partition: number
  /**
   * First offset of the range. With `start: 'empty'` default 0; with a
   * snapshot or an offset start it follows from the start (one past its
   * position) and may be given only as that value.
   */
  from?: bigint
  /** Last offset of the range (inclusive); it must lie before the log's tail: a replay never waits for events. */
  to: bigint
  /** Decodes events from log entries. JSON by default. */
  codec?: Codec<E>
}

/** Where the replay's state starts. */
export type ReplayStart =
  /** Empty state; the range starts at `source.from` (default 0). */
  | 'empty'
  /** The state of one snapshot of `job` (another job's, in `store`, by default the replay's own snapshot store); the range starts after its position. */
  | { snapshot: string; job: string; store?: SnapshotStore }
  /**
   * The state as of `offset`: the newest snapshot of `job` whose position is
   * at or before it (or empty state, without `job` or such a snapshot), then
   * the events after that snapshot up to `offset` applied through the
   * handler with their outputs discarded; the range starts at `offset + 1`.
   */
  | { offset: bigint; job?: string; store?: SnapshotStore }

export interface ReplayCheckpoints {
  /** Snapshot the replay's progress this often (ms), so that a resume elsewhere need not start over. 0: off. Default 60 s. */
  intervalMs?: number
  /** ... every this many events. 0: off (default). */
  everyEvents?: number
}

/** Reported while a replay runs. */
export type ReplayProgress =
  | { phase: 'prepare'; message: string }
  | { phase: 'restore' | 'warm-up' | 'replay'; progress: Progress }
  /** A batch of the range was committed (offset: its last event). */
  | { phase: 'commit'; offset: bigint; events: number }
  | { phase: 'deliver'; records: number }
  | { phase: 'snapshot'; id: string; final: boolean }

export interface ReplayJobOptions<E> {
  /**
   * The replay's own job: the namespace of its snapshots (`<job>/<partition>/`
   * in `snapshots`) and the first part of its output ids. It must be new, or
   * a replay with the very same parameters (which is then resumed).
   */
  job: string
  source: ReplaySource<E>
  start: ReplayStart
  handler: ReplayHandler<E>
  /** Every state the handler uses. */
  states: readonly StateDefinition[]
  /** Where emitted records are delivered (a new topic or file log). Without it the handler must not emit. */
  output?: OutputSink
  /** The replay's local partition store directory. */
  path: string
  /** Where the replay's snapshots go (and, by default, where a start snapshot is read). */
  snapshots: SnapshotStore
  /**
   * What identifies the handler's code (a version, a hash of its module):
   * recorded with the job, so that a resume with another handler is refused
   * instead of mixing the two. Optional.
   */
  fingerprint?: string
  /** Events per commit. Default 10000. */
  batchSize?: number
  /** Snapshots of the progress; the final snapshot at `to` is always taken. */
  checkpoints?: ReplayCheckpoints
  onProgress?: (progress: ReplayProgress) => void
  /** Stops the replay after the batch in flight: it rejects with the signal's reason and can be resumed later. */
  signal?: AbortSignal
}

export const REPLAY_DEFAULTS = Object.freeze({
  batchSize: 10_000,
  checkpointIntervalMs: 60_000,
  checkpointEveryEvents: 0,
})

/** The start, checked, with its store resolved. */
export type ResolvedStart =
  | { kind: 'empty' }
  | { kind: 'snapshot'; job: string; store: SnapshotStore; snapshot: string }
  | { kind: 'offset'; job: string | undefined; store: SnapshotStore; offset: bigint }

export interface ResolvedReplay<E> {
  job: string
  layout: SnapshotLayout
  source: Required<Omit<ReplaySource<E>, 'from' | 'codec'>> & { from: bigint | undefined; codec: Codec<E> | undefined }
  start: ResolvedStart
  handler: ReplayHandler<E>
  states: readonly StateDefinition[]
  output: OutputSink | undefined
  path: string
  snapshots: SnapshotStore
  fingerprint: string | undefined
  batchSize: number
  checkpoints: Required<ReplayCheckpoints>
  onProgress: ((progress: ReplayProgress) => void) | undefined
  signal: AbortSignal | undefined
}

const KNOWN = ['job', 'source', 'start', 'handler', 'states', 'output', 'path', 'snapshots', 'fingerprint', 'batchSize', 'checkpoints', 'onProgress', 'signal']
const MAX_OFFSET = (1n << 63n) - 2n
// The store's position refuses longer topics and larger partitions
// (src/store/position.ts); checked here so a first call fails before it
// writes its record, not after (which would burn the job name).
const MAX_TOPIC_BYTES = 1024
const MAX_PARTITION = 2 ** 32 - 1
const SNAPSHOT_ID = /^\d{10}-\d{12}$/

/** Checks every option once; caller mistakes are TypeError/RangeError naming the option. */
export function resolveReplayOptions<E>(options: ReplayJobOptions<E>): ResolvedReplay<E> {
  const o = object(options, 'options') as unknown as ReplayJobOptions<E>
  for (const name of Object.keys(o)) {
    if (!KNOWN.includes(name)) throw new RangeError(`unknown option options.${name}; known: ${KNOWN.join(', ')}`)
  }
  const job = nonEmpty(o.job, 'options.job')
  const snapshots = snapshotStore(o.snapshots, 'options.snapshots')
  // The replay takes its partition's claim in this store (ownership).
  if (snapshots.capabilities?.conditionalPut !== true || snapshots.capabilities.compareAndSwap !== true) {
    throw new RangeError(`options.snapshots (${snapshots.url}) cannot hold the replay's claim: it needs capabilities.conditionalPut and capabilities.compareAndSwap`)
  }

  const s = object(o.source, 'options.source') as unknown as ReplaySource<E>
  if (s.log === null || typeof s.log !== 'object' || typeof s.log.readBatches !== 'function' || typeof s.log.tail !== 'function') {
    throw new TypeError('options.source.log must be a RevisionedLog (openFileLog(), or openKafkaLog() from tidemark/kafka)')
  }
  const topic = nonEmpty(s.topic, 'options.source.topic')
  if (Buffer.byteLength(topic) > MAX_TOPIC_BYTES) throw new RangeError(`options.source.topic must be at most ${MAX_TOPIC_BYTES} bytes (UTF-8), got ${Buffer.byteLength(topic)} bytes`)
  if (!Number.isSafeInteger(s.partition) || s.partition < 0 || s.partition > MAX_PARTITION) throw new RangeError(`options.source.partition must be an integer from 0 to 2^32-1, got ${String(s.partition)}`)
  const to = offset(s.to, 'options.source.to')
  const from = s.from === undefined ? undefined : offset(s.from, 'options.source.from')
  if (from !== undefined && from > to) throw new RangeError(`options.source.from (${from}) must not be after options.source.to (${to})`)
  if (s.codec !== undefined && (s.codec === null || typeof s.codec.decode !== 'function')) throw new TypeError('options.source.codec must be a Codec with decode(bytes)')
  // Validates the job as a key segment (no '/', no reserved names) with the partition.
  const layout = layoutOf(job, s.partition)

  const start = resolveStart(o.start, snapshots, from, to)
  if (typeof o.handler !== 'function') throw new TypeError('options.handler must be a function (tx, event, context) => void')
  if (!Array.isArray(o.states)) throw new TypeError('options.states must be an array of state definitions (valueState(), mapState())')
  for (const [i, def] of o.states.entries()) {
    if (def === null || typeof def !== 'object' || (def.kind !== 'value' && def.kind !== 'map') || typeof def.name !== 'string') {
      throw new TypeError(`options.states[${i}] must be a state definition made by valueState() or mapState()`)
    }
  }
  // What the store and the outputs refuse on open, refused before anything is written.
  const seen = new Map<string, number>()
  for (const [i, def] of o.states.entries()) {
    const first = seen.get(def.name)
    if (first !== undefined) throw new RangeError(`options.states[${i}]: state ${JSON.stringify(def.name)} is listed twice (also options.states[${first}])`)
    seen.set(def.name, i)
    if (o.output !== undefined && RESERVED_STATE_NAMES.includes(def.name)) throw new RangeError(`options.states[${i}]: state name ${JSON.stringify(def.name)} is reserved for Tidemark's outbox and dedupe`)
  }
  if (o.output !== undefined && (o.output === null || typeof o.output !== 'object' || typeof o.output.send !== 'function' || typeof o.output.name !== 'string')) {
    throw new TypeError('options.output must be an OutputSink (fileLogSink(), or kafkaSink() from tidemark/kafka)')
  }
  const path = nonEmpty(o.path, 'options.path')
  if (o.fingerprint !== undefined) nonEmpty(o.fingerprint, 'options.fingerprint')
  const batchSize = o.batchSize ?? REPLAY_DEFAULTS.batchSize
  if (!Number.isSafeInteger(batchSize) || batchSize < 1) throw new RangeError(`options.batchSize must be a positive integer, got ${String(batchSize)}`)
  const c = o.checkpoints === undefined ? {} : object(o.checkpoints, 'options.checkpoints') as ReplayCheckpoints
  for (const name of Object.keys(c)) {
    if (name !== 'intervalMs' && name !== 'everyEvents') throw new RangeError(`unknown option options.checkpoints.${name}; known: intervalMs, everyEvents`)
  }
  const checkpoints = {
    intervalMs: c.intervalMs ?? REPLAY_DEFAULTS.checkpointIntervalMs,
    everyEvents: c.everyEvents ?? REPLAY_DEFAULTS.checkpointEveryEvents,
  }
  for (const [name, v] of Object.entries(checkpoints)) {
    if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`options.checkpoints.${name} must be a non-negative integer (0: off), got ${String(v)}`)
  }
  if (o.onProgress !== undefined && typeof o.onProgress !== 'function') throw new TypeError('options.onProgress must be a function')
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) throw new TypeError('options.signal must be an AbortSignal')
  return {
    job,
    layout,
    source: { log: s.log, topic, partition: s.partition, from, to, codec: s.codec },
    start,
    handler: o.handler,
    states: o.states,
    output: o.output,
    path,
    snapshots,
    fingerprint: o.fingerprint,
    batchSize,
    checkpoints,
    onProgress: o.onProgress,
    signal: o.signal,
  }
}

function resolveStart(value: unknown, snapshots: SnapshotStore, from: bigint | undefined, to: bigint): ResolvedStart {
  if (value === 'empty') return { kind: 'empty' }
  if (value === null || typeof value !== 'object') {
    throw new TypeError(`options.start must be 'empty', { snapshot, job, store? } or { offset, job?, store? }, got ${value === null ? 'null' : JSON.stringify(value)}`)
  }
  const v = value as Record<string, unknown>
  const store = v.store === undefined ? snapshots : snapshotStore(v.store, 'options.start.store')
  if ('snapshot' in v) {
    if (typeof v.snapshot !== 'string' || !SNAPSHOT_ID.test(v.snapshot)) throw new RangeError(`options.start.snapshot must be a snapshot id like 0000000001-000000000042, got ${JSON.stringify(v.snapshot)}`)
    const job = startJob(v.job)
    if ('offset' in v) throw new TypeError('options.start takes either snapshot or offset, not both')
    return { kind: 'snapshot', job, store, snapshot: v.snapshot }
  }
  if ('offset' in v) {
    const at = offset(v.offset, 'options.start.offset')
    if (at >= to) throw new RangeError(`options.start.offset (${at}) must be before options.source.to (${to}): the range starts after it`)
    if (from !== undefined && from !== at + 1n) throw new RangeError(`options.source.from (${from}) must be options.start.offset + 1 (${at + 1n}), or left out`)
    const job = v.job === undefined ? undefined : startJob(v.job)
    return { kind: 'offset', job, store, offset: at }
  }
  throw new TypeError('options.start must be \'empty\', { snapshot, job, store? } or { offset, job?, store? }')
}

function layoutOf(job: string, partition: number, name = 'options.job'): SnapshotLayout {
  return layoutOfOption(job, partition, name)
}

/** The start's job is read as a namespace (seed.ts), after the replay's record is written: checked as one here. */
function startJob(value: unknown): string {
  const job = nonEmpty(value, 'options.start.job')
  layoutOf(job, 0, 'options.start.job')
  return job
}

function object(value: unknown, name: string): Record<string, unknown> {
  if (value === null || typeof value !== 'object') throw new TypeError(`${name} must be an object, got ${describeValue(value)}`)
  return value as Record<string, unknown>
}

function nonEmpty(value: unknown, name: string): string {
  if (typeof value !== 'string' || value === '') throw new TypeError(`${name} must be a non-empty string, got ${JSON.stringify(value)}`)
  return value
}

function offset(value: unknown, name: string): bigint {
  if (typeof value !== 'bigint') throw new TypeError(`${name} must be a bigint offset, got ${typeof value === 'number' ? `the number ${value} (write ${value}n)` : typeof value}`)
  if (value < 0n || value > MAX_OFFSET) throw new RangeError(`${name} (${value}) must be between 0 and 2^63-2`)
  return value
}

function snapshotStore(value: unknown, name: string): SnapshotStore {
  if (value === null || typeof value !== 'object' || typeof (value as SnapshotStore).put !== 'function' || typeof (value as SnapshotStore).url !== 'string') {
    throw new TypeError(`${name} must be a SnapshotStore (openSnapshotStore(url))`)
  }
  return value as SnapshotStore
}
