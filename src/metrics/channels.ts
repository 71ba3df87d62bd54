import { channel } from 'node:diagnostics_channel'
import type { ErrorCode } from '../errors.js'

/**
 * The `node:diagnostics_channel` names Tidemark publishes on. A subscriber
 * (`diagnostics_channel.subscribe(METRICS_CHANNELS.commit, fn)`, or the
 * Prometheus adapter in `tidemark/prometheus`) gets one message object per
 * occurrence; docs/metrics.md lists each message's fields and the series the
 * adapter makes of them. Nothing is built or sent while a channel has no
 * subscriber: publishers check `hasSubscribers` first.
 */
export const METRICS_CHANNELS = Object.freeze({
  /**
   * A partition's metrics were made (its processor or consumer task exists):
   * its series can start at zero, so that a rate or an increase() sees the
   * first commit, failure or fencing.
   */
  partition: 'tidemark:partition',
  /** A batch committed: state changes and position in one LevelDB write. */
  commit: 'tidemark:commit',
  /** Events the log holds after the store's position. */
  lag: 'tidemark:lag',
  /** A snapshot committed (its manifest written) or failed. */
  snapshot: 'tidemark:snapshot',
  /** Bytes of a restore downloaded so far, and its end. */
  restore: 'tidemark:restore',
  /** Events of the replay after a start applied so far, and its end. */
  replay: 'tidemark:replay',
  /** The partition's claim and fencing: taken, a renewal failed, lost, fenced by a newer epoch, a release that failed. */
  ownership: 'tidemark:ownership',
  /** Outputs committed (in the outbox) and not delivered yet. Published by the outbox (src/outputs). */
  outbox: 'tidemark:outbox',
  /** A partition's state size on disk, measured at its start and after commits at a bounded rate, and its soft limit. */
  stateSize: 'tidemark:state-size',
} as const)

export type MetricsChannelName = (typeof METRICS_CHANNELS)[keyof typeof METRICS_CHANNELS]

/** Where a partition processor's or consumer task's figures come from. */
export interface PartitionLabels {
  job: string
  topic: string
  partition: number
}

/**
 * Where a snapshotter's or a restore's figures come from: the partition's key
 * in the snapshot store (a processor's partition number, a consumer's
 * `<topic>-<partition>`).
 */
export interface SnapshotLabels {
  job: string
  partition: string
}

/** Values of the labels known in advance: an exporter starts a partition's series of each at zero. */
export const SNAPSHOT_OUTCOMES = Object.freeze(['ok', 'failed'] as const)
/**
 * The codes a snapshot fails with by design (the Snapshotter's own, and the
 * runtimes' claim check before a manifest is written); 'unknown' is any
 * error that is not a TidemarkError. Another code can still occur (a store
 * that fails to reopen after its checkpoint): the outcome counts it too.
 */
export const SNAPSHOT_FAILURE_CODES = Object.freeze([
  'TIDEMARK_SNAPSHOT_CHECKPOINT_FAILED', 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', 'TIDEMARK_SNAPSHOT_FENCED', 'TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED',
  'TIDEMARK_OWNERSHIP_LOST', 'unknown',
] as const satisfies ReadonlyArray<ErrorCode | 'unknown'>)
export const RESTORE_SOURCES = Object.freeze(['snapshot', 'local', 'empty'] as const)
export const OWNERSHIP_EVENTS = Object.freeze(['acquired', 'holder-dead', 'renew-failed', 'lost', 'fenced', 'release-failed'] as const)

export interface PartitionMessage extends PartitionLabels {
  /** The partition's key in the snapshot store: the `partition` label of its snapshot, restore and ownership series. */
  snapshotPartition: string
}

export interface CommitMessage extends PartitionLabels {
  /** Events in the batch (the commit's size). */
  events: number
  /** Bytes of those events as read from the log. */
  bytes: number
  /** The position committed: the batch's last offset. */
  offset: bigint
  /** From the batch handed to the store until its write was acknowledged. */
  durationMs: number
}

export interface LagMessage extends PartitionLabels {
  /** The store's position, undefined before the first commit. */
  position: bigint | undefined
  /** The log's tail when last looked at: the next offset it will write (a Kafka high watermark). */
  tail: bigint
  /** tail − (position + 1): events in the log not yet applied. */
  lag: number
}

export type SnapshotMessage = SnapshotLabels & (
  | {
    outcome: 'ok'
    /** From the start of the checkpoint until the manifest was written, the gc that follows it (when due) included. */
    durationMs: number
    /** How long commits were blocked by the checkpoint. */
    stallMs: number
    /** Bytes written to the snapshot store: new data objects and the manifest. */
    bytesUploaded: number
    /** The size of the state the snapshot holds. */
    bytesTotal: number
    full: boolean
    /** The snapshot's position (the highest source offset it holds), if any. */
    offset: bigint | undefined
  }
  | {
    outcome: 'failed'
    durationMs: number
    /** The TidemarkError's code, or 'unknown'. */
    code: string
  }
)

export interface RestoreMessage extends SnapshotLabels {
  /** 'progress' while downloading; 'done' once, when the store is in place (also for a local store or an empty start). */
  phase: 'progress' | 'done'
  /** With 'done': where the state came from. */
  source?: (typeof RESTORE_SOURCES)[number]
  bytesDownloaded: number
  bytesTotal: number
  /** With 'done': the whole restore. */
  durationMs?: number
}

export interface ReplayMessage extends PartitionLabels {
  /** Events of the replay applied so far. */
  done: number
  /** Events the replay covers (the log's tail at its start, less the position). */
  total: number
  /** The last message of this replay. */
  final: boolean
}

export interface OwnershipMessage extends SnapshotLabels {
  /**
   * acquired: this owner took the claim (epoch); holder-dead: it took it
   * at once from a holder on this host proven dead; renew-failed: a renewal
   * failed with a store error (retried); lost: another owner took the claim;
   * fenced: a snapshot found a newer epoch or its manifest key taken;
   * release-failed: close() could not give the claim up.
   */
  event: (typeof OWNERSHIP_EVENTS)[number]
  epoch?: number
}

export interface OutboxMessage extends PartitionLabels {
  /** Outputs committed in the outbox and not yet delivered. */
  depth: number
}

export interface StateSizeMessage extends PartitionLabels {
  /** Bytes of the partition store's state files (tables, write-ahead logs, MANIFEST): what a snapshot of it would hold. */
  bytes: number
  /** The partition's soft limit (the runtime's `stateSizeLimit`), if one is set. */
  limit: number | undefined
}

/** The message type of each channel. */
export interface MetricsMessages {
  'tidemark:partition': PartitionMessage
  'tidemark:commit': CommitMessage
  'tidemark:lag': LagMessage
  'tidemark:snapshot': SnapshotMessage
  'tidemark:restore': RestoreMessage
  'tidemark:replay': ReplayMessage
  'tidemark:ownership': OwnershipMessage
  'tidemark:outbox': OutboxMessage
  'tidemark:state-size': StateSizeMessage
}

/**
 * The channel objects, made once: `channel(name)` returns the same object for
 * a name, and holding it keeps `hasSubscribers` a property read.
 */
export const channels = Object.freeze({
  partition: channel(METRICS_CHANNELS.partition),
  commit: channel(METRICS_CHANNELS.commit),
  lag: channel(METRICS_CHANNELS.lag),
  snapshot: channel(METRICS_CHANNELS.snapshot),
  restore: channel(METRICS_CHANNELS.restore),
  replay: channel(METRICS_CHANNELS.replay),
  ownership: channel(METRICS_CHANNELS.ownership),
  outbox: channel(METRICS_CHANNELS.outbox),
  stateSize: channel(METRICS_CHANNELS.stateSize),
})

/**
 * Publishes a message built only when someone listens: callers pass a
 * function, or check `channels.X.hasSubscribers` themselves on a hot path.
 */
export function publish<K extends keyof typeof channels>(name: K, build: () => MetricsMessages[(typeof METRICS_CHANNELS)[K]]): void {
  const ch = channels[name]
  if (ch.hasSubscribers) ch.publish(build())
}
