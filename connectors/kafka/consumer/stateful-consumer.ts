import { EventEmitter } from 'node:events'
import type { Admin, Consumer, PartitionAssigner } from 'kafkajs'
import { Kafka, logLevel } from '../kafkajs.js'
// Before any kafkajs connection: silences kafkajs 2.2.4's negative timer on Node 24 (see the file).
import '../kafkajs-fixes.js'
import { describeValue } from '../../../src/util/index.js'
import { asTidemarkError, TidemarkError } from '../../../src/errors.js'
import { callListener } from '../../../src/logging/index.js'
import type { PartitionStore } from '../../../src/store/index.js'
import type { RestoreEvent, SnapshotResult, SnapshotterEvent, SnapshotFollowerEvent } from '../../../src/snapshot/index.js'
import type { OutputsEvent } from '../../../src/outputs/index.js'
import type { OwnershipEvent, StateSizeExceeded } from '../../../src/runtime/index.js'
import { PartitionFetcher, type FetchedBatch } from '../fetch/index.js'
import { AssignmentHandler } from './assignments.js'
import { DeadLetters } from './dead-letters.js'
import { GroupOffsets } from './group-offsets.js'
import { TransferPriority } from './transfer-priority.js'
import { LocalState } from './local-state.js'
import { takeAssignmentInfo } from './assignment-capture.js'
import { stateAwareAssigner } from './assignor.js'
import { cancelRejoin, requestRejoin, RESUME_MEMBER, stayInGroup } from './membership.js'
import { keepMemberId, takeMemberId } from './member-id.js'
import { observeConsumerEvent } from './observe.js'
import { CONSUMER_DEFAULTS, resolveConsumerOptions, type ResolvedConsumerOptions, type StatefulConsumerOptions } from './options.js'
import {
  PartitionTask, partitionKey, type PartitionClosed, type PartitionCounts, type PartitionStarted, type TaskServices, type TaskState, type TopicPartition,
} from './partition-task.js'

/** Restarts of the kafkajs consumer after crashes it would not restart from, without a join in between. */
const MAX_RESTARTS = 5

export interface StatefulConsumerEvents {
  /**
   * A new assignment from the group: what was added and what was taken
   * away; under the state-aware assignor also the partitions this member is
   * standby for and those it warms to take over (options.warmup).
   */
  assignment: [{ partitions: TopicPartition[]; assigned: TopicPartition[]; revoked: TopicPartition[]; standbys: TopicPartition[]; warmups: TopicPartition[] }]
  /** A partition's state is restored and its records are being fetched. */
  'partition-started': [PartitionStarted]
  /** A partition stopped on an error (it stays paused here until the group moves it). */
  'partition-failed': [TopicPartition & { error: TidemarkError }]
  /** A partition was revoked or the consumer closed: its hand-off and its counts. */
  'partition-closed': [PartitionClosed]
  /** A batch of records was committed with its state. */
  commit: [TopicPartition & { events: number; offset: bigint }]
  /** A record that did not decode was skipped or dead-lettered (onDecodeError). */
  'record-skipped': [TopicPartition & { offset: bigint; action: 'skip' | 'dead-letter'; error: TidemarkError }]
  /** A partition's state ends before the log's first record. */
  truncated: [TopicPartition & { position: bigint | undefined; logStart: bigint; action: 'fail' | 'reset-to-earliest' }]
  snapshot: [TopicPartition & { result: SnapshotResult }]
  /** A snapshot failed; processing goes on and the previous snapshot stays the latest. */
  'snapshot-failed': [TopicPartition & { error: TidemarkError }]
  snapshotter: [TopicPartition & { event: SnapshotterEvent }]
  restore: [TopicPartition & { event: RestoreEvent }]
  /** A partition's outputs: delivered, delivery-failed, outbox-full, outbox-resumed, duplicate-skipped (docs/outputs.md). */
  outputs: [TopicPartition & { event: OutputsEvent }]
  /** A partition's claim: taken from a holder proven dead, a failed release, the claim lost to another owner (docs/ownership.md). */
  ownership: [TopicPartition & { event: OwnershipEvent }]
  /** A partition's state size went above options.stateSizeLimit (also logged at warn): once per crossing, again only after it went back below. */
  'state-size-exceeded': [TopicPartition & StateSizeExceeded]
  /** A standby copy of a partition (options.standbys): synced to a new snapshot, a snapshot skipped, a sync failed. */
  standby: [TopicPartition & { event: SnapshotFollowerEvent }]
  /** kafkajs's consumer crashed (its error is the cause of a TIDEMARK_LOG_UNAVAILABLE); with restart it rejoins by itself. */
  crash: [{ error: TidemarkError; restart: boolean }]
}

export interface PartitionStatus extends TopicPartition {
  state: TaskState
  position: bigint | undefined
  counts: PartitionCounts
  failure?: unknown
}

export interface CloseResult {
  partitions: PartitionClosed[]
}

export interface CloseOptions {
  /**
   * false: close without leaving the group, for a restart with the same
   * stateDir (the closest kafkajs comes to KIP-345's static membership).
   * The group keeps this member, and its partitions unprocessed, until its
   * session times out (`consumer.sessionTimeout`); a restart that joins
   * before then starts the only rebalance, and the state-aware assignor
   * gives it its partitions back from its local stores. Without a restart,
   * the partitions wait for the session timeout. Default true.
   */
  leaveGroup?: boolean
}

/**
 * A stateful Kafka consumer: one kafkajs consumer (one group member, one set
 * of connections) per process, any number of assigned partitions, each with
 * its own partition store, snapshots and recovery.
 *
 * Shaped like Kafka Streams: the consumer loop only fetches and dispatches
 * batches; the AssignmentHandler turns the group's assignments into
 * PartitionTasks; each task restores its state when assigned, applies its
 * records and commits state and position in one LevelDB batch, then the
 * group offset is committed for lag tools only. On revocation and on close()
 * a task finishes its batch, commits, takes a hand-off snapshot (bounded by
 * handoff.timeoutMs) and closes its store.
 */
export class StatefulConsumer<V = unknown> extends EventEmitter<StatefulConsumerEvents> {
  readonly options: ResolvedConsumerOptions<V>
  readonly #kafka: Kafka
  readonly #consumer: Consumer
  readonly #admin: Admin
  /** Undefined unless onDecodeError sends records to a dead-letter topic. */
  readonly #deadLetters: DeadLetters | undefined
  readonly #assignments: AssignmentHandler<V>
  /** Fetches the partitions this member runs; the group's rounds do not stop it. */
  readonly #fetcher: PartitionFetcher
  /** The group's committed offsets, for lag tools. */
  readonly #groupOffsets: GroupOffsets
  /** Batches being applied: close() waits for them after pausing everything. */
  readonly #inFlight = new Set<Promise<unknown>>()
  /** Counts of partitions that were closed here, so that totals survive their tasks. */
  readonly #closedCounts: PartitionCounts = { applied: 0, skipped: 0, deadLettered: 0 }
  #state: 'new' | 'starting' | 'running' | 'closing' | 'closed' = 'new'
  #closing: Promise<CloseResult> | undefined
  #memberId: string | undefined
  /** kafkajs crashes since the last successful join. */
  #crashes = 0
  /** Settles start(): the first GROUP_JOIN, a final crash, or close(). */
  #firstJoin: { resolve(): void; reject(error: unknown): void } | undefined
  /** Local copies, standbys and what the assignor is told of them. */
  readonly #local: LocalState
  /** The member id that a close({ leaveGroup: false }) left in stateDir: the first join goes under it. */
  #resumeMemberId: string | undefined

  constructor(options: StatefulConsumerOptions<V>) {
    super()
    // Every event also goes to the logger and the ownership metrics (observe.ts).
    // Assigned, not an `override emit`: no typed signature fits the emit of
    // every @types/node (25+ types it for any event name), and one in the
    // published declarations broke apps' builds. Callers keep EventEmitter's typing.
    this.emit = (<K extends keyof StatefulConsumerEvents>(event: K, ...args: StatefulConsumerEvents[K]): boolean => {
      observeConsumerEvent(this.options.logger, this.options.job, event, args[0])
      // Sent from the group's callbacks and the partitions' loops, where a
      // listener's throw stopped a partition's work or the group's runner: it
      // is logged, and the listeners after it miss the event.
      return callListener(() => super.emit(event, ...(args as never)), true, this.options.logger, { job: this.options.job, event })
    }) as this['emit']
    this.options = resolveConsumerOptions(options)
    const o = this.options
    const priority = new TransferPriority()
    this.#local = new LocalState(o, priority, (tp, event) => this.emit('standby', { ...tp, event }), () => this.#rejoinWarm())
    this.#kafka = new Kafka({ logLevel: logLevel.NOTHING, ...o.kafka, brokers: [...o.brokers], clientId: o.clientId })
    this.#consumer = this.#kafka.consumer({
      groupId: o.groupId,
      allowAutoTopicCreation: true,
      maxWaitTimeInMs: CONSUMER_DEFAULTS.maxWaitTimeInMs,
      ...o.consumer,
      partitionAssigners: [...(o.partitionAssigners ?? [this.#defaultAssigner()])],
    })
    this.#admin = this.#kafka.admin()
    if (typeof o.onDecodeError === 'object') this.#deadLetters = new DeadLetters(this.#kafka, o.onDecodeError.deadLetter)
    // A partition that moved away meanwhile is its new owner's to commit; on close, the hand-offs' positions are.
    this.#groupOffsets = new GroupOffsets(this.#consumer, (tp) => this.#state === 'closing' || this.#assignments.current(tp.topic, tp.partition) !== undefined)
    this.#fetcher = new PartitionFetcher({
      kafka: this.#kafka,
      maxWaitTimeInMs: o.consumer.maxWaitTimeInMs ?? CONSUMER_DEFAULTS.maxWaitTimeInMs,
      maxBytesPerPartition: o.consumer.maxBytesPerPartition ?? CONSUMER_DEFAULTS.maxBytesPerPartition,
      concurrency: o.concurrency,
      handle: (batch) => this.#onBatch(batch),
      outOfRange: (tp, offset) => this.#outOfRange(tp, offset),
      fetchFailed: (error, attempt) => o.logger.warn({ job: o.job, groupId: o.groupId, attempt, err: error }, 'a fetch failed; retrying with backoff'),
    })
    const services = this.#services()
    this.#assignments = new AssignmentHandler<V>({
      createTask: (tp) => new PartitionTask<V>(tp, o, services, this.#local.taskStart(tp)),
      pause: (tp) => this.#fetcher.pause(tp),
      resume: (tp) => this.#fetcher.resume(tp),
      seek: (tp, offset) => this.#fetcher.seek(tp, offset),
      priority: (tp) => priority.enter(partitionKey(tp)),
      started: (info) => this.emit('partition-started', info),
      failed: (tp, error) => this.emit('partition-failed', { ...tp, error: partitionError(tp, error) }),
      closed: (info) => {
        this.#local.closed(info, info.position)
        this.#closedCounts.applied += info.counts.applied
        this.#closedCounts.skipped += info.counts.skipped
        this.#closedCounts.deadLettered += info.counts.deadLettered
        this.emit('partition-closed', info)
      },
    }, { handoff: o.handoff.snapshot })
  }

  /**
   * Connects, joins the group and starts consuming; resolves after the
   * first join (its 'assignment' event has been emitted), or once close()
   * ends the wait. kafkajs's run() alone is not that: a first join that
   * crashes (the mock's racing SyncGroup) lets run() resolve, and the join
   * happens at kafkajs's restart.
   */
  async start(): Promise<void> {
    if (this.#state !== 'new') throw new TidemarkError('TIDEMARK_PROCESSOR_CLOSED', `start() was already called (state: ${this.#state})`)
    this.#state = 'starting'
    const c = this.#consumer
    const firstJoin = new Promise<void>((resolve, reject) => { this.#firstJoin = { resolve, reject } })
    c.on(c.events.GROUP_JOIN, ({ payload }) => {
      // The group only decides membership and the assignment: kafkajs
      // fetches nothing (a restarted kafkajs consumer forgot its pauses),
      // the fetcher does, and a round does not stop it.
      this.#pauseGroupFetches()
      this.#memberId = payload.memberId
      this.#resumeMemberId = undefined
      this.#crashes = 0
      // Read before the tasks are created: a task of an orphaned partition takes its claim at once.
      const partitions = Object.entries(payload.memberAssignment).flatMap(([topic, ps]) => ps.map((partition) => ({ topic, partition })))
      const info = takeAssignmentInfo(payload.memberId)
      this.#local.assigned(info, partitions, (tp) => this.#assignments.current(tp.topic, tp.partition) !== undefined)
      const change = this.#assignments.assign(partitions)
      this.#fetcher.retain(partitions)
      this.emit('assignment', { partitions, ...change, standbys: [...(info?.standbys ?? [])], warmups: [...(info?.warmups ?? [])] })
      this.#firstJoin?.resolve()
    })
    c.on(c.events.CRASH, ({ payload }) => {
      const restart = payload.restart || this.#restartAfterCrash()
      const error = crashError(payload.error)
      if (!restart) {
        // Out of the group for good: the group will give the partitions to others, and start() fails.
        this.#fetcher.pauseAll()
        this.#firstJoin?.reject(error)
      }
      this.emit('crash', { error, restart })
    })
    try {
      await this.#local.findOnDisk()
      this.#resumeMemberId = await takeMemberId(this.options.stateDir, this.options.groupId)
      await this.#admin.connect()
      // The fetcher's connections and metadata, ready before the first partition is restored.
      await this.#fetcher.connect(this.options.topics)
      await c.connect()
      await c.subscribe({ topics: [...this.options.topics], fromBeginning: true })
      await this.#run()
      await firstJoin
    } catch (err) {
      this.#state = 'closed'
      await Promise.allSettled([c.disconnect(), this.#admin.disconnect()])
      throw new TidemarkError('TIDEMARK_LOG_UNAVAILABLE', `the consumer of group ${this.options.groupId} could not start: ${(err as Error)?.message ?? err}`, { cause: err })
    } finally {
      this.#firstJoin = undefined
    }
    // close() may have ended the wait: it owns the state from then on.
    if (this.#state === 'starting') this.#state = 'running'
  }

  /**
   * Runs kafkajs's consumer for the group's membership only: every topic
   * is paused there (#pauseGroupFetches), so it heartbeats and joins but
   * fetches nothing, and it commits nothing of its own (GroupOffsets
   * does).
   */
  #run(): Promise<void> {
    return this.#consumer.run({ autoCommit: false, eachBatch: async () => undefined })
  }

  #pauseGroupFetches(): void {
    try {
      this.#consumer.pause(this.options.topics.map((topic) => ({ topic })))
    } catch {
      // Not running (a crash): the next GROUP_JOIN pauses again.
    }
  }

  /**
   * kafkajs gives up on a crash it deems not retriable, also one in a
   * join that the next attempt would survive (librdkafka's mock answers a
   * racing SyncGroup with INVALID_REQUEST now and then). The partitions'
   * state is safe in their stores, so the member rejoins, up to
   * MAX_RESTARTS times without a successful join in between; after that
   * the crash is final and reported so (restart: false).
   */
  #restartAfterCrash(): boolean {
    if ((this.#state !== 'running' && this.#state !== 'starting') || this.#crashes >= MAX_RESTARTS) return false
    this.#crashes++
    const timer = setTimeout(() => {
      if (this.#state !== 'running' && this.#state !== 'starting') return
      this.#consumer.connect().then(() => this.#run()).catch((error: unknown) => this.emit('crash', { error: crashError(error), restart: false }))
    }, 500 * this.#crashes)
    timer.unref()
    return true
  }

  /**
   * The state-aware assignor, which also hands kafkajs the member id of a
   * restart after close({ leaveGroup: false }) until a join succeeds: a
   * kafkajs crash-restart in the first join (the mock's SyncGroup race)
   * starts a new consumer group object, which offers it again. A
   * coordinator that expired it answers UNKNOWN_MEMBER_ID, and kafkajs's
   * retry inside that join goes without it.
   */
  #defaultAssigner(): PartitionAssigner {
    const o = this.options
    const assigner = stateAwareAssigner({ advertise: () => this.#local.advertise(this.#assignments.tasks()), standbys: o.standbys, warmup: o.warmup })
    return (context) => Object.assign(assigner(context), {
      [RESUME_MEMBER]: () => this.#resumeMemberId,
    })
  }

  /** A warm-up's copy is warm: the rebalance that moves its partition here. */
  #rejoinWarm(): void {
    const memberId = this.#memberId
    if (this.#state !== 'running' || memberId === undefined) return
    this.options.logger.info({ job: this.options.job, groupId: this.options.groupId, memberId, warmups: this.#local.warmups().map((tp) => `${tp.topic}/${tp.partition}`) }, 'a warm-up is warm: asking the group to rebalance')
    requestRejoin(this.options.groupId, memberId)
  }

  /** This member's id in the group, once it joined. */
  get memberId(): string | undefined {
    return this.#memberId
  }

  /** The partitions assigned here and where each stands. */
  partitions(): PartitionStatus[] {
    return this.#assignments.tasks().map((t) => ({
      topic: t.topic,
      partition: t.partition,
      state: t.state,
      position: t.position,
      counts: { ...t.counts },
      ...(t.failure === undefined ? {} : { failure: t.failure }),
    }))
  }

  /** Records applied, skipped and dead-lettered by this member, over partitions it holds and held. */
  counts(): PartitionCounts {
    const total = { ...this.#closedCounts }
    for (const t of this.#assignments.tasks()) {
      total.applied += t.counts.applied
      total.skipped += t.counts.skipped
      total.deadLettered += t.counts.deadLettered
    }
    return total
  }

  /** Resolves once every output committed so far by the partitions running here was delivered. */
  async flushOutputs(): Promise<void> {
    await Promise.all(this.#assignments.tasks().map((t) => t.flushOutputs()))
  }

  /** The partition store of a partition running here (to read state; writes go through the handler). */
  store(topic: string, partition: number): PartitionStore | undefined {
    return this.#assignments.running(topic, partition)?.store
  }

  /**
   * Leaves the group gracefully: pauses every partition, waits for the
   * batches being applied (their commits included), takes a hand-off
   * snapshot of each partition (in parallel, bounded by handoff.timeoutMs)
   * while still a member, so that the next owners restore it, then leaves
   * the group and closes the stores and connections.
   */
  close(options: CloseOptions = {}): Promise<CloseResult> {
    if (typeof options !== 'object' || options === null) throw new TypeError(`close options must be an object, got ${describeValue(options)}`)
    for (const key of Object.keys(options)) if (key !== 'leaveGroup') throw new TypeError(`options.${key} is not an option of close()`)
    const leaveGroup = options.leaveGroup ?? true
    if (typeof leaveGroup !== 'boolean') throw new TypeError(`options.leaveGroup must be a boolean, got ${describeValue(leaveGroup)}`)
    this.#closing ??= this.#close(leaveGroup)
    return this.#closing
  }

  async #close(leaveGroup: boolean): Promise<CloseResult> {
    this.#state = 'closing'
    // A start() still waiting for its first join has nothing more to wait for.
    this.#firstJoin?.resolve()
    this.#fetcher.pauseAll()
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight])
    // Standby copies stop where they are: a restart with this stateDir takes them up again.
    await this.#local.stop()
    const partitions = await this.#assignments.closeAll()
    const memberId = this.#memberId
    if (memberId !== undefined) {
      cancelRejoin(this.options.groupId, memberId)
      if (!leaveGroup && stayInGroup(this.options.groupId, memberId)) await keepMemberId(this.options.stateDir, this.options.groupId, memberId, this.options.logger)
    }
    await this.#fetcher.stop()
    // The positions the hand-off reached, for lag tools, while still a member.
    await this.#groupOffsets.flush()
    this.#groupOffsets.stop()
    await this.#consumer.disconnect().catch(() => undefined)
    await this.#assignments.drained()
    await Promise.allSettled([this.#admin.disconnect(), this.#deadLetters?.close()])
    this.#state = 'closed'
    return { partitions }
  }

  async #onBatch({ topic, partition, messages, highWatermark }: FetchedBatch): Promise<void> {
    if (this.#state !== 'running' && this.#state !== 'starting') return
    const task = this.#assignments.current(topic, partition)
    if (task === undefined || messages.length === 0) return
    if (task.state === 'failed') {
      // It stopped outside a batch (its store failed in a snapshot's reopen,
      // a newer owner fenced its snapshots): stop fetching it, and say so once.
      this.#fetcher.pause({ topic, partition })
      this.emit('partition-failed', { topic, partition, error: partitionError({ topic, partition }, task.failure) })
      return
    }
    if (task.state !== 'running') return
    const applying = task.apply(messages)
    this.#inFlight.add(applying)
    try {
      const last = await applying
      // The group's offset follows the store's commit (for lag tools).
      if (last !== undefined) this.#groupOffsets.queue({ topic, partition }, last + 1n)
      // The high watermark is the log's tail: the lag metric needs no request of its own.
      task.metrics.lag(task.position, highWatermark)
    } catch (error) {
      // The task has stopped: the partition stays paused until the group
      // moves it; the other partitions go on.
      this.#fetcher.pause({ topic, partition })
      this.emit('partition-failed', { topic, partition, error: partitionError({ topic, partition }, error) })
    } finally {
      this.#inFlight.delete(applying)
    }
  }

  /**
   * The broker holds no records at a partition's fetch offset. Below the
   * log's start (retention deleted records the state has not seen), the
   * partition's task starts again, and its start applies onTruncated;
   * past the log's end, the partition stops: its state is ahead of the log.
   */
  #outOfRange(tp: TopicPartition, offset: bigint): void {
    void (async () => {
      const { low } = await this.#watermarks(tp.topic, tp.partition)
      if (this.#assignments.running(tp.topic, tp.partition) === undefined) return
      if (offset < low) {
        this.#assignments.restart(tp)
        return
      }
      throw new TidemarkError('TIDEMARK_LOG_UNAVAILABLE', `partition ${tp.topic}/${tp.partition}: the broker has no records at offset ${offset}, past the log's end; the state is ahead of the log (was the topic deleted and made again?)`, {
        details: { topic: tp.topic, partition: tp.partition, offset },
      })
    })().catch((error: unknown) => this.emit('partition-failed', { ...tp, error: partitionError(tp, error) }))
  }

  /** From the fetcher: the bounds of every partition asked for in one turn go in one request pair. */
  #watermarks(topic: string, partition: number): Promise<{ low: bigint; high: bigint }> {
    return this.#fetcher.watermarks({ topic, partition })
  }

  #services(): TaskServices {
    const at = (tp: TopicPartition) => ({ topic: tp.topic, partition: tp.partition })
    return {
      watermarks: (topic, partition) => this.#watermarks(topic, partition),
      groupOffset: async (topic, partition) => {
        const [offsets] = await this.#admin.fetchOffsets({ groupId: this.options.groupId, topics: [topic] })
        const offset = offsets?.partitions.find((p) => p.partition === partition)?.offset
        return offset === undefined || offset === '-1' ? undefined : BigInt(offset)
      },
      deadLetter: async (records) => { await this.#deadLetters?.send(records) },
      pause: (tp) => this.#fetcher.pause(tp),
      resumeAt: (tp, offset) => {
        // Only a partition this member still runs: a rebalance may have moved it meanwhile.
        if (this.#state !== 'running' || this.#assignments.running(tp.topic, tp.partition) === undefined) return
        this.#fetcher.seek(tp, offset)
        this.#fetcher.resume(tp)
      },
      events: {
        restore: (tp, event) => this.emit('restore', { ...at(tp), event }),
        snapshot: (tp, result) => this.emit('snapshot', { ...at(tp), result }),
        snapshotFailed: (tp, error) => this.emit('snapshot-failed', { ...at(tp), error: asTidemarkError(error, 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', `snapshot of ${tp.topic}/${tp.partition} failed`, { retriable: false }) }),
        snapshotter: (tp, event) => this.emit('snapshotter', { ...at(tp), event }),
        commit: (tp, b) => this.emit('commit', { ...at(tp), ...b }),
        skipped: (tp, r) => this.emit('record-skipped', { ...at(tp), ...r, error: asTidemarkError(r.error, 'TIDEMARK_DECODE_FAILED', `record ${tp.topic}/${tp.partition}@${r.offset} did not decode`) }),
        truncated: (tp, info) => this.emit('truncated', { ...at(tp), ...info }),
        outputs: (tp, event) => this.emit('outputs', { ...at(tp), event }),
        ownership: (tp, event) => this.emit('ownership', { ...at(tp), event }),
        stateSizeExceeded: (tp, exceeded) => this.emit('state-size-exceeded', { ...at(tp), ...exceeded }),
      },
    }
  }
}

/** What stopped a partition, as the TidemarkError its event carries (a failure that is none becomes the cause). */
function partitionError(tp: TopicPartition, error: unknown): TidemarkError {
  return asTidemarkError(error, 'TIDEMARK_PROCESSOR_CLOSED', `partition ${tp.topic}/${tp.partition} stopped`)
}

/** A kafkajs crash as a TidemarkError: the Kafka client failed after its own retries. */
function crashError(error: unknown): TidemarkError {
  return asTidemarkError(error, 'TIDEMARK_LOG_UNAVAILABLE', 'the Kafka consumer crashed')
}
