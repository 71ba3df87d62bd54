import { channels, type OwnershipMessage, type PartitionLabels, type SnapshotLabels } from './channels.js'
import { describeValue } from '../util/describe-value.js'

/**
 * The metrics of one partition as its processor (or consumer task) publishes
 * them; making one announces the partition (METRICS_CHANNELS.partition). Every method returns at once while its channel has no subscriber:
 * one property read, no message built, no clock read.
 */
export class PartitionMetrics {
  readonly labels: Readonly<PartitionLabels>
  /** The partition's key in the snapshot store, for the ownership messages. */
  readonly snapshotLabels: Readonly<SnapshotLabels>

  constructor(labels: PartitionLabels, snapshotPartition: string = String(labels?.partition)) {
    // The labels of every metric: junk here would surface as a strange
    // series in whatever scrapes them, far from the mistake.
    if (typeof labels !== 'object' || labels === null) throw new TypeError(`labels must be an object { job, topic, partition }, got ${describeValue(labels)}`)
    for (const name of ['job', 'topic'] as const) {
      if (typeof labels[name] !== 'string' || labels[name] === '') throw new TypeError(`labels.${name} must be a non-empty string, got ${JSON.stringify(labels[name]) ?? typeof labels[name]}`)
    }
    if (!Number.isInteger(labels.partition) || labels.partition < 0) throw new RangeError(`labels.partition must be a non-negative integer, got ${String(labels.partition)}`)
    if (typeof snapshotPartition !== 'string' || snapshotPartition === '') throw new TypeError(`snapshotPartition must be a non-empty string, got ${JSON.stringify(snapshotPartition) ?? typeof snapshotPartition}`)
    this.labels = Object.freeze({ job: labels.job, topic: labels.topic, partition: labels.partition })
    this.snapshotLabels = Object.freeze({ job: labels.job, partition: snapshotPartition })
    // Announced once, so that an exporter starts the partition's series at
    // zero: a counter that first appears at 1 is invisible to increase().
    if (channels.partition.hasSubscribers) channels.partition.publish({ ...this.labels, snapshotPartition })
  }

  /** A clock reading to hand to committed() for the commit's latency; 0 (no clock read) while nobody listens. */
  commitStarted(): number {
    return channels.commit.hasSubscribers ? performance.now() : 0
  }

  /**
   * A batch committed. With `tail` (the log's tail as last seen) the lag
   * after this commit is published too.
   */
  committed(events: number, bytes: number, offset: bigint, startedAt: number, tail?: bigint): void {
    if (channels.commit.hasSubscribers) {
      const durationMs = startedAt > 0 ? performance.now() - startedAt : 0
      channels.commit.publish({ ...this.labels, events, bytes, offset, durationMs })
    }
    if (tail !== undefined) this.lag(offset, tail)
  }

  /** The log holds `tail` (next offset to write); the store is at `position`. */
  lag(position: bigint | undefined, tail: bigint): void {
    if (!channels.lag.hasSubscribers) return
    const behind = tail - (position === undefined ? 0n : position + 1n)
    channels.lag.publish({ ...this.labels, position, tail, lag: behind > 0n ? Number(behind) : 0 })
  }

  /** Replay progress after a start. */
  replay(done: number, total: number, final: boolean): void {
    if (channels.replay.hasSubscribers) channels.replay.publish({ ...this.labels, done, total, final })
  }

  ownership(event: OwnershipMessage['event'], epoch?: number): void {
    if (channels.ownership.hasSubscribers) channels.ownership.publish({ ...this.snapshotLabels, event, ...(epoch === undefined ? {} : { epoch }) })
  }

  /** The partition's state size on disk and its soft limit. */
  stateSize(bytes: number, limit: number | undefined): void {
    if (channels.stateSize.hasSubscribers) channels.stateSize.publish({ ...this.labels, bytes, limit })
  }

  /** Outputs committed in the outbox and not delivered yet. */
  outbox(depth: number): void {
    if (channels.outbox.hasSubscribers) channels.outbox.publish({ ...this.labels, depth })
  }
}
