import { existsSync } from 'node:fs'
import { mkdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { KafkaMessage } from 'kafkajs'
import { isTidemarkError, TidemarkError } from '../../../src/errors.js'
import { decodeFailed } from '../../../src/store/codec.js'
import { PartitionStore } from '../../../src/store/partition-store.js'
import { restoreSnapshot, type RestoreEvent, type RestoreResult } from '../../../src/snapshot/restore.js'
import { prefetchSnapshot, type Prefetch } from '../../../src/snapshot/prefetch.js'
import { SnapshotScheduler } from '../../../src/snapshot/scheduler.js'
import { Snapshotter, type SnapshotResult, type SnapshotterEvent } from '../../../src/snapshot/snapshotter.js'
import type { ConsumerRecord, ResolvedConsumerOptions } from './options.js'
import { acquireOwnership, type PartitionOwnership } from './ownership.js'
import { PartitionOutputs } from '../../../src/outputs/partition-outputs.js'
import { RECORD_ID_HEADER } from '../../../src/outputs/id.js'
import type { OutputsEvent } from '../../../src/outputs/types.js'
import { PartitionMetrics } from '../../../src/metrics/partition-metrics.js'

/**
 * Ranged reads at once of the prefetch a new owner runs while it waits for
 * the previous owner's release (a restore uses 6). The prefetch is
 * speculative and shares the snapshot store with what is on the critical
 * path: the old owner's hand-off upload, the claim requests that notice the
 * release, and the ranges stop() must wait for. At 6 per partition the
 * rebalance bench (REBALANCE_TRACE=1) saw the claim taken 200-320 ms after
 * the release and stop() wait 100-530 ms; at 2, 100-150 ms and 35-60 ms,
 * and the handoffRatio pairs of one run were 1.47-1.84 at 6 and of another
 * 1.06-1.45 at 2.
 */
const PREFETCH_CONCURRENCY = 2

export interface TopicPartition {
  topic: string
  partition: number
}

/** A record that could not be decoded, on its way to the dead-letter topic. */
export interface DeadLetter extends TopicPartition {
  offset: bigint
  message: KafkaMessage
  error: unknown
}

/** Where a partition's processing begins after its assignment. */
export interface PartitionStarted extends TopicPartition {
  /** Where its state came from. */
  source: 'local' | 'snapshot' | 'empty' | 'reset'
  snapshot?: string
  /** The store's position: the last record its state holds, or undefined for none. */
  position: bigint | undefined
  /** The first offset fetched. */
  fetchFrom: bigint
  epoch: number
  bytesDownloaded: number
  restoreMs: number
}

export interface PartitionCounts {
  /** Records applied by the handler and committed. */
  applied: number
  skipped: number
  deadLettered: number
}

export interface PartitionClosed extends TopicPartition {
  reason: 'revoked' | 'shutdown' | 'failed'
  position: bigint | undefined
  counts: PartitionCounts
  /** The hand-off snapshot, when one was taken in time. */
  handoff?: SnapshotResult
  /** The hand-off snapshot did not finish within handoff.timeoutMs (it goes on in the background), failed, or was not taken because another owner holds the partition's claim. */
  handoffFailed?: 'timeout' | 'failed' | 'lost'
  handoffMs: number
}

/** What a task needs from the consumer it runs in. */
export interface TaskServices {
  watermarks(topic: string, partition: number): Promise<{ low: bigint; high: bigint }>
  groupOffset(topic: string, partition: number): Promise<bigint | undefined>
  deadLetter(records: DeadLetter[]): Promise<void>
  /** Stops fetching a partition (its outbox is full) until resumeAt. */
  pause(tp: TopicPartition): void
  /** Fetches a partition again from `offset`. */
  resumeAt(tp: TopicPartition, offset: bigint): void
  events: {
    restore(tp: TopicPartition, event: RestoreEvent): void
    snapshot(tp: TopicPartition, result: SnapshotResult): void
    snapshotFailed(tp: TopicPartition, error: unknown): void
    snapshotter(tp: TopicPartition, event: SnapshotterEvent): void
    commit(tp: TopicPartition, batch: { events: number; offset: bigint }): void
    skipped(tp: TopicPartition, record: { offset: bigint; action: 'skip' | 'dead-letter'; error: unknown }): void
    truncated(tp: TopicPartition, info: { position: bigint | undefined; logStart: bigint; action: 'fail' | 'reset-to-earliest' }): void
    outputs(tp: TopicPartition, event: OutputsEvent): void
  }
}

/** How often a running partition looks at its claim (one HEAD of the snapshot store). */
const OWNERSHIP_CHECK_MS = 1000

export type TaskState = 'new' | 'starting' | 'running' | 'closing' | 'closed' | 'failed'

/** The key of a partition in snapshot stores and state directories: unambiguous, since partitions are digits. */
export function partitionKey(tp: TopicPartition): string {
  return `${tp.topic}-${tp.partition}`
}

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
  #store: PartitionStore | undefined
  #snapshotter: Snapshotter | undefined
  #scheduler: SnapshotScheduler | undefined
  #ownership: PartitionOwnership | undefined
  /** The batch being applied: close() waits for it. */
  #busy: Promise<unknown> | undefined
  #failure: unknown
  /** The claim was found taken over by a newer owner. */
  #lost: TidemarkError | undefined
  #checking = false
  #checkedAt = performance.now()
  /** Settles when the store is closed (after a hand-off snapshot that outlived its timeout, too). */
  #closed: Promise<void> | undefined
  readonly #outputs: PartitionOutputs
  /** Paused in the consumer until the outbox has room. */
  #outboxPaused = false

  constructor(tp: TopicPartition, options: ResolvedConsumerOptions<V>, services: TaskServices) {
    this.topic = tp.topic
    this.partition = tp.partition
    this.key = partitionKey(tp)
    this.path = join(options.stateDir, this.key)
    this.#o = options
    this.#services = services
    this.#outputs = new PartitionOutputs({
      job: options.job, topic: tp.topic, partition: tp.partition, outputs: options.outputs, dedupe: options.dedupe,
      onEvent: (event) => services.events.outputs({ topic: tp.topic, partition: tp.partition }, event),
      onStoreFailed: (error) => void this.#fail(error),
      onDepth: (depth) => this.metrics.outbox(depth),
    })
    this.metrics = new PartitionMetrics({ job: options.job, ...tp }, this.key)
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
    return this.#failure
  }

  /** The store's position: the offset of the last record its state holds. */
  get position(): bigint | undefined {
    return this.#store?.position(this.topic, this.partition)
  }

  /** The partition store; available while the task runs (for reads, tests and tools). */
  get store(): PartitionStore | undefined {
    return this.#store
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
    const o = this.#o
    const tp = { topic: this.topic, partition: this.partition }
    const phase = this.#phases('start', t0)
    try {
      const snapshots = o.snapshots
      const prefetchDir = `${this.path}.prefetch`
      let prefetch: Prefetch | undefined
      this.#ownership = await acquireOwnership({
        store: snapshots?.store, job: o.job, partition: this.key, waitMs: o.handoff.waitMs,
        // While the previous owner takes its hand-off snapshot, the newest
        // snapshot's files are downloaded: the hand-off is incremental, so
        // the restore is then left with the files it added (in the bench,
        // 8 of 100 MiB). Not when a local store is there: the restore may
        // use it as it is.
        onWait: (known) => {
          const newest = known.valid[0]?.manifest
          if (snapshots === undefined || newest === undefined || existsSync(this.path)) return
          phase('prefetching')
          prefetch = prefetchSnapshot({
            snapshotStore: snapshots.store, job: o.job, partition: this.key, manifest: newest, dir: prefetchDir,
            downloadConcurrency: Math.min(PREFETCH_CONCURRENCY, o.downloadConcurrency ?? PREFETCH_CONCURRENCY),
          })
        },
        // The claim changed, most likely released: the reads in flight end
        // while the claim is taken (a GET and a conditional PUT), not after.
        // (stop() is idempotent: the restore's call below waits for the same reads.)
        onChange: () => { void prefetch?.stop() },
      }).catch(async (err: unknown) => {
        await prefetch?.dispose()
        throw err
      })
      phase('claimed')
      // A prefetch directory that no prefetch of ours uses is a killed
      // process's: removed now that the partition is ours (it holds up to a
      // whole snapshot, and nothing else would ever remove it).
      if (prefetch === undefined) await rm(prefetchDir, { recursive: true, force: true })
      let restored: RestoreResult | undefined
      if (snapshots !== undefined) {
        const reuse = await prefetch?.stop()
        if (reuse !== undefined) phase(`prefetched ${reuse.length} files`)
        restored = await restoreSnapshot({
          snapshotStore: snapshots.store,
          job: o.job,
          partition: this.key,
          target: this.path,
          allowEmpty: true,
          ...(o.downloadConcurrency === undefined ? {} : { downloadConcurrency: o.downloadConcurrency }),
          onEvent: (event) => this.#services.events.restore(tp, event),
          logger: o.logger,
          // The listing that chose the epoch: the start lists once.
          ...(this.#ownership.known === undefined ? {} : { knownManifests: this.#ownership.known }),
          ...(reuse === undefined ? {} : { reuse }),
        }).finally(() => prefetch?.dispose())
      } else {
        await mkdir(o.stateDir, { recursive: true })
      }
      phase('restored')
      this.#store = await PartitionStore.open({ ...o.store, path: this.path, states: this.#outputs.states(o.states) })
      phase('opened')
      let source: PartitionStarted['source'] = restored?.source ?? (this.position === undefined ? 'empty' : 'local')
      const { low, high } = await this.#services.watermarks(this.topic, this.partition)
      let fetchFrom: bigint
      const position = this.position
      if (position !== undefined) {
        fetchFrom = position + 1n
        if (fetchFrom < low) {
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
          await this.#store.close()
          this.#store = undefined
          await rm(this.path, { recursive: true, force: true })
          this.#store = await PartitionStore.open({ ...o.store, path: this.path, states: this.#outputs.states(o.states) })
          source = 'reset'
          fetchFrom = low
        }
      } else if (o.startFrom === 'earliest') {
        fetchFrom = low
      } else {
        fetchFrom = (await this.#services.groupOffset(this.topic, this.partition)) ?? high
      }
      // Delivers what the outbox holds (after a restart or a restore: what no owner confirmed).
      await this.#outputs.attach(this.#store)
      if (snapshots !== undefined) {
        const { store, schedule, ...rest } = snapshots
        const ownership = this.#ownership
        this.#snapshotter = new Snapshotter({
          ...rest,
          snapshotStore: store,
          partitionStore: this.#store,
          job: o.job,
          partition: this.key,
          epoch: this.#ownership.epoch,
          // The claim is checked right before each manifest, so a fenced
          // owner's scheduled snapshot never commits (TIDEMARK_OWNERSHIP_LOST
          // then stops the partition, see #snapshotFailed).
          beforeCommit: () => ownership.check(),
          ...(ownership.known === undefined ? {} : { knownManifests: ownership.known }),
          // Its first snapshot (a hand-off, often) then hashes only what is new.
          ...(restored?.verifiedFiles === undefined ? {} : { verifiedFiles: restored.verifiedFiles }),
          onEvent: (event) => this.#services.events.snapshotter(tp, event),
          logger: o.logger,
        })
        // Hashes ahead what the first snapshot would hash: off a hand-off's critical path.
        void this.#snapshotter.prepare()
        this.#scheduler = new SnapshotScheduler(this.#snapshotter, {
          ...schedule,
          onSnapshot: (result) => this.#services.events.snapshot(tp, result),
          onError: (error) => this.#snapshotFailed(error),
        })
        this.#scheduler.start()
      }
      this.#fetchFrom = fetchFrom
      phase('ready')
      if (this.#state !== 'starting') throw new TidemarkError('TIDEMARK_PROCESSOR_CLOSED', `partition ${this.topic}/${this.partition} was closed while it started`)
      this.#state = 'running'
      return {
        ...tp,
        source,
        ...(restored?.snapshot === undefined ? {} : { snapshot: restored.snapshot.id }),
        position: this.position,
        fetchFrom,
        epoch: this.#ownership.epoch,
        bytesDownloaded: restored?.bytesDownloaded ?? 0,
        restoreMs: performance.now() - t0,
      }
    } catch (err) {
      this.#failure ??= err
      this.#state = 'failed'
      await this.#shutdown().catch(() => undefined)
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
    const run = this.#apply(messages)
    this.#busy = run.catch(() => undefined)
    return run
  }

  async #apply(messages: readonly KafkaMessage[]): Promise<bigint | undefined> {
    const store = this.#store!
    const { batchSize, handler, codec, onDecodeError } = this.#o
    const tp = { topic: this.topic, partition: this.partition }
    let position = this.position ?? -1n
    let last: bigint | undefined
    let i = 0
    try {
      while (i < messages.length && this.#state === 'running') {
        this.#checkOwnership()
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
          for (; i < messages.length && events < batchSize; i++) {
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
        this.#scheduler?.noteCommit(events, bytes)
        this.#outputs.committed(end)
        if (halt !== undefined) throw halt
      }
      return last
    } catch (err) {
      await this.#fail(err)
      throw this.#failure
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
    return isTidemarkError(this.#failure, 'TIDEMARK_OWNERSHIP_LOST') || isTidemarkError(this.#failure, 'TIDEMARK_SNAPSHOT_FENCED')
  }

  /**
   * Looks at the claim now (one HEAD): false when another owner took it
   * (the task then stops with TIDEMARK_OWNERSHIP_LOST); true while this task
   * holds it, when there is no claim, or when the store cannot tell now
   * (the periodic check looks again).
   */
  async holdsClaim(): Promise<boolean> {
    const ownership = this.#ownership
    if (ownership === undefined || !ownership.claimed) return true
    try {
      await ownership.check()
      return true
    } catch (error) {
      if (!isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST')) return true
      this.#lost = error
      await this.#busy
      await this.#fail(error)
      return false
    }
  }

  /**
   * Looks at the claim at most once per OWNERSHIP_CHECK_MS, in the
   * background; the batch after a check found the claim taken over fails
   * with TIDEMARK_OWNERSHIP_LOST, which stops the partition.
   */
  #checkOwnership(): void {
    if (this.#lost !== undefined) throw this.#lost
    const ownership = this.#ownership
    if (ownership === undefined || !ownership.claimed || this.#checking) return
    const now = performance.now()
    if (now - this.#checkedAt < OWNERSHIP_CHECK_MS) return
    this.#checking = true
    this.#checkedAt = now
    ownership.check().then(() => undefined, (error: unknown) => {
      if (isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST')) this.#lost = error
    }).finally(() => {
      this.#checking = false
    })
  }

  /**
   * Ends the task: waits for the batch being applied (its commit included),
   * takes a hand-off snapshot within handoff.timeoutMs when asked to, closes
   * the store and releases ownership. A failed task only closes.
   */
  async close(reason: 'revoked' | 'shutdown', options: { handoff: boolean }): Promise<PartitionClosed> {
    const t0 = performance.now()
    const phase = this.#phases('close', t0)
    await this.#busy
    phase('batch-done')
    const result: PartitionClosed = {
      topic: this.topic,
      partition: this.partition,
      reason: this.#state === 'failed' ? 'failed' : reason,
      position: this.position,
      counts: { ...this.counts },
      handoffMs: 0,
    }
    if (this.#state === 'running' && options.handoff && this.#scheduler !== undefined) {
      this.#state = 'closing'
      // A newer owner's claim: its snapshots fence ours, and it replays from its own.
      const lost = this.#lost ?? await this.#ownership?.check().then(() => undefined, (error: unknown) => error)
      phase('claim-checked')
      const snapshot = lost !== undefined
        ? Promise.resolve(isTidemarkError(lost, 'TIDEMARK_OWNERSHIP_LOST') ? 'lost' as const : 'failed' as const)
        : this.#scheduler.trigger().then((r) => r ?? ('failed' as const))
      let timer: NodeJS.Timeout | undefined
      const timeout = new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), this.#o.handoff.timeoutMs)
      })
      const outcome = await Promise.race([snapshot, timeout])
      clearTimeout(timer)
      phase('handoff-snapshot')
      result.handoffMs = performance.now() - t0
      if (typeof outcome === 'string') result.handoffFailed = outcome
      else result.handoff = outcome
    }
    if (this.#state !== 'failed') this.#state = 'closing'
    // A hand-off snapshot past its timeout is still waited for here, in the
    // background: the store stays open until its checkpoint is done with it.
    this.#closed ??= this.#shutdown(phase)
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
    return this.#closed?.catch(() => undefined) ?? Promise.resolve()
  }

  async #fail(error: unknown): Promise<void> {
    if (this.#state === 'failed') return
    this.#failure ??= error
    this.#state = 'failed'
    this.#closed ??= this.#shutdown()
    await this.#closed.catch(() => undefined)
  }

  #snapshotFailed(error: unknown): void {
    // A store that failed in a snapshot's reopen cannot go on; an owner whose
    // snapshots are fenced by a newer owner must not go on either.
    const stops = isTidemarkError(error) && (
      (error.code.startsWith('TIDEMARK_STORE_') && !error.retriable) || error.code === 'TIDEMARK_SNAPSHOT_FENCED' || error.code === 'TIDEMARK_OWNERSHIP_LOST'
    )
    if (stops) {
      this.#failure ??= error
      this.#state = 'failed'
      this.#closed ??= this.#shutdown()
      return
    }
    this.#services.events.snapshotFailed({ topic: this.topic, partition: this.partition }, error)
  }

  async #shutdown(phase?: (step: string) => void): Promise<void> {
    if (this.#state !== 'failed') this.#state = 'closed'
    try {
      await this.#scheduler?.stop()
      await this.#snapshotter?.close()
      await this.#outputs.close()
      await this.#store?.close()
      phase?.('store-closed')
    } finally {
      await this.#ownership?.release(this.#snapshotter?.lastCommitted)
      phase?.('released')
    }
  }
}
