import { EventEmitter } from 'node:events'
import { mkdir } from 'node:fs/promises'
import { dirname } from 'node:path'
import { asTidemarkError, isTidemarkError, TidemarkError } from '../errors.js'
import type { SnapshotStore } from '../dfs/snapshot-store.js'
import { assertRevision, type RevisionedLog } from '../log/revisioned-log.js'
import { acquireClaim, CLAIM_DEFAULTS, type Claim, type ClaimTakeover } from '../ownership/claim.js'
import { jsonCodec, type Codec } from '../store/codec.js'
import { PartitionStore, type PartitionStoreOptions } from '../store/partition-store.js'
import type { StateDefinition } from '../store/state.js'
import { listManifests, readValidManifests, type InvalidManifest, type ManifestRef, type ValidManifests } from '../snapshot/catalog.js'
import { MAX_EPOCH, SnapshotLayout } from '../snapshot/layout.js'
import { restoreSnapshot, type RestoreEvent, type RestoreResult, type SkippedSnapshot } from '../snapshot/restore.js'
import { SnapshotScheduler, type SnapshotSchedulerOptions } from '../snapshot/scheduler.js'
import { Snapshotter, type SnapshotResult, type SnapshotterEvent, type SnapshotterOptions } from '../snapshot/snapshotter.js'
import { PartitionSynchronizer, type EventHandler } from './partition-synchronizer.js'
import { ProgressMeter, type Progress } from './progress.js'
import { checkLogger, errorFields, type Logger } from '../logging/logger.js'
import { callListener } from '../logging/listener.js'
import { PartitionMetrics } from '../metrics/partition-metrics.js'
import { observeProcessorEvent } from './observe.js'
import { eventIdHeader, PartitionOutputs } from '../outputs/partition-outputs.js'
import { resolveDedupe, resolveOutputs } from '../outputs/options.js'
import type { DedupeMode, EmitContext, OutputsEvent, OutputsOptions } from '../outputs/types.js'
import { describe } from '../describe.js'

export interface SnapshotSettings
  extends Pick<SnapshotterOptions, 'retain' | 'graceMs' | 'maxAmplification' | 'maxChainLength' | 'uploadConcurrency' | 'maxObjectBytes' | 'gcEverySnapshots' | 'gcIntervalMs' | 'checkpoint'> {
  /** Where snapshots go and come from. */
  store: SnapshotStore
  /** When to snapshot (time, events, bytes committed since the last one). */
  schedule?: Omit<SnapshotSchedulerOptions, 'onSnapshot' | 'onError'>
  /** Take a snapshot in close() that covers everything committed (after one in flight). Default false. */
  onClose?: boolean
}

/**
 * The partition's claim (docs/ownership.md), which a processor with
 * snapshots takes before it restores: exactly one processor of a partition
 * runs at a time, and one that loses the claim stops.
 */
export interface OwnershipSettings {
  /** How long the claim holds without a renewal; the processor renews it every third of this. Default 30 s (CLAIM_DEFAULTS.leaseMs). */
  leaseMs?: number
  /**
   * `'if-expired'` (default): start only when no other owner holds a live
   * lease (else TIDEMARK_OWNERSHIP_CONFLICT). `'force'`: take the claim
   * whatever its lease says, for a supervisor or operator that knows the
   * previous owner is dead; a previous owner still running is fenced and stops.
   */
  takeover?: ClaimTakeover
  /** A name for humans, recorded in the claim (default `<host>:<pid>`). */
  owner?: string
  /** Milliseconds since the Unix epoch (default Date.now), for the lease; tests move it to expire leases without waiting. */
  clock?: () => number
}

/** What the processor reports about its claim. */
export type OwnershipEvent =
  /** A renewal failed with a store error; the next tick retries it, and no batch commits once the lease has run out without one succeeding. */
  | { type: 'renew-failed'; error: TidemarkError; leaseUntil: number | null }
  /** The claim was taken by another owner (or the snapshots were fenced by a newer epoch): the partition stops with this error. */
  | { type: 'lost'; error: TidemarkError }
  /** close() could not release the claim (a store error); the next owner gets it once the lease runs out. */
  | { type: 'release-failed'; error: TidemarkError }

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
  /** The context's emit() exists when `outputs` is set (docs/outputs.md); any EventHandler fits. */
  handler: (tx: Parameters<EventHandler<E>>[0], event: E, context: Parameters<EventHandler<E>>[2] & EmitContext) => void | Promise<void>
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
  /** The partition's claim, taken in start() when `snapshots` is set (it lives in the snapshot store). */
  ownership?: OwnershipSettings
  /** Where the processor, its snapshotter and its restore log (pino-compatible); nothing is logged without one. */
  logger?: Logger
  /** Exactly-once outputs: ctx.emit() writes to an outbox committed with the batch, delivered to `sink` after it (docs/outputs.md). */
  outputs?: OutputsOptions
  /** `'tidemark-ids'`: events whose `headers['tidemark-id']` was already applied are skipped (events from outboxRecordCodec()). Default 'off'. */
  dedupe?: DedupeMode
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
  /** This owner's epoch: its claim's, above every earlier claim's and every snapshot that verifies (0 without snapshots). */
  epoch: number
}

export interface ProcessorEvents {
  /** Restore (bytes) and replay (events) progress with an estimate of the time left. */
  progress: [Progress]
  started: [StartResult]
  /** A batch was committed. */
  commit: [{ events: number; offset: bigint }]
  snapshot: [SnapshotResult]
  /**
   * A snapshot failed; processing goes on and the previous snapshot stays the
   * latest. Not emitted once the partition has stopped on an error, nor for a
   * failure of the partition store itself, which stops the partition instead.
   * An error that is no TidemarkError (a bug, say) arrives as the cause of a
   * TIDEMARK_SNAPSHOT_UPLOAD_FAILED that is not retriable.
   */
  'snapshot-failed': [TidemarkError]
  /** Reports from the restore: snapshots skipped and why (also manifests that do not verify), the local store used or replaced. */
  restore: [RestoreEvent]
  /** Reports from the snapshotter that fail no snapshot: manifests that do not verify, objects uploaded again, a failed gc. */
  snapshotter: [SnapshotterEvent]
  /** The partition's claim: a failed renewal or release, the claim lost. */
  ownership: [OwnershipEvent]
  /** Outputs: delivered, delivery-failed, outbox-full, outbox-resumed, duplicate-skipped. */
  outputs: [OutputsEvent]
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
  readonly #ownership: ResolvedOwnership | undefined
  #claim: Claim | undefined
  #renewTimer: NodeJS.Timeout | undefined
  #renewing = false
  /** Aborted when the partition stops on a failure, so that run() does not sleep through it. */
  readonly #stopped = new AbortController()
  /** The catch-up running or queued last (catchUp() runs them one at a time). */
  #catchingUp: Promise<unknown> = Promise.resolve()
  #state: 'new' | 'starting' | 'running' | 'closed' = 'new'
  #replayed = false
  /** The error that stopped the partition: the first one, which is the one reported. */
  #failure: { error: unknown } | undefined
  readonly #logger: Logger
  /** Publishes to the metrics channels (docs/metrics.md); costs a property read per call while nobody subscribes. */
  readonly #metrics: PartitionMetrics
  #commitStartedAt = 0
  readonly #outputs: PartitionOutputs

  constructor(options: PartitionProcessorOptions<E>) {
    super()
    // Every event also goes to the logger and the metrics channels (observe.ts).
    // Assigned, not an `override emit`: no typed signature fits the emit of
    // every @types/node (25+ types it for any event name), and one in the
    // published declarations broke apps' builds. Callers keep EventEmitter's typing.
    this.emit = (<K extends keyof ProcessorEvents>(event: K, ...args: ProcessorEvents[K]): boolean => {
      observeProcessorEvent(this.#logger, this.#metrics, event, args[0])
      if (!BACKGROUND_EVENTS.has(event)) return super.emit(event, ...(args as never))
      return callListener(() => super.emit(event, ...(args as never)), true, this.#logger, { topic: this.#o.topic, partition: this.#o.partition, event })
    }) as this['emit']
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
    this.#ownership = resolveOwnership(options.ownership, options.snapshots)
    this.#outputs = new PartitionOutputs({
      job: options.job, topic: options.topic, partition: options.partition,
      outputs: resolveOutputs(options.outputs), dedupe: resolveDedupe(options.dedupe),
      onEvent: (event) => this.emit('outputs', event),
      onStoreFailed: (error) => this.#fail(error),
      onDepth: (depth) => this.#metrics.outbox(depth),
    })
    this.#logger = checkLogger(options.logger, 'options.logger')
    this.#metrics = new PartitionMetrics({ job: options.job, topic: options.topic, partition: options.partition })
    this.#o = options
  }

  /** The partition's claim while this processor holds it (or last held it); undefined without snapshots or before start(). */
  get claim(): Claim | undefined {
    return this.#claim
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

  /**
   * Takes the partition's claim (with snapshots), restores the state and
   * opens the store. Fails with TIDEMARK_OWNERSHIP_CONFLICT (retriable) when
   * another owner holds the claim; nothing is written then, and the local
   * store is not touched.
   */
  async start(): Promise<StartResult> {
    if (this.#state !== 'new') throw new TidemarkError('TIDEMARK_PROCESSOR_CLOSED', `start() was already called (state: ${this.#state})`)
    this.#state = 'starting'
    const o = this.#o
    const t0 = performance.now()
    try {
      let restored: RestoreResult | undefined
      let epoch = 0
      let skipped: SkippedSnapshot[] = []
      let knownManifests: { refs: ManifestRef[]; valid: ValidManifests['valid'] } | undefined
      if (o.snapshots !== undefined) {
        // The claim comes first: nothing touches the partition store before
        // it is held. Its epoch is above every snapshot that verifies, so
        // this owner's snapshots fence every writer before it.
        // This one listing serves the restore and the first snapshot too
        // (knownManifests): a start on an intact local store lists once.
        const listed = await this.#verifiedManifests(o.snapshots.store)
        const { newest, invalid } = listed
        this.#claim = await this.#acquire(o.snapshots.store, newest)
        // A previous owner that released the claim after that listing may
        // have committed a snapshot it lacks (its last one, recorded in the
        // claim it released): then the restore lists again.
        const known = this.#claim.listingIsCurrent(listed.known.refs) ? listed.known : undefined
        epoch = this.#claim.epoch
        this.#startRenewing(this.#claim)
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
          logger: this.#logger,
          knownManifests: known,
        })
        meter.finish()
        knownManifests = known
        skipped = this.#skipped(restored, invalid)
      } else {
        await mkdir(dirname(o.path), { recursive: true })
      }
      this.#store = await PartitionStore.open({ ...o.store, path: o.path, states: this.#outputs.states(o.states) })
      await this.#outputs.attach(this.#store)
      if (o.snapshots !== undefined) {
        const { store, schedule, onClose: _onClose, ...rest } = o.snapshots
        const claim = this.#claim!
        this.#snapshotter = new Snapshotter({
          ...rest,
          snapshotStore: store,
          partitionStore: this.#store,
          job: o.job,
          partition: o.partition,
          epoch,
          onEvent: (event) => this.emit('snapshotter', event),
          logger: this.#logger,
          // One HEAD right before the manifest: a snapshot of an owner that
          // lost the claim does not commit (epoch order covers the rest).
          beforeCommit: () => claim.check(),
          ...(knownManifests === undefined ? {} : { knownManifests }),
          // Its first snapshot (a hand-off, often) then hashes only what is new.
          ...(restored?.verifiedFiles === undefined ? {} : { verifiedFiles: restored.verifiedFiles }),
        })
        // Hashes ahead what the first snapshot would hash: off a hand-off's critical path.
        void this.#snapshotter.prepare()
        this.#scheduler = new SnapshotScheduler(this.#snapshotter, {
          ...schedule,
          onSnapshot: (result) => this.emit('snapshot', result),
          onError: (error) => this.#snapshotFailed(error),
        })
        this.#scheduler.start()
      }
      this.#sync = new PartitionSynchronizer({
        store: this.#store,
        log: o.log,
        topic: o.topic,
        partition: o.partition,
        handler: this.#outputs.wrap(o.handler as Parameters<PartitionOutputs['wrap']>[0], eventIdHeader) as EventHandler<E>,
        codec: o.codec ?? jsonCodec<E>(),
        batchSize: this.options.batchSize,
      })
      // The claim was lost while restoring.
      if (this.#failure !== undefined) throw this.#failure.error
      this.#state = 'running'
      const result: StartResult = {
        source: restored?.source ?? (this.offset === undefined ? 'empty' : 'local'),
        ...(restored?.snapshot === undefined ? {} : { snapshot: restored.snapshot.id }),
        skipped,
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
   * resolves with the number applied. A call made while another catch-up
   * runs (run()'s, say) waits for it and then catches up from where it ended.
   */
  async catchUp(options: { end?: bigint; signal?: AbortSignal } = {}): Promise<number> {
    if (typeof options !== 'object' || options === null) throw new TypeError(`catchUp(options): options must be an object ({ end?, signal? }), got ${describe(options)}`)
    if (options.end !== undefined) assertRevision(options.end, 'catchUp(options): options.end', 0n)
    if (options.signal !== undefined) checkSignal(options.signal, 'catchUp(options): options.signal')
    // One at a time: two would read from the same position and apply the
    // same events, and the second's commit would be refused (not after the
    // stored position), stopping the partition.
    const mine = this.#catchingUp.then(() => this.#catchUp(options))
    this.#catchingUp = mine.catch(() => undefined)
    return mine
  }

  async #catchUp(options: { end?: bigint; signal?: AbortSignal }): Promise<number> {
    // The store failed while no catch-up ran (the reopen after a checkpoint).
    if (this.#failure !== undefined && this.#state === 'running') {
      await this.#stopOnFailure()
      throw this.#failure.error
    }
    const sync = this.#running()
    const from = sync.getRevision() + 1n
    const tail = options.end ?? (await this.#o.log.tail())
    const meter = new ProgressMeter(this.#replayed ? 'process' : 'replay', (p) => this.emit('progress', p))
    const total = Number(tail > from ? tail - from : 0n)
    // Lag is against the log's tail, not an end the caller chose.
    const logTail = options.end === undefined ? tail : undefined
    if (logTail !== undefined) this.#metrics.lag(this.offset, logTail)
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
          this.#metrics.committed(events, bytes, offset, this.#commitStartedAt, logTail)
          this.#scheduler?.noteCommit(events, bytes)
          this.#outputs.committed(offset)
        },
        // Closed (by close(): a failure is recorded before the shutdown), a
        // commit fails because the store closed under it: no failure.
        onCommitFailed: (error) => { if (this.#state !== 'closed') this.#fail(error) },
        beforeCommit: this.#outputs.enabled ? this.#beforeCommitWithRoom : this.#beforeBatchCommit,
      })
      // An idle live loop (run() polls every pollIntervalMs) has nothing to
      // report: a final report of 0 of 0 events would come 20 times a second.
      if (!this.#replayed || done > 0) meter.finish()
      this.#replayed = true
      return applied
    } catch (err) {
      // close() during the catch-up closed the store under the batch in
      // flight: that batch was not committed, by the caller's doing; no
      // failure of the partition (nor an error in its log).
      if (this.#state === 'closed' && this.#failure === undefined) {
        throw new TidemarkError('TIDEMARK_PROCESSOR_CLOSED', `partition ${this.#o.topic}/${this.#o.partition} was closed during the catch-up; the batch in flight was not committed (the next owner applies it)`, { cause: err })
      }
      // A failed batch stops the partition: its owner restarts it, which
      // resumes at the first event of that batch. The first failure is the
      // one reported (a snapshot may have found the store failed first).
      this.#fail(err)
      await this.#stopOnFailure()
      throw this.#failure!.error
    }
  }

  /** Processes until the signal aborts (then resolves) or an error stops the partition (then rejects). */
  async run(signal: AbortSignal): Promise<void> {
    // Checked here: a junk signal would otherwise fail in a timer's callback, outside any promise.
    checkSignal(signal, 'run(signal): signal')
    while (!signal.aborted) {
      const applied = await this.catchUp({ signal })
      if (applied === 0 && !signal.aborted) await waitFor(this.options.pollIntervalMs, signal, this.#stopped.signal)
    }
  }

  /**
   * Takes a snapshot that covers everything committed when it is called
   * (after waiting for one in flight, which is returned only if it already
   * covers that); undefined when snapshots are off or it failed.
   */
  async snapshot(): Promise<SnapshotResult | undefined> {
    this.#running()
    return this.#scheduler?.trigger()
  }

  /**
   * Stops scheduling, waits for a snapshot in flight (and then takes one if
   * snapshots.onClose), closes the store, and releases the claim so that the
   * next owner starts at once.
   */
  async close(): Promise<void> {
    if (this.#state === 'closed') return
    if (this.#state === 'running' && this.#failure === undefined && this.#o.snapshots?.onClose === true) await this.#scheduler?.trigger()
    await this.#shutdown()
  }

  #running(): PartitionSynchronizer<E> {
    if (this.#state !== 'running' || this.#sync === undefined || this.#failure !== undefined) {
      throw new TidemarkError(
        'TIDEMARK_PROCESSOR_CLOSED',
        `partition ${this.#o.topic}/${this.#o.partition} is ${this.#failure !== undefined ? 'stopped after an error' : this.#state === 'closed' ? 'stopped' : 'not started'}`,
        this.#failure === undefined ? {} : { cause: this.#failure.error },
      )
    }
    return this.#sync
  }

  /**
   * The highest epoch among the partition's snapshots that verify: the new
   * claim's epoch goes above it, so that a previous owner that is still
   * running is fenced off, also one that never held a claim. Only manifests
   * that verify count: a key is only a name, and junk named with the largest
   * epoch must not make the job unstartable. The listing and the manifests
   * read (`known`) are handed on, so that no one lists or reads them again.
   */
  async #verifiedManifests(store: SnapshotStore): Promise<{ newest: number; invalid: InvalidManifest[]; known: { refs: ManifestRef[]; valid: ValidManifests['valid'] } }> {
    const layout = new SnapshotLayout(this.#o.job, this.#o.partition)
    const refs = await listManifests(store, layout)
    const { valid, invalid } = await readValidManifests(store, layout, refs)
    const known = { refs, valid }
    const newest = valid[0]?.ref
    if (newest === undefined) return { newest: 0, invalid, known }
    if (newest.epoch >= MAX_EPOCH) {
      throw new TidemarkError(
        'TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED',
        `snapshot ${newest.key} has epoch ${newest.epoch}, the largest there is: no new owner of ${layout.prefix} can take an epoch above it to fence the previous one; move the partition's snapshots aside`,
        { details: { job: layout.job, partition: layout.partition, key: newest.key, epoch: newest.epoch } },
      )
    }
    return { newest: newest.epoch, invalid, known }
  }

  /**
   * The restore's skipped snapshots and the manifests that do not verify
   * and that the restore did not try (reported here), newest first.
   */
  #skipped(restored: RestoreResult, invalid: readonly InvalidManifest[]): SkippedSnapshot[] {
    const reported = new Set(restored.skipped.map((s) => s.key))
    const unreported: SkippedSnapshot[] = invalid
      .filter((m) => !reported.has(m.ref.key))
      .map((m) => ({ id: m.ref.id, key: m.ref.key, reason: m.reason, message: m.message }))
    for (const skipped of unreported) this.emit('restore', { type: 'snapshot-skipped', skipped })
    // Keys hold the zero-padded (epoch, sequence): descending keys are newest first.
    return [...restored.skipped, ...unreported].sort((a, b) => (a.key < b.key ? 1 : a.key > b.key ? -1 : 0))
  }

  /** Takes the claim (acquireClaim runs a race again that a force lost to the replaced holder's own renewal). */
  async #acquire(store: SnapshotStore, minEpoch: number): Promise<Claim> {
    const own = this.#ownership!
    return acquireClaim({
      store, job: this.#o.job, partition: this.#o.partition, minEpoch, leaseMs: own.leaseMs, takeover: own.takeover, clock: own.clock,
      ...(own.owner === undefined ? {} : { owner: own.owner }),
    })
  }

  #startRenewing(claim: Claim): void {
    this.#renewTimer = setInterval(() => void this.#renew(claim), claim.renewIntervalMs)
    // The lease must not keep a process alive that has nothing else to do.
    this.#renewTimer.unref()
  }

  async #renew(claim: Claim): Promise<void> {
    // A slow store must not pile up renewals; the next tick tries again.
    if (this.#renewing || claim.state !== 'held') return
    this.#renewing = true
    try {
      await claim.renew()
    } catch (error) {
      if (isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST')) this.#lost(error)
      else this.emit('ownership', { type: 'renew-failed', error: asTidemarkError(error, 'TIDEMARK_DFS_REQUEST_FAILED', 'renewing the claim failed', { retriable: true }), leaseUntil: claim.leaseUntil })
    } finally {
      this.#renewing = false
    }
  }

  /**
   * Before each batch commit: nothing more is committed once the partition
   * stopped (the claim lost), nor once the lease has run out by this host's
   * clock without a renewal: then another owner may hold the partition,
   * and only a renewal that succeeds now proves it does not.
   */
  readonly #beforeBatchCommit = (): Promise<void> | undefined => {
    if (this.#failure !== undefined) throw this.#failure.error
    this.#commitStartedAt = this.#metrics.commitStarted()
    const claim = this.#claim
    if (claim === undefined || claim.leaseUntil === null || this.#ownership!.clock() < claim.leaseUntil) return undefined
    return claim.renew().catch((error: unknown) => {
      if (isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST')) this.#lost(error)
      throw error
    })
  }

  /**
   * With outputs: a batch commits only while the committed outbox is below
   * its limit; otherwise the partition waits here (its batch in memory,
   * nothing written) until delivery makes room.
   */
  readonly #beforeCommitWithRoom = (): Promise<void> | undefined => {
    if (this.#failure !== undefined) throw this.#failure.error
    const room = this.#outputs.waitForRoom()
    return room === undefined ? this.#beforeBatchCommit() : room.then(() => this.#beforeBatchCommit())
  }

  /** Resolves once every output committed so far was delivered (immediately without outputs). */
  async flushOutputs(): Promise<void> {
    await this.#outputs.publisher?.flush()
  }

  /** The claim is gone: the partition stops within the batch in flight. */
  #lost(error: unknown): void {
    if (this.#failure !== undefined) return
    this.emit('ownership', { type: 'lost', error: asTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST', 'the claim was lost') })
    this.#fail(error)
  }

  /**
   * Only the first failure stops the partition and is reported: after the
   * store failed (a commit, the reopen after a checkpoint), other calls of
   * it fail too, and those errors say nothing new.
   */
  #fail(error: unknown): void {
    if (this.#failure !== undefined) return
    this.#failure = { error }
    this.#logger.error({ job: this.#o.job, topic: this.#o.topic, partition: this.#o.partition, ...errorFields(error) }, 'partition stopped')
    // No new snapshot of a failed partition; one in flight finishes (and
    // does not commit once the claim is lost: its check fails).
    void this.#scheduler?.stop()
    this.#stopped.abort(error)
  }

  #snapshotFailed(error: unknown): void {
    if (this.#failure !== undefined) return
    // Another owner holds the partition: its claim, or snapshots of a newer
    // epoch. That is no snapshot failure to retry but the end of this owner.
    if (isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST') || (this.#claim !== undefined && isTidemarkError(error, 'TIDEMARK_SNAPSHOT_FENCED'))) {
      this.#lost(error)
      return
    }
    // The partition store itself failed (its reopen after the checkpoint):
    // processing cannot go on, so the partition stops with this error.
    if (isTidemarkError(error) && error.code.startsWith('TIDEMARK_STORE_') && !error.retriable) {
      this.#fail(error)
      return
    }
    this.emit('snapshot-failed', asTidemarkError(error, 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', `snapshot of ${this.#o.topic}/${this.#o.partition} failed`, { retriable: false }))
  }

  /** Shuts down after a failure; an error of the shutdown (closing a store that failed) adds nothing to the failure. */
  async #stopOnFailure(): Promise<void> {
    await this.#shutdown().catch(() => undefined)
  }

  async #shutdown(): Promise<void> {
    this.#state = 'closed'
    if (this.#renewTimer !== undefined) clearInterval(this.#renewTimer)
    this.#renewTimer = undefined
    try {
      await this.#scheduler?.stop()
      await this.#snapshotter?.close()
      await this.#outputs.close()
      await this.#store?.close()
    } finally {
      // Last, once nothing of this owner can write any more. A claim that
      // was lost is not released (no request is made).
      await this.#release()
    }
  }

  async #release(): Promise<void> {
    try {
      const lastSnapshot = this.#snapshotter?.lastCommitted
      await this.#claim?.release(lastSnapshot === undefined ? {} : { lastSnapshot })
    } catch (error) {
      // The lease runs out on its own; the next owner just waits for it.
      this.emit('ownership', { type: 'release-failed', error: asTidemarkError(error, 'TIDEMARK_DFS_REQUEST_FAILED', 'releasing the claim failed', { retriable: true }) })
    }
  }
}

type ResolvedOwnership = Readonly<Required<Omit<OwnershipSettings, 'owner'>> & Pick<OwnershipSettings, 'owner'>>

function resolveOwnership(value: OwnershipSettings | undefined, snapshots: SnapshotSettings | undefined): ResolvedOwnership | undefined {
  if (snapshots === undefined) {
    if (value !== undefined) throw new RangeError('options.ownership needs options.snapshots: the partition\'s claim lives in the snapshot store')
    return undefined
  }
  const store = snapshots.store
  if (store.capabilities?.conditionalPut !== true || store.capabilities.compareAndSwap !== true) {
    throw new RangeError(`options.snapshots.store (${store.url}) cannot hold the partition's claim: it needs capabilities.conditionalPut and capabilities.compareAndSwap (conditional puts; a server that ignores them is opened with conditionalPut: false)`)
  }
  if (value !== undefined && (value === null || typeof value !== 'object')) throw new TypeError(`options.ownership must be an object, got ${describe(value)}`)
  const known = ['leaseMs', 'takeover', 'owner', 'clock']
  for (const name of Object.keys(value ?? {})) {
    if (!known.includes(name)) throw new RangeError(`unknown option options.ownership.${name}; known: ${known.join(', ')}`)
  }
  const { leaseMs = CLAIM_DEFAULTS.leaseMs, takeover = CLAIM_DEFAULTS.takeover, owner, clock = Date.now } = value ?? {}
  if (typeof leaseMs !== 'number') throw new TypeError(`options.ownership.leaseMs must be a number, got ${typeof leaseMs}`)
  // Renewed on a timer every third of it, and timers hold at most 2^31 - 1 ms.
  if (!Number.isSafeInteger(leaseMs) || leaseMs < 3 || leaseMs > 2 ** 31 - 1) throw new RangeError(`options.ownership.leaseMs must be an integer from 3 to ${2 ** 31 - 1} (ms), got ${leaseMs}`)
  if (takeover !== 'if-expired' && takeover !== 'force') throw new RangeError(`options.ownership.takeover must be 'if-expired' or 'force', got ${JSON.stringify(takeover)}`)
  if (owner !== undefined && (typeof owner !== 'string' || owner === '')) throw new TypeError(`options.ownership.owner must be a non-empty string, got ${JSON.stringify(owner)}`)
  if (typeof clock !== 'function') throw new TypeError(`options.ownership.clock must be a function returning milliseconds, got ${typeof clock}`)
  return Object.freeze({ leaseMs, takeover, clock, ...(owner === undefined ? {} : { owner }) })
}

/**
 * Events sent from the background (the lease's renewal timer, scheduled
 * snapshots, the outbox's delivery): a listener's throw is logged, not
 * passed on. progress, started and commit reach the caller of start() or
 * catchUp(), like any EventEmitter's, and stop the partition.
 */
const BACKGROUND_EVENTS: ReadonlySet<keyof ProcessorEvents> = new Set(['snapshot', 'snapshot-failed', 'snapshotter', 'restore', 'ownership', 'outputs'])

function checkSignal(signal: unknown, what: string): void {
  if (!(signal instanceof AbortSignal)) throw new TypeError(`${what} must be an AbortSignal (from an AbortController), got ${describe(signal)}`)
}

function waitFor(ms: number, ...signals: AbortSignal[]): Promise<void> {
  if (signals.some((s) => s.aborted)) return Promise.resolve()
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms)
    function done(): void {
      clearTimeout(timer)
      for (const signal of signals) signal.removeEventListener('abort', done)
      resolve()
    }
    for (const signal of signals) signal.addEventListener('abort', done, { once: true })
  })
}
