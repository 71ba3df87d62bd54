// The shapes a partition task shares with the consumer that runs it: what
// it reports (started, closed, counts) and what it needs (TaskServices).
import type { KafkaMessage } from 'kafkajs'
import type { TidemarkError } from '../../../src/errors.js'
import type { RestoreEvent, SnapshotResult, SnapshotterEvent } from '../../../src/snapshot/index.js'
import type { OutputsEvent } from '../../../src/outputs/index.js'
import type { OwnershipEvent, StateSizeExceeded } from '../../../src/runtime/index.js'

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
  /**
   * Milliseconds spent waiting for the previous owner's release before the
   * claim was taken (its hand-off snapshot, or `handoff.waitMs` for an owner
   * that never releases). 0 when the claim was free or released, and when
   * the assignor said the previous owner had left the group.
   */
  claimWaitMs: number
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
  /** Why the hand-off failed or was not taken ('failed' and 'lost'). */
  handoffError?: TidemarkError
  /** No hand-off snapshot: fewer than handoff.minEvents events were committed since the last snapshot (this many); the next owner replays them. */
  handoffSkipped?: { eventsSinceSnapshot: number }
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
    ownership(tp: TopicPartition, event: OwnershipEvent): void
    stateSizeExceeded(tp: TopicPartition, exceeded: StateSizeExceeded): void
  }
}

export type TaskState = 'new' | 'starting' | 'running' | 'closing' | 'closed' | 'failed'

/** The key of a partition in snapshot stores and state directories: unambiguous, since partitions are digits. */
export function partitionKey(tp: TopicPartition): string {
  return `${tp.topic}-${tp.partition}`
}

