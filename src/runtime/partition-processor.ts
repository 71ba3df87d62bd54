import { EventEmitter } from 'node:events'
import { TidemarkError } from '../errors.js'
import { onAppendHere } from '../log/index.js'
import { assertRevision } from '../log/revisioned-log.js'
import { CLAIM_DEFAULTS, type Claim } from '../ownership/claim.js'
import { MemberLease } from '../ownership/member-lease.js'
import { jsonCodec } from '../store/codec.js'
import type { PartitionStore } from '../store/partition-store.js'
import type { SnapshotResult } from '../snapshot/snapshotter-types.js'
import { PartitionSynchronizer, type EventHandler } from './partition-synchronizer.js'
import { ProgressMeter } from './progress.js'
import { checkLogger, type Logger } from '../logging/logger.js'
import { callListener } from '../logging/listener.js'
import { PartitionMetrics } from '../metrics/partition-metrics.js'
import { observeProcessorEvent } from './observe.js'
import { eventIdHeader, PartitionOutputs } from '../outputs/partition-outputs.js'
import { resolveDedupe, resolveOutputs } from '../outputs/options.js'
import { describeValue } from '../util/describe-value.js'
import { sleep } from '../util/index.js'
import { catchUpTurn } from './catch-up-turns.js'
import { checkClaimStore } from './claim-store.js'
import { PartitionLifecycle } from './partition-lifecycle.js'
import { checkStateSizeLimit } from './state-size.js'
import { PROCESSOR_DEFAULTS, type OwnershipSettings, type PartitionProcessorOptions, type ProcessorEvents, type SnapshotSettings, type StartResult } from './processor-options.js'

export type { OwnershipEvent } from './partition-lifecycle.js'

export { PROCESSOR_DEFAULTS } from './processor-options.js'
export type { OwnershipSettings, PartitionProcessorOptions, ProcessorEvents, SnapshotSettings, StartResult } from './processor-options.js'

/**
 * The longest a caught-up run() waits between looks at a FileLog that no
 * append of this process has woken it from (run()): what an append of
 * another process may wait, after a quiet spell, before it is processed.
 */
const IDLE_POLL_MAX_MS = 1000

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
  /** The claim, restore, store, outputs, snapshots, failure policy and shutdown: what the consumer group's tasks share. */
  readonly #life: PartitionLifecycle
  #sync: PartitionSynchronizer<E> | undefined
  /** The catch-up running or queued last (catchUp() runs them one at a time). */
  #catchingUp: Promise<unknown> = Promise.resolve()
  #state: 'new' | 'starting' | 'running' | 'closed' = 'new'
  #replayed = false
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
    const ownership = resolveOwnership(options.ownership, options.snapshots)
    const stateSizeLimit = checkStateSizeLimit(options.stateSizeLimit, 'options.stateSizeLimit')
    this.#logger = checkLogger(options.logger, 'options.logger')
    this.#metrics = new PartitionMetrics({ job: options.job, topic: options.topic, partition: options.partition })
    this.#outputs = new PartitionOutputs({
      job: options.job, topic: options.topic, partition: options.partition,
      outputs: resolveOutputs(options.outputs), dedupe: resolveDedupe(options.dedupe),
      onEvent: (event) => this.emit('outputs', event),
      onStoreFailed: (error) => this.#life.fail(error),
      onDepth: (depth) => this.#metrics.outbox(depth),
    })
    this.#o = options
    this.#life = new PartitionLifecycle({
      job: options.job,
      key: options.partition,
      topic: options.topic,
      partition: options.partition,
      path: options.path,
      states: options.states,
      ...(options.store === undefined ? {} : { store: options.store }),
      ...(options.snapshots === undefined ? {} : { snapshots: options.snapshots }),
      ...(ownership === undefined ? {} : { claim: { kind: 'lease', ...ownership } }),
      allowEmpty: resolved.allowEmpty,
      ...(options.downloadConcurrency === undefined ? {} : { downloadConcurrency: options.downloadConcurrency }),
      stateSize: { limit: stateSizeLimit },
      outputs: this.#outputs,
      logger: this.#logger,
      events: {
        progress: (p) => this.emit('progress', p),
        restore: (event) => this.emit('restore', event),
        snapshot: (result) => this.emit('snapshot', result),
        snapshotFailed: (error) => this.emit('snapshot-failed', error),
        snapshotter: (event) => this.emit('snapshotter', event),
        ownership: (event) => this.emit('ownership', event),
        undeclaredStates: (states) => this.emit('states-undeclared', states),
        stateSize: (bytes, limit) => this.#metrics.stateSize(bytes, limit),
        stateSizeExceeded: (exceeded) => this.emit('state-size-exceeded', exceeded),
      },
    })
  }

  /** The partition's claim while this processor holds it (or last held it); undefined without snapshots or before start(). */
  get claim(): Claim | undefined {
    return this.#life.claim
  }

  /** The partition store; available after start(). */
  get store(): PartitionStore {
    const store = this.#life.store
    if (store === undefined) throw new TidemarkError('TIDEMARK_PROCESSOR_CLOSED', 'the processor is not started')
    return store
  }

  /** The store's position in the source, or undefined before the first commit. */
  get offset(): bigint | undefined {
    return this.#life.store?.position(this.#o.topic, this.#o.partition)
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
      const started = await this.#life.start()
      this.#sync = new PartitionSynchronizer({
        store: this.#life.store!,
        log: o.log,
        topic: o.topic,
        partition: o.partition,
        handler: this.#outputs.wrap(o.handler as Parameters<PartitionOutputs['wrap']>[0], eventIdHeader) as EventHandler<E>,
        codec: o.codec ?? jsonCodec<E>(),
        batchSize: this.options.batchSize,
      })
      this.#state = 'running'
      const { claimWaitMs: _waited, ...rest } = started
      const result: StartResult = {
        ...rest,
        restoreMs: performance.now() - t0,
        offset: this.offset,
      }
      this.emit('started', result)
      return result
    } catch (err) {
      this.#state = 'closed'
      await this.#life.shutdown()
      throw err
    }
  }

  /**
   * Applies every event up to the log's tail as it is now (the first call
   * after start() is the replay, committed every replayBatchSize events) and
   * resolves with the number applied. A call made while another catch-up
   * runs (run()'s, say) waits for it and then catches up from where it ended.
   * A partition more than `batchSize` events behind first waits for one of
   * the process's 64 catch-up turns, which every PartitionProcessor shares
   * (docs/partition-store.md, "Catch-ups take turns"); an abort of `signal`
   * while it waits resolves with 0.
   */
  async catchUp(options: { end?: bigint; signal?: AbortSignal } = {}): Promise<number> {
    if (typeof options !== 'object' || options === null) throw new TypeError(`catchUp(options): options must be an object ({ end?, signal? }), got ${describeValue(options)}`)
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
    let sync = await this.#ready()
    const from = sync.getRevision() + 1n
    const tail = options.end ?? (await this.#o.log.tail())
    const total = Number(tail > from ? tail - from : 0n)
    if (tail === from && this.#replayed) {
      // Nothing new: no read of the log (a second look at its files). A
      // tail behind the position still goes to the read, which reports it.
      if (options.end === undefined) this.#metrics.lag(this.offset, tail)
      return 0
    }
    if (total <= this.options.batchSize) return this.#fetch(sync, tail, total, options)
    // More than a live batch behind: a backlog, caught up in the process's
    // turns (catch-up-turns.ts: what a thousand at once would hold).
    const release = await catchUpTurn(options.signal)
    if (release === undefined) return 0
    try {
      // It may have stopped or been closed while it waited.
      sync = await this.#ready()
      return await this.#fetch(sync, tail, total, options)
    } finally {
      release()
    }
  }

  /** The synchronizer of a running partition; a partition that stopped while no catch-up ran (the store failed in the reopen after a checkpoint, the claim was lost) shuts down and throws its failure. */
  async #ready(): Promise<PartitionSynchronizer<E>> {
    const failure = this.#life.failure
    if (failure !== undefined && this.#state === 'running') {
      await this.#stopOnFailure()
      throw failure.error
    }
    return this.#running()
  }

  async #fetch(sync: PartitionSynchronizer<E>, tail: bigint, total: number, options: { end?: bigint; signal?: AbortSignal }): Promise<number> {
    const meter = new ProgressMeter(this.#replayed ? 'process' : 'replay', (p) => this.emit('progress', p))
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
          this.#life.committed(events, bytes, offset)
        },
        // Closed (by close(): a failure is recorded before the shutdown), a
        // commit fails because the store closed under it: no failure.
        onCommitFailed: (error) => { if (this.#state !== 'closed') this.#life.fail(error) },
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
      if (this.#state === 'closed' && this.#life.failure === undefined) {
        throw new TidemarkError('TIDEMARK_PROCESSOR_CLOSED', `partition ${this.#o.topic}/${this.#o.partition} was closed during the catch-up; the batch in flight was not committed (the next owner applies it)`, { cause: err })
      }
      // A failed batch stops the partition: its owner restarts it, which
      // resumes at the first event of that batch. The first failure is the
      // one reported (a snapshot may have found the store failed first).
      this.#life.fail(err)
      await this.#stopOnFailure()
      throw this.#life.failure!.error
    }
  }

  /**
   * Processes until the signal aborts (then resolves) or an error stops the
   * partition (then rejects). Caught up, it waits for the log: a FileLog
   * wakes it at once when an append is written in this process; appends of
   * other processes (and other logs) are found by looking again, after
   * pollIntervalMs, and with a FileLog that lets it know, after twice as
   * long at each look that finds nothing, up to IDLE_POLL_MAX_MS (or
   * pollIntervalMs when that is longer). Why: 1,024 idle partitions looking
   * at their files 20 times a second kept a core busy (issue 38).
   */
  async run(signal: AbortSignal): Promise<void> {
    // Checked here: a junk signal would otherwise fail in a timer's callback, outside any promise.
    checkSignal(signal, 'run(signal): signal')
    const every = this.options.pollIntervalMs
    let wait = every
    while (!signal.aborted) {
      // Before the look, so that an append written after it ends the wait below.
      const woken = new AbortController()
      const stopWaiting = onAppendHere(this.#o.log, () => woken.abort())
      try {
        const applied = await this.catchUp({ signal })
        if (applied > 0 || signal.aborted) {
          wait = every
          continue
        }
        await sleep(wait, signal, this.#life.stopped, woken.signal)
        if (stopWaiting !== undefined && !woken.signal.aborted) wait = Math.min(Math.max(every, IDLE_POLL_MAX_MS), 2 * wait)
      } finally {
        stopWaiting?.()
      }
    }
  }

  /**
   * Takes a snapshot that covers everything committed when it is called
   * (after waiting for one in flight, which is returned only if it already
   * covers that); undefined when snapshots are off or it failed.
   */
  async snapshot(): Promise<SnapshotResult | undefined> {
    this.#running()
    return this.#life.snapshot()
  }

  /**
   * Stops scheduling, waits for a snapshot in flight (and then takes one if
   * snapshots.onClose and something was committed since this owner's last
   * one), closes the store, and releases the claim so that the next owner
   * starts at once.
   */
  async close(): Promise<void> {
    if (this.#state === 'closed') return
    if (this.#state === 'running' && this.#life.failure === undefined && this.#o.snapshots?.onClose === true) await this.#life.closeSnapshot()
    this.#state = 'closed'
    await this.#life.shutdown()
  }

  #running(): PartitionSynchronizer<E> {
    const failure = this.#life.failure
    if (this.#state !== 'running' || this.#sync === undefined || failure !== undefined) {
      throw new TidemarkError(
        'TIDEMARK_PROCESSOR_CLOSED',
        `partition ${this.#o.topic}/${this.#o.partition} is ${failure !== undefined ? 'stopped after an error' : this.#state === 'closed' ? 'stopped' : 'not started'}`,
        failure === undefined ? {} : { cause: failure.error },
      )
    }
    return this.#sync
  }

  /** Before each batch commit: the lifecycle's checks (failure, lease), and the commit's start for the metrics. */
  readonly #beforeBatchCommit = (): Promise<void> | undefined => {
    const ready = this.#life.beforeCommit()
    this.#commitStartedAt = this.#metrics.commitStarted()
    return ready
  }

  /**
   * With outputs: a batch commits only while the committed outbox is below
   * its limit; otherwise the partition waits here (its batch in memory,
   * nothing written) until delivery makes room.
   */
  readonly #beforeCommitWithRoom = (): Promise<void> | undefined => {
    const failure = this.#life.failure
    if (failure !== undefined) throw failure.error
    const room = this.#outputs.waitForRoom()
    return room === undefined ? this.#beforeBatchCommit() : room.then(() => this.#beforeBatchCommit())
  }

  /** Resolves once every output committed so far was delivered (immediately without outputs). */
  async flushOutputs(): Promise<void> {
    await this.#outputs.publisher?.flush()
  }

  /** Shuts down after a failure; an error of the shutdown (closing a store that failed) adds nothing to the failure. */
  async #stopOnFailure(): Promise<void> {
    this.#state = 'closed'
    await this.#life.shutdown().catch(() => undefined)
  }
}

type ResolvedOwnership = Readonly<Required<Omit<OwnershipSettings, 'owner' | 'memberLease'>> & Pick<OwnershipSettings, 'owner' | 'memberLease'>>

function resolveOwnership(value: OwnershipSettings | undefined, snapshots: SnapshotSettings | undefined): ResolvedOwnership | undefined {
  if (snapshots === undefined) {
    if (value !== undefined) throw new RangeError('options.ownership needs options.snapshots: the partition\'s claim lives in the snapshot store')
    return undefined
  }
  checkClaimStore(snapshots.store, 'options.snapshots.store')
  if (value !== undefined && (value === null || typeof value !== 'object')) throw new TypeError(`options.ownership must be an object, got ${describeValue(value)}`)
  const known = ['leaseMs', 'takeover', 'owner', 'clock', 'memberLease']
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
  const memberLease = value?.memberLease
  if (memberLease !== undefined) {
    if (!(memberLease instanceof MemberLease)) throw new TypeError(`options.ownership.memberLease must be a MemberLease (MemberLease.start()), got ${describeValue(memberLease)}`)
    if (value?.leaseMs !== undefined) throw new RangeError('options.ownership.leaseMs and options.ownership.memberLease exclude each other: a claim held by the member lease has no lease of its own')
    if (memberLease.store !== snapshots.store) throw new RangeError(`options.ownership.memberLease lives in ${memberLease.store.url}, not in options.snapshots.store (${snapshots.store.url})`)
    if (memberLease.state !== 'held') throw new RangeError(`options.ownership.memberLease is ${memberLease.state}: start a new one`)
  }
  return Object.freeze({ leaseMs, takeover, clock, ...(owner === undefined ? {} : { owner }), ...(memberLease === undefined ? {} : { memberLease }) })
}

/**
 * Events sent from the background (the lease's renewal timer, scheduled
 * snapshots, the outbox's delivery, the state size's measures): a listener's throw is logged, not
 * passed on. progress, started and commit reach the caller of start() or
 * catchUp(), like any EventEmitter's, and stop the partition.
 */
const BACKGROUND_EVENTS: ReadonlySet<keyof ProcessorEvents> = new Set(['snapshot', 'snapshot-failed', 'snapshotter', 'restore', 'ownership', 'outputs', 'state-size-exceeded'])

function checkSignal(signal: unknown, what: string): void {
  if (!(signal instanceof AbortSignal)) throw new TypeError(`${what} must be an AbortSignal (from an AbortController), got ${describeValue(signal)}`)
}

