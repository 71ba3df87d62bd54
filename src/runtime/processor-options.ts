// The options, defaults, start result and events of PartitionProcessor.
import type { RevisionedLog } from '../log/revisioned-log.js'
import type { ClaimTakeover } from '../ownership/claim.js'
import type { MemberLease } from '../ownership/member-lease.js'
import type { Codec } from '../store/codec.js'
import type { PartitionStoreOptions } from '../store/store-options.js'
import type { StateDefinition } from '../store/state.js'
import type { RecordedState } from '../store/state-registry.js'
import type { RestoreEvent, RestoreResult } from '../snapshot/restore/index.js'
import type { SnapshotResult, SnapshotterEvent } from '../snapshot/snapshotter-types.js'
import type { TidemarkError } from '../errors.js'
import type { Logger } from '../logging/logger.js'
import type { DedupeMode, EmitContext, OutputsEvent, OutputsOptions } from '../outputs/types.js'
import type { EventHandler } from './partition-synchronizer.js'
import type { StateSizeExceeded } from './state-size.js'
import type { Progress } from './progress.js'
import type { LifecycleSnapshotSettings, OwnershipEvent } from './partition-lifecycle.js'

export interface SnapshotSettings extends LifecycleSnapshotSettings {
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
  /**
   * Hold the claim by this process's member lease (MemberLease.start()),
   * shared by every processor of the process, instead of a lease of its own
   * renewed per partition: renewal requests then do not grow with the
   * partitions a process owns (docs/ownership.md, "Member leases"). Excludes leaseMs.
   */
  memberLease?: MemberLease
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
  /**
   * How long run() waits before looking at the log again when it is caught
   * up. Default 50 ms. On a FileLog, appends written in this process wake it
   * at once, and looks that find nothing double the wait up to 1 s
   * (docs/processor.md, "Waiting for the log").
   */
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
  /**
   * A soft limit on the partition's state size, in bytes (a positive
   * integer): above it a warn line is logged and `state-size-exceeded` is
   * emitted, once per crossing; nothing is refused. The size (its
   * store's files, `tidemark_state_bytes`) is measured at start() and
   * after commits at most every 15 s (docs/partition-store.md, "A cap per partition").
   */
  stateSizeLimit?: number
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
  /** The partition's claim: taken at once from a holder proven dead, a failed renewal or release, the claim lost. */
  ownership: [OwnershipEvent]
  /** Outputs: delivered, delivery-failed, outbox-full, outbox-resumed, duplicate-skipped. */
  outputs: [OutputsEvent]
  /** Once per start, before processing: the store holds states `states` does not list. They are kept (and logged); dropState or `tidemark state drop` removes one on purpose. */
  'states-undeclared': [RecordedState[]]
  /** The partition's state size went above options.stateSizeLimit (also logged at warn): once per crossing, again only after it went back below. */
  'state-size-exceeded': [StateSizeExceeded]
}

