import { EventEmitter } from 'node:events'
import { mkdir } from 'node:fs/promises'
import { dirname } from 'node:path'
import { TidemarkError } from '../errors.js'
import type { SnapshotStore } from '../dfs/snapshot-store.js'
import type { RevisionedLog } from '../log/revisioned-log.js'
import { jsonCodec, type Codec } from '../store/codec.js'
import { PartitionStore, type PartitionStoreOptions } from '../store/partition-store.js'
import type { StateDefinition } from '../store/state.js'
import { listManifests } from '../snapshot/catalog.js'
import { SnapshotLayout } from '../snapshot/layout.js'
import { restoreSnapshot, type RestoreEvent, type RestoreResult } from '../snapshot/restore.js'
import { SnapshotScheduler, type SnapshotSchedulerOptions } from '../snapshot/scheduler.js'
import { Snapshotter, type SnapshotResult, type SnapshotterOptions } from '../snapshot/snapshotter.js'
import { PartitionSynchronizer, type EventHandler } from './partition-synchronizer.js'
import { ProgressMeter, type Progress } from './progress.js'

export interface SnapshotSettings
  extends Pick<SnapshotterOptions, 'retain' | 'graceMs' | 'maxAmplification' | 'maxChainLength' | 'uploadConcurrency' | 'maxObjectBytes'> {
  /** Where snapshots go and come from. */
  store: SnapshotStore
  /** When to snapshot (time, events, bytes committed since the last one). */
  schedule?: Omit<SnapshotSchedulerOptions, 'onSnapshot' | 'onError'>
  /** Take a snapshot in close(). Default false. */
  onClose?: boolean
}

export interface PartitionProcessorOptions<E> {
  /** Namespace of the job's snapshots. */
  job: string
  /** The source: a revisioned log holding one partition's events. */
  log: RevisionedLog
  /** Source name and partition recorded with the store's position. */
  topic: string
  partition: number
  /** The local partition store directory. */
  path: string
  states: readonly StateDefinition[]
  handler: EventHandler<E>
  /** Decodes events from log entries. JSON by default. */
  codec?: Codec<E>
  /** Events per commit. Default 1000. */
  batchSize?: number
  /**
   * Events per commit of the replay: the first catchUp() after start(). A
   * replay has no one waiting for its commits, so larger batches (as Kafka
   * Streams restores) trade nothing for fewer, larger LevelDB writes; a crash
   * mid-replay redoes at most one batch. Default: batchSize when that is
   * set (a program that tuned its batches keeps them), else 10000.
   */
  replayBatchSize?: number
  /** How long run() waits before looking at the log again when it is caught up. Default 50 ms. */
  pollIntervalMs?: number
  /** Incremental snapshots; without them only the local store survives a crash. */
  snapshots?: SnapshotSettings
  /**
   * Start from empty state when neither a local store nor a usable snapshot
   * exists. Safe by default: the replay then starts at offset 0 and fails with
   * TIDEMARK_LOG_TRUNCATED if the log no longer holds it. Default true.
   */
  allowEmpty?: boolean
  /** Download concurrency of a restore. */
  downloadConcurrency?: number
  /** Options of the partition store. */
  store?: Omit<PartitionStoreOptions, 'path' | 'states'>
}

export const PROCESSOR_DEFAULTS = Object.freeze({
  batchSize: 1000,
  replayBatchSize: 10_000,
  pollIntervalMs: 50,
  allowEmpty: true,
})

/** Where a start found its state. */
export interface StartResult {
  source: 'local' | 'snapshot' | 'empty'
  /** The snapshot restored (or compared with, for 'local'). */
  snapshot?: string
  /** Snapshots that could not be used, newest first, and why. */
  skipped: RestoreResult['skipped']
  bytesDownloaded: number
  restoreMs: number
  /** The store's position after the restore: the replay starts after it. */
  offset: bigint | undefined
  /** This owner's epoch (one more than any snapshot's). */
  epoch: number
}

export interface ProcessorEvents {
  /** Restore (bytes) and replay (events) progress with an estimate of the time left. */
  progress: [Progress]
  started: [StartResult]
  /** A batch was committed. */
  commit: [{ events: number; offset: bigint }]
  snapshot: [SnapshotResult]
  /** A snapshot failed; processing goes on and the previous snapshot stays the latest. */
  'snapshot-failed': [unknown]
  /** Reports from the restore: snapshots skipped and why, the local store used or replaced. */
  restore: [RestoreEvent]
}

/**
 * Runs an operator's handler over one partition of a source log.
 *
 * start() restores the state (the local store when it is intact and not
 * behind the newest snapshot, else the newest usable snapshot, else empty);
 * catchUp() and run() then apply the log from the store's position through
 * the PartitionSynchronizer, committing state and position atomically per
 * batch, and snapshot on the schedule. Replay after a restore and live
 * processing are the same fetchUpdates() call.
 */
export class PartitionProcessor<E = unknown> extends EventEmitter<ProcessorEvents> {
  readonly options: Readonly<Required<Pick<PartitionProcessorOptions<E>, 'batchSize' | 'replayBatchSize' | 'pollIntervalMs' | 'allowEmpty'>>>
  readonly #o: PartitionProcessorOptions<E>
  #store: PartitionStore | undefined
  #sync: PartitionSynchronizer<E> | undefined
  #snapshotter: Snapshotter | undefined
  #scheduler: SnapshotScheduler | undefined
  #state: 'new' | 'starting' | 'running' | 'closed' = 'new'
  #replayed = false

  constructor(options: PartitionProcessorOptions<E>) {
    super()
    if (options === null || typeof options !== 'object') throw new TypeError('PartitionProcessor options must be an object')
    for (const field of ['job', 'topic', 'path'] as const) {
      if (typeof options[field] !== 'string' || options[field] === '') throw new TypeError(`options.${field} must be a non-empty string, got ${JSON.stringify(options[field])}`)
    }
    if (!Number.isInteger(options.partition) || options.partition < 0) throw new RangeError(`options.partition must be a non-negative integer, got ${options.partition}`)
    if (typeof options.handler !== 'function') throw new TypeError('options.handler must be a function (tx, event, context) => void')
    if (options.log === null || typeof options.log?.read !== 'function') throw new TypeError('options.log must be a RevisionedLog')
    if (!Array.isArray(options.states)) throw new TypeError('options.states must be an array of state definitions')
    if (options.snapshots !== undefined && typeof options.snapshots?.store?.put !== 'function') throw new TypeError('options.snapshots.store must be a SnapshotStore')
    const resolved = {
      batchSize: options.batchSize ?? PROCESSOR_DEFAULTS.batchSize,
      replayBatchSize: options.replayBatchSize ?? options.batchSize ?? PROCESSOR_DEFAULTS.replayBatchSize,
      pollIntervalMs: options.pollIntervalMs ?? PROCESSOR_DEFAULTS.pollIntervalMs,
      allowEmpty: options.allowEmpty ?? PROCESSOR_DEFAULTS.allowEmpty,
    }
    if (!Number.isInteger(resolved.batchSize) || resolved.batchSize < 1) throw new RangeError(`options.batchSize must be a positive integer, got ${resolved.batchSize}`)
    if (!Number.isInteger(resolved.replayBatchSize) || resolved.replayBatchSize < 1) throw new RangeError(`options.replayBatchSize must be a positive integer, got ${resolved.replayBatchSize}`)
    if (!Number.isInteger(resolved.pollIntervalMs) || resolved.pollIntervalMs < 1) throw new RangeError(`options.pollIntervalMs must be a positive integer, got ${resolved.pollIntervalMs}`)
    if (typeof resolved.allowEmpty !== 'boolean') throw new TypeError('options.allowEmpty must be a boolean')
    this.options = Object.freeze(resolved)
    this.#o = options
  }

  /** The partition store; available after start(). */
  get store(): PartitionStore {
    if (this.#store === undefined) throw new TidemarkError('TIDEMARK_PROCESSOR_CLOSED', 'the processor is not started')
    return this.#store
  }

  /** The store's position in the source, or undefined before the first commit. */
  get offset(): bigint | undefined {
    return this.#store?.position(this.#o.topic, this.#o.partition)
  }

  /** Restores the state and opens the store. */
  async start(): Promise<StartResult> {
    if (this.#state !== 'new') throw new TidemarkError('TIDEMARK_PROCESSOR_CLOSED', `start() was already called (state: ${this.#state})`)
    this.#state = 'starting'
    const o = this.#o
    const t0 = performance.now()
    try {
      let restored: RestoreResult | undefined
      let epoch = 0
      if (o.snapshots !== undefined) {
        const meter = new ProgressMeter('restore', (p) => this.emit('progress', p))
        restored = await restoreSnapshot({
          snapshotStore: o.snapshots.store,
          job: o.job,
          partition: o.partition,
          target: o.path,
          allowEmpty: this.options.allowEmpty,
          ...(o.downloadConcurrency === undefined ? {} : { downloadConcurrency: o.downloadConcurrency }),
          onProgress: (p) => meter.update(p.bytesDownloaded, p.bytesTotal),
          onEvent: (event) => this.emit('restore', event),
        })
        meter.finish()
        // A new owner takes a higher epoch than every snapshot written so far,
        // so that a previous owner that is still running is fenced off.
        const refs = await listManifests(o.snapshots.store, new SnapshotLayout(o.job, o.partition))
        epoch = refs.reduce((max, r) => Math.max(max, r.epoch + 1), 0)
      } else {
        await mkdir(dirname(o.path), { recursive: true })
      }
      this.#store = await PartitionStore.open({ ...o.store, path: o.path, states: o.states })
      if (o.snapshots !== undefined) {
        const { store, schedule, onClose: _onClose, ...rest } = o.snapshots
        this.#snapshotter = new Snapshotter({ ...rest, snapshotStore: store, partitionStore: this.#store, job: o.job, partition: o.partition, epoch })
        this.#scheduler = new SnapshotScheduler(this.#snapshotter, {
          ...schedule,
          onSnapshot: (result) => this.emit('snapshot', result),
          onError: (error) => this.emit('snapshot-failed', error),
        })
        this.#scheduler.start()
      }
      this.#sync = new PartitionSynchronizer({
        store: this.#store,
        log: o.log,
        topic: o.topic,
        partition: o.partition,
        handler: o.handler,
        codec: o.codec ?? jsonCodec<E>(),
        batchSize: this.options.batchSize,
      })
      this.#state = 'running'
      const result: StartResult = {
        source: restored?.source ?? (this.offset === undefined ? 'empty' : 'local'),
        ...(restored?.snapshot === undefined ? {} : { snapshot: restored.snapshot.id }),
        skipped: restored?.skipped ?? [],
        bytesDownloaded: restored?.bytesDownloaded ?? 0,
        restoreMs: performance.now() - t0,
        offset: this.offset,
        epoch,
      }
      this.emit('started', result)
      return result
    } catch (err) {
      await this.#shutdown()
      throw err
    }
  }

  /**
   * Applies every event up to the log's tail as it is now (the first call
   * after start() is the replay, committed every replayBatchSize events) and
   * resolves with the number applied.
   */
  async catchUp(options: { end?: bigint; signal?: AbortSignal } = {}): Promise<number> {
    const sync = this.#running()
    const from = sync.getRevision() + 1n
    const tail = options.end ?? (await this.#o.log.tail())
    const meter = new ProgressMeter(this.#replayed ? 'process' : 'replay', (p) => this.emit('progress', p))
    const total = Number(tail > from ? tail - from : 0n)
    let done = 0
    try {
      const applied = await sync.fetchUpdates({
        ...(options.end === undefined ? { end: tail } : { end: options.end }),
        ...(options.signal === undefined ? {} : { signal: options.signal }),
        batchSize: this.#replayed ? this.options.batchSize : this.options.replayBatchSize,
        onBatch: ({ events, offset, bytes }) => {
          done += events
          meter.update(done, Math.max(total, done))
          this.emit('commit', { events, offset })
          this.#scheduler?.noteCommit(events, bytes)
        },
      })
      meter.finish()
      this.#replayed = true
      return applied
    } catch (err) {
      // A failed batch stops the partition: its owner restarts it, which
      // resumes at the first event of that batch.
      await this.#shutdown()
      throw err
    }
  }

  /** Processes until the signal aborts (then resolves) or an error stops the partition (then rejects). */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const applied = await this.catchUp({ signal })
      if (applied === 0 && !signal.aborted) await waitFor(this.options.pollIntervalMs, signal)
    }
  }

  /** Takes a snapshot now (waiting for one in flight first); undefined when snapshots are off or it failed. */
  async snapshot(): Promise<SnapshotResult | undefined> {
    this.#running()
    return this.#scheduler?.trigger()
  }

  /** Stops scheduling, waits for a snapshot in flight (and takes one if snapshots.onClose), closes the store. */
  async close(): Promise<void> {
    if (this.#state === 'closed') return
    if (this.#state === 'running' && this.#o.snapshots?.onClose === true) await this.#scheduler?.trigger()
    await this.#shutdown()
  }

  #running(): PartitionSynchronizer<E> {
    if (this.#state !== 'running' || this.#sync === undefined) {
      throw new TidemarkError('TIDEMARK_PROCESSOR_CLOSED', `partition ${this.#o.topic}/${this.#o.partition} is ${this.#state === 'closed' ? 'stopped' : 'not started'}`)
    }
    return this.#sync
  }

  async #shutdown(): Promise<void> {
    this.#state = 'closed'
    await this.#scheduler?.stop()
    await this.#snapshotter?.close()
    await this.#store?.close()
  }
}

function waitFor(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms)
    function done(): void {
      clearTimeout(timer)
      signal.removeEventListener('abort', done)
      resolve()
    }
    signal.addEventListener('abort', done, { once: true })
  })
}
