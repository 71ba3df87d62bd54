import { TidemarkError } from '../errors.js'
import { NO_REVISION, type RevisionedLog } from '../log/revisioned-log.js'
import { decodeFailed, type Codec } from '../store/codec.js'
import type { PartitionStore } from '../store/partition-store.js'
import type { Transaction } from '../store/transaction.js'
import type { StateSynchronizer } from '../synchronizer/state-synchronizer.js'

/** Where an event came from; handed to the handler with the event. */
export interface EventContext {
  readonly topic: string
  readonly partition: number
  /** The event's revision in the source log; the store's position after its batch commits. */
  readonly offset: bigint
}

/**
 * Applies one event to the state. It runs inside the batch's transaction and
 * must change state only through `tx`: the batch commits all of its events'
 * effects with the position of its last event, or none of them. It may run
 * again for the same event after a crash (the batch was not committed), so it
 * must not have side effects outside `tx`.
 */
export type EventHandler<E> = (tx: Transaction, event: E, context: EventContext) => void | Promise<void>

export interface FetchOptions {
  /** Stop before this revision (exclusive) instead of at the tail as it was when the fetch began. */
  end?: bigint
  /** Called after each committed batch. */
  onBatch?: (batch: { events: number; offset: bigint; bytes: number }) => void
  /** Stops the fetch after the current batch commits. */
  signal?: AbortSignal
  /** Events per commit for this fetch; the synchronizer's batchSize by default. */
  batchSize?: number
  /**
   * Called as soon as a commit fails, before the fetch rejects with that
   * failure (which may wait for handlers of the next batch): a store that
   * failed a commit may fail other calls meanwhile, and their errors are
   * consequences of this one.
   */
  onCommitFailed?: (error: unknown) => void
  /**
   * Called before each batch is committed (after the previous commit was
   * written). When it throws or rejects, that batch is not committed and the
   * fetch rejects with its error: an owner that can no longer prove it holds
   * the partition writes nothing more.
   */
  beforeCommit?: () => void | Promise<void>
}

export interface PartitionSynchronizerOptions<E> {
  store: PartitionStore
  log: RevisionedLog
  topic: string
  partition: number
  handler: EventHandler<E>
  codec: Codec<E>
  batchSize: number
}

/**
 * The StateSynchronizer contract with a partition store as the state: the
 * store's position is the revision, each source event is an update, and the
 * operator's handler applies it. fetchUpdates() is both live processing and
 * replay after a restore; there is no other code path.
 *
 * The source log belongs to the producers, so the write half of the contract
 * (updateState, initialize) has no meaning here; compaction is a snapshot,
 * which the processor takes.
 */
export class PartitionSynchronizer<E> implements Pick<StateSynchronizer<PartitionStore, E>, 'getState' | 'getRevision'> {
  readonly #o: PartitionSynchronizerOptions<E>

  constructor(options: PartitionSynchronizerOptions<E>) {
    this.#o = options
  }

  getState(): PartitionStore {
    return this.#o.store
  }

  getRevision(): bigint {
    return this.#o.store.position(this.#o.topic, this.#o.partition) ?? NO_REVISION
  }

  /**
   * Reads every entry after the store's position (up to `end`) and applies
   * each through the handler, committing every `batchSize` events with the
   * position of the batch's last event. Resolves with the number applied.
   *
   * A handler that throws aborts its batch (nothing of it is committed) and
   * the fetch rejects with TIDEMARK_HANDLER_FAILED naming the topic,
   * partition and offset; the next fetch starts again at the batch's first
   * event. A TidemarkError that reaches the handler from the store (a read
   * of a store that failed, a value that does not decode) is no fault of the
   * handler and passes through as it is. When a commit fails, the fetch
   * rejects with that failure (TIDEMARK_COMMIT_FAILED), also if something
   * failed after it while the next batch was processed.
   */
  async fetchUpdates(options: FetchOptions = {}): Promise<number> {
    const { store, log, topic, partition, handler, codec } = this.#o
    const batchSize = options.batchSize ?? this.#o.batchSize
    if (!Number.isInteger(batchSize) || batchSize < 1) throw new RangeError(`options.batchSize must be a positive integer, got ${batchSize}`)
    const from = this.getRevision() + 1n
    let applied = 0
    let tx = store.transaction()
    let inBatch = 0
    let bytes = 0
    let last = NO_REVISION
    // The commit of the previous batch, still being written while the next
    // batch is processed: the next transaction reads its writes meanwhile and
    // does not commit (writes nothing) unless it succeeded.
    let inFlight: Promise<void> | undefined
    let commitFailure: { error: unknown } | undefined
    // Takes its arguments rather than reading the loop's variables, which
    // keeps those out of a closure's context on the per-event path.
    const commit = async (committing: Transaction, batch: { events: number; offset: bigint; bytes: number }): Promise<void> => {
      if (inFlight !== undefined) await inFlight
      if (options.beforeCommit !== undefined) {
        const ready = options.beforeCommit()
        if (ready !== undefined) await ready
      }
      const written = committing.commit({ topic, partition, offset: batch.offset })
      inFlight = written.then(() => {
        applied += batch.events
        options.onBatch?.(batch)
      }, (error: unknown) => {
        commitFailure ??= { error }
        options.onCommitFailed?.(error)
        throw error
      })
      // Awaited by the next commit or at the end; this only keeps a failure
      // from being reported as unhandled before then.
      inFlight.catch(() => undefined)
    }
    try {
      const read = options.end === undefined ? log.readBatches(from) : log.readBatches(from, { end: options.end })
      for await (const entries of read) {
        // The store stays open while handlers run, so that their reads,
        // getSync() too, never meet a checkpoint's quiesce; released before
        // a commit, which a quiesce may be ahead of.
        let release = store.tryHold() ?? await store.hold()
        // A batch also closes at the memtable's size: a larger one would
        // stay in memory whole, per partition (docs/partition-store.md).
        const batchBytes = store.batchBytes
        try {
          for (const entry of entries) {
            const offset = entry.revision
            let event: E
            try {
              event = codec.decode(entry.data)
            } catch (cause) {
              // Not decodeWith: its description thunk would be a closure per event.
              throw decodeFailed(codec, `event ${topic}/${partition}@${offset}`, entry.data.byteLength, cause, { topic, partition, offset })
            }
            try {
              // Only a handler that returns a promise costs an await.
              const done = handler(tx, event, { topic, partition, offset })
              if (done !== undefined) await done
            } catch (cause) {
              if (cause instanceof TidemarkError) throw cause
              throw new TidemarkError(
                'TIDEMARK_HANDLER_FAILED',
                `the handler failed on ${topic}/${partition}@${offset}: ${(cause as Error)?.message ?? cause}; nothing of its batch was committed`,
                { cause, details: { topic, partition, offset } },
              )
            }
            last = offset
            bytes += entry.data.byteLength
            if (++inBatch >= batchSize || tx.pendingBytes >= batchBytes) {
              release()
              const committing = tx
              await commit(committing, { events: inBatch, offset: last, bytes })
              tx = store.transaction({ after: committing })
              inBatch = 0
              bytes = 0
              if (options.signal?.aborted) {
                await inFlight
                return applied
              }
              release = store.tryHold() ?? await store.hold()
            }
          }
        } finally {
          release()
        }
      }
      if (inBatch > 0) {
        await commit(tx, { events: inBatch, offset: last, bytes })
        inBatch = 0
      }
      await inFlight
      return applied
    } catch (err) {
      // The first failure is the one to report: after a failed commit, what
      // fails next (the batch that follows it, a read of the store the
      // failure left unusable) is its consequence.
      await inFlight?.catch(() => undefined)
      throw commitFailure === undefined ? err : commitFailure.error
    } finally {
      if (tx.isOpen) tx.abort()
      // A batch still being written when the fetch fails finishes (and is
      // reported) before the fetch settles, so the caller may close the store.
      await inFlight?.catch(() => undefined)
    }
  }
}
