import { join } from 'node:path'
import type { KafkaMessage } from 'kafkajs'
import { TidemarkError } from '../../../src/errors.js'
import { decodeFailed, type PartitionStore } from '../../../src/store/index.js'
import type { SnapshotFollower } from '../../../src/snapshot/index.js'
import { PartitionOutputs, RECORD_ID_HEADER } from '../../../src/outputs/index.js'
import { PartitionMetrics } from '../../../src/metrics/index.js'
import { PartitionLifecycle } from '../../../src/runtime/index.js'
import type { ConsumerRecord, ResolvedConsumerOptions } from './options.js'
import { partitionKey, type DeadLetter, type PartitionClosed, type PartitionCounts, type PartitionStarted, type TaskServices, type TaskState, type TopicPartition } from './task-types.js'

export type { DeadLetter, PartitionClosed, PartitionCounts, PartitionStarted, TaskServices, TaskState, TopicPartition } from './task-types.js'
export { partitionKey } from './task-types.js'

/**
 * One assigned partition (Kafka Streams' task): its partition store, its
 * snapshots, and the application of fetched records to it. Records are
 * handed in by the consumer loop; the task commits their state changes with
 * the offset of the last one in one LevelDB batch, so its store's position
 * is the truth about what it applied, whatever the group's offsets say.
 */
export class PartitionTask<V> {
  readonly topic: string
  readonly partition: number
  readonly key: string
  readonly path: string
  readonly counts: PartitionCounts = { applied: 0, skipped: 0, deadLettered: 0 }
  /** Publishes commits and lag to the metrics channels (docs/metrics.md). */
  readonly metrics: PartitionMetrics
  #state: TaskState = 'new'
  #fetchFrom = 0n
  readonly #o: ResolvedConsumerOptions<V>
  readonly #services: TaskServices
  /** The claim, restore, store, outputs, snapshots, failure policy and shutdown: what PartitionProcessor shares. */
  readonly #life: PartitionLifecycle
  /** The batch being applied: close() waits for it. */
  #busy: Promise<unknown> | undefined
  readonly #outputs: PartitionOutputs
  /** Paused in the consumer until the outbox has room. */
  #outboxPaused = false
  /** Aborted when the partition is revoked (or the member closes) while it starts: a claim acquire still waiting gives up. */
  readonly #cancel = new AbortController()
  /** Why start() failed (the lifecycle's failures are those of a running partition). */
  #startFailure: { error: unknown } | undefined
  /** A look at the claim under way (holdsClaim()): batches wait for it. */
  #look: Promise<boolean> | undefined
  /** Names the step that the debug timings of a start or a close report. */
  #phase: ((step: string) => void) | undefined

  /**
   * `waitMs`: how long to wait for the previous owner's release
   * (handoff.waitMs; 0 when that owner left the group). `standby`: this
   * member's warm copy of the partition, which the restore starts from.
   */
  constructor(tp: TopicPartition, options: ResolvedConsumerOptions<V>, services: TaskServices, claim: { waitMs: number; standby?: SnapshotFollower } = { waitMs: options.handoff.waitMs }) {
    this.topic = tp.topic
    this.partition = tp.partition
    this.key = partitionKey(tp)
    this.path = join(options.stateDir, this.key)
    this.#o = options
    this.#services = services
    const at = { topic: tp.topic, partition: tp.partition }
    this.metrics = new PartitionMetrics({ job: options.job, ...tp }, this.key)
    this.#outputs = new PartitionOutputs({
      job: options.job, topic: tp.topic, partition: tp.partition, outputs: options.outputs, dedupe: options.dedupe,
      onEvent: (event) => services.events.outputs(at, event),
      onStoreFailed: (error) => this.#life.fail(error),
      onDepth: (depth) => this.metrics.outbox(depth),
    })
    this.#life = new PartitionLifecycle({
      job: options.job,
      key: this.key,
      topic: tp.topic,
      partition: tp.partition,
      path: this.path,
      states: options.states,
      store: options.store,
      ...(options.snapshots === undefined ? {} : { snapshots: options.snapshots, claim: { kind: 'assigned', waitMs: claim.waitMs, signal: this.#cancel.signal } }),
      allowEmpty: true,
      ...(claim.standby === undefined ? {} : { standby: claim.standby }),
      ...(options.downloadConcurrency === undefined ? {} : { downloadConcurrency: options.downloadConcurrency }),
      stateSize: { limit: options.stateSizeLimit },
      outputs: this.#outputs,
      logger: options.logger,
      events: {
        restore: (event) => services.events.restore(at, event),
        snapshot: (result) => services.events.snapshot(at, result),
        snapshotFailed: (error) => services.events.snapshotFailed(at, error),
        snapshotter: (event) => services.events.snapshotter(at, event),
        ownership: (event) => services.events.ownership(at, event),
        phase: (step) => this.#phase?.(step),
        stateSize: (bytes, limit) => this.metrics.stateSize(bytes, limit),
        stateSizeExceeded: (exceeded) => services.events.stateSizeExceeded(at, exceeded),
      },
      // A failure stops the task: its store closes and its claim is released
      // now (a hand-off snapshot of a failed partition is never taken).
      onFailure: () => {
        this.#state = 'failed'
        void this.#life.shutdown().catch(() => undefined)
      },
    })
  }

  /** Cancels a start that is still under way (its claim acquire); nothing once it has started. */
  cancelStart(): void {
    if (this.#state === 'starting' || this.#state === 'new') this.#cancel.abort(new Error(`partition ${this.key} was revoked while it started`))
  }

  /** start() failed because cancelStart() was called. */
  get startCancelled(): boolean {
    return this.#cancel.signal.aborted && this.#startFailure !== undefined
  }

  get state(): TaskState {
    return this.#state
  }

  /** The next offset to fetch: after the store's position, or where the task started. */
  get nextOffset(): bigint {
    const position = this.position
    return position === undefined ? this.#fetchFrom : position + 1n
  }

  get failure(): unknown {
    return this.#life.failure?.error ?? this.#startFailure?.error
  }

  /** The store's position: the offset of the last record its state holds. */
  get position(): bigint | undefined {
    return this.#life.store?.position(this.topic, this.partition)
  }

  /** The partition store; available while the task runs (for reads, tests and tools). */
  get store(): PartitionStore | undefined {
    return this.#life.store
  }

  /**
   * Restores the state (local store if intact and not behind the newest
   * snapshot, else the newest usable snapshot, else empty) and resolves with
   * the offset to fetch from.
   */
  async start(): Promise<PartitionStarted> {
    if (this.#state !== 'new') throw new Error(`task ${this.key} was already started`)
    this.#state = 'starting'
    const t0 = performance.now()
    const tp = { topic: this.topic, partition: this.partition }
    this.#phase = this.#phases('start', t0)
    // Asked for while the claim is taken and the store opens: a restart
    // that finds its store as it left it is then ready at once.
    const early = this.#services.watermarks(this.topic, this.partition)
    early.catch(() => undefined)
    try {
      let reset = false
      // Where the source resumes: Kafka's retention may have deleted what
      // the state needs next, and a partition without state starts where
      // the options say. Bounds from before a wait for the claim (up to
      // handoff.waitMs) are asked for again: retention may have moved the
      // log's start meanwhile, and a truncation must not go unnoticed.
      const started = await this.#life.start(async ({ claimWaitMs }) => {
        const o = this.#o
        const { low, high } = await (claimWaitMs === 0 ? early : this.#services.watermarks(this.topic, this.partition))
        const position = this.position
        if (position !== undefined) {
          this.#fetchFrom = position + 1n
          if (this.#fetchFrom >= low) return
          this.#services.events.truncated(tp, { position, logStart: low, action: o.onTruncated })
          if (o.onTruncated === 'fail') {
            throw new TidemarkError(
              'TIDEMARK_POSITION_TRUNCATED',
              `partition ${this.topic}/${this.partition}: its state ends at offset ${position}, but the log starts at ${low} (retention deleted the records between); set onTruncated: 'reset-to-earliest' to discard the state and fold the partition again from offset ${low}`,
              { details: { topic: this.topic, partition: this.partition, position, logStart: low } },
            )
          }
          // A rebuild on purpose: the state from before the gap cannot be
          // brought forward, so it starts again from what the log still holds.
          await this.#life.resetStore()
          reset = true
          this.#fetchFrom = low
        } else if (o.startFrom === 'earliest') {
          this.#fetchFrom = low
        } else {
          this.#fetchFrom = (await this.#services.groupOffset(this.topic, this.partition)) ?? high
        }
      })
      this.#phase('ready')
      if (this.#state !== 'starting') throw new TidemarkError('TIDEMARK_PROCESSOR_CLOSED', `partition ${this.topic}/${this.partition} was closed while it started`)
      this.#state = 'running'
      return {
        ...tp,
        source: reset ? 'reset' : started.source,
        ...(started.snapshot === undefined ? {} : { snapshot: started.snapshot }),
        position: this.position,
        fetchFrom: this.#fetchFrom,
        epoch: started.epoch,
        claimWaitMs: started.claimWaitMs,
        bytesDownloaded: started.bytesDownloaded,
        restoreMs: performance.now() - t0,
      }
    } catch (err) {
      this.#startFailure = { error: err }
      this.#state = 'failed'
      await this.#life.shutdown().catch(() => undefined)
      throw err
    }
  }

  /**
   * Applies the records after the store's position (earlier ones are already
   * in the state: a redelivery after a rebalance or a seek), committing every
   * batchSize records. Resolves with the offset of the last record committed,
   * or undefined when nothing was new. A failure stops the partition (the
   * task is closed, nothing of the failed batch committed) and rejects.
   */
  apply(messages: readonly KafkaMessage[]): Promise<bigint | undefined> {
    if (this.#state !== 'running') return Promise.resolve(undefined)
    const look = this.#look
    const run = look === undefined ? this.#apply(messages) : look.then((holds) => (holds && this.#state === 'running' ? this.#apply(messages) : undefined))
    this.#busy = run.catch(() => undefined)
    return run
  }

  async #apply(messages: readonly KafkaMessage[]): Promise<bigint | undefined> {
    const store = this.#life.store!
    const { batchSize, handler, codec, onDecodeError } = this.#o
    const tp = { topic: this.topic, partition: this.partition }
    let position = this.position ?? -1n
    let last: bigint | undefined
    let i = 0
    try {
      while (i < messages.length && this.#state === 'running') {
        const ready = this.#life.beforeCommit()
        if (ready !== undefined) await ready
        if (this.#pauseWhileOutboxFull()) break
        const tx = store.transaction()
        const deadLetters: DeadLetter[] = []
        const skipped: Array<{ offset: bigint; error: unknown }> = []
        let events = 0
        let bytes = 0
        let end = -1n
        let halt: TidemarkError | undefined
        let duplicates = 0
        const release = store.tryHold() ?? await store.hold()
        try {
          // A batch also closes at the memtable's size: a larger one would
          // stay in memory whole, per partition (docs/partition-store.md).
          const batchBytes = store.batchBytes
          for (; i < messages.length && events < batchSize && tx.pendingBytes < batchBytes; i++) {
            const message = messages[i]!
            const offset = BigInt(message.offset)
            if (offset <= position) continue
            let value: V | null = null
            if (message.value !== null) {
              try {
                value = codec.decode(message.value)
              } catch (cause) {
                if (onDecodeError === 'stop') {
                  // The records before it are committed, so that the
                  // partition halts exactly at the record that stops it.
                  halt = decodeFailed(codec, `record ${this.topic}/${this.partition}@${offset}`, message.value.byteLength, cause, { ...tp, offset })
                  break
                }
                if (onDecodeError === 'skip') skipped.push({ offset, error: cause })
                else deadLetters.push({ ...tp, offset, message, error: cause })
                end = offset
                events++
                continue
              }
            }
            const record: ConsumerRecord<V> = {
              ...tp,
              offset,
              key: message.key === null ? null : message.key.toString('utf8'),
              rawKey: message.key,
              value,
              headers: message.headers ?? {},
              timestamp: Number(message.timestamp),
            }
            if (this.#outputs.dedupe && !this.#outputs.accept(tx, record.headers[RECORD_ID_HEADER])) {
              // Applied already (an upstream re-send): the position moves past it, nothing else.
              duplicates++
              end = offset
              events++
              continue
            }
            try {
              const done = handler(tx, record, this.#outputs.scope(tx, offset))
              if (done !== undefined) await done
            } catch (cause) {
              if (cause instanceof TidemarkError) throw cause
              throw new TidemarkError(
                'TIDEMARK_HANDLER_FAILED',
                `the handler failed on ${this.topic}/${this.partition}@${offset}: ${(cause as Error)?.message ?? cause}; nothing of its batch was committed`,
                { cause, details: { ...tp, offset } },
              )
            }
            end = offset
            events++
            bytes += message.value?.byteLength ?? 0
          }
        } catch (err) {
          tx.abort()
          this.#outputs.aborted()
          throw err
        } finally {
          release()
        }
        if (events === 0) {
          tx.abort()
          if (halt !== undefined) throw halt
          continue
        }
        // Dead letters are produced before the commit that moves past them:
        // a crash between the two produces them again (at least once).
        if (deadLetters.length > 0) await this.#services.deadLetter(deadLetters)
        const commitStarted = this.metrics.commitStarted()
        await tx.commit({ topic: this.topic, partition: this.partition, offset: end })
        this.metrics.committed(events, bytes, end, commitStarted)
        position = end
        last = end
        const applied = events - skipped.length - deadLetters.length - duplicates
        this.counts.applied += applied
        this.counts.skipped += skipped.length
        this.counts.deadLettered += deadLetters.length
        for (const s of skipped) this.#services.events.skipped(tp, { ...s, action: 'skip' })
        for (const d of deadLetters) this.#services.events.skipped(tp, { offset: d.offset, error: d.error, action: 'dead-letter' })
        this.#services.events.commit(tp, { events, offset: end })
        this.#life.committed(events, bytes, end)
        if (halt !== undefined) throw halt
      }
      return last
    } catch (err) {
      this.#life.fail(err)
      await this.#life.shutdown().catch(() => undefined)
      throw this.#life.failure!.error
    }
  }

  /**
   * With the outbox at its limit the partition is paused in the consumer
   * (true: apply nothing more of this fetch) and resumed from its position
   * once delivery made room, so the other partitions go on meanwhile.
   */
  #pauseWhileOutboxFull(): boolean {
    if (this.#outboxPaused) return true
    const room = this.#outputs.waitForRoom()
    if (room === undefined) return false
    this.#outboxPaused = true
    const tp = { topic: this.topic, partition: this.partition }
    this.#services.pause(tp)
    room.then(() => {
      this.#outboxPaused = false
      if (this.#state === 'running') this.#services.resumeAt(tp, this.nextOffset)
    }, () => undefined)
    return true
  }

  /** Resolves once every output committed so far was delivered (at once without outputs). */
  async flushOutputs(): Promise<void> {
    await this.#outputs.publisher?.flush()
  }

  /** The task stopped because another owner took its claim or fenced its snapshots. */
  get ownershipLost(): boolean {
    const error = this.#life.failure?.error
    return error instanceof TidemarkError && (error.code === 'TIDEMARK_OWNERSHIP_LOST' || error.code === 'TIDEMARK_SNAPSHOT_FENCED')
  }

  /**
   * Looks at the claim now (one HEAD): false when another owner took it
   * (the task then stops with TIDEMARK_OWNERSHIP_LOST, its partition
   * paused); true while this task holds it, when there is no claim, or when
   * the store cannot tell now (the periodic check looks again). Batches
   * handed in meanwhile wait for the answer, and are not applied when the
   * claim was lost: the partition can be fetched while the look is under
   * way.
   */
  async holdsClaim(): Promise<boolean> {
    const look = this.#life.holdsClaim()
    this.#look = look
    const holds = await look
    if (this.#look === look && holds) this.#look = undefined
    if (holds) return true
    this.#services.pause({ topic: this.topic, partition: this.partition })
    await this.#busy
    this.#life.stopIfClaimLost()
    await this.#life.shutdown().catch(() => undefined)
    return false
  }

  /**
   * Ends the task: waits for the batch being applied (its commit included),
   * takes a hand-off snapshot within handoff.timeoutMs when asked to, closes
   * the store and releases ownership. A failed task only closes.
   */
  async close(reason: 'revoked' | 'shutdown', options: { handoff: boolean }): Promise<PartitionClosed> {
    const t0 = performance.now()
    this.#phase = this.#phases('close', t0)
    await this.#busy
    this.#phase('batch-done')
    const result: PartitionClosed = {
      topic: this.topic,
      partition: this.partition,
      reason: this.#state === 'failed' ? 'failed' : reason,
      position: this.position,
      counts: { ...this.counts },
      handoffMs: 0,
    }
    if (this.#state === 'running' && options.handoff && this.#o.snapshots !== undefined) {
      this.#state = 'closing'
      const outcome = await this.#life.handoff(this.#o.handoff.timeoutMs, this.#o.handoff.minEvents)
      this.#phase('handoff-snapshot')
      result.handoffMs = performance.now() - t0
      if ('snapshot' in outcome) {
        result.handoff = outcome.snapshot
      } else if ('skipped' in outcome) {
        result.handoffSkipped = { eventsSinceSnapshot: outcome.skipped }
      } else {
        result.handoffFailed = outcome.failed
        if (outcome.error !== undefined) result.handoffError = asHandoffError(outcome.error, this)
      }
    }
    if (this.#state !== 'failed') this.#state = 'closed'
    // A hand-off snapshot past its timeout is still waited for here, in the
    // background: the store stays open until its checkpoint is done with it.
    void this.#life.shutdown().catch(() => undefined)
    return result
  }

  /**
   * Times the steps of a start or a close at debug level (ms since t0, and `at`: performance.now()), for
   * the hand-off's breakdown (REBALANCE_TRACE=1 npm run bench -- rebalance); nothing is logged
   * without a logger.
   */
  #phases(what: 'start' | 'close', t0: number): (step: string) => void {
    const logger = this.#o.logger
    return (step) => logger.debug({ job: this.#o.job, topic: this.topic, partition: this.partition, step, ms: Math.round(performance.now() - t0), at: performance.now() }, `partition ${what}`)
  }

  /** Settles when the store is closed, also after a close() that did not wait for its snapshot. */
  whenClosed(): Promise<void> {
    return this.#life.shuttingDown ? this.#life.shutdown().catch(() => undefined) : Promise.resolve()
  }
}

function asHandoffError(error: unknown, tp: TopicPartition): TidemarkError {
  return error instanceof TidemarkError ? error : new TidemarkError('TIDEMARK_SNAPSHOT_UPLOAD_FAILED', `the hand-off snapshot of ${tp.topic}/${tp.partition} failed`, { cause: error })
}
