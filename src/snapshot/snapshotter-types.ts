import type { TidemarkError } from '../errors.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import type { PartitionStore } from '../store/partition-store.js'
import type { Position } from '../store/position.js'
import type { CorruptReason } from './archive.js'
import type { ManifestRef } from './catalog.js'
import type { GcResult } from './gc.js'
import type { SnapshotFile, SnapshotManifest } from './manifest.js'
import type { CheckedFile } from './options.js'
import type { FullReason } from './policy.js'
import type { Logger } from '../logging/logger.js'

export interface SnapshotterOptions {
  /** Where snapshots go. */
  snapshotStore: SnapshotStore
  /** The open partition store to snapshot. */
  partitionStore: PartitionStore
  /** Namespace of everything in the snapshot store; one key segment. */
  job: string
  /** The partition; one key segment (a number is written in decimal). */
  partition: string | number
  /** Ownership generation of this partition; snapshots of a higher epoch fence this writer. Default 0. */
  epoch?: number
  /** Snapshots to keep. Default 3. */
  retain?: number
  /** Unreferenced data objects younger than this are left alone by gc(): an upload may still be writing them. Default 1 hour. */
  graceMs?: number
  /** Run gc() after snapshots, on the cadence below; false: only when gc() is called. Default true. */
  gcAfterSnapshot?: boolean
  /** GC after the first snapshot of this Snapshotter, then after every this many snapshots (or gcIntervalMs, whichever comes first). Default 10. */
  gcEverySnapshots?: number
  /** ... or once this long has passed since the last GC run after a snapshot. Default 1 hour. */
  gcIntervalMs?: number
  /**
   * How a checkpoint is taken (docs/snapshots.md, "Checkpoints"). 'open'
   * (the default): with LevelDB open, commits held only while the files it
   * appends to are measured, compactions going on; it falls back to 'close'
   * when a compaction keeps deleting a file before its link, or the MANIFEST
   * has grown past 4 MiB. 'close': LevelDB closed (which waits for a
   * compaction in progress), files linked, reopened.
   */
  checkpoint?: 'open' | 'close'
  /** Where checkpoints are built; must be on the partition store's file system (hard links). Default `<store path>.checkpoints`. */
  checkpointDir?: string
  /** New files are packed into data objects of at most this size (a file is never split). Default 256 MiB. */
  maxObjectBytes?: number
  /** Data objects uploaded at once. Default 2. */
  uploadConcurrency?: number
  /** Compact point: write a full snapshot when the objects a snapshot references exceed this many times its state. Default 2. */
  maxAmplification?: number
  /** Compact point: write a full snapshot when it would reference objects of more than this many snapshots. Default 16. */
  maxChainLength?: number
  /**
   * How a Snapshotter without a claim check (see `beforeCommit`) learns that
   * another writer snapshots the partition ("Listing rules" in
   * docs/snapshots.md). 'listing' (the default): the manifests are listed
   * before each snapshot and again before its manifest, so a writer of a
   * newer epoch fails the next snapshot (about 2 LISTs and a HEAD per reused
   * object each time). 'create-only': on a store with conditional puts the
   * view is kept between full listings, as with a claim: a writer of the
   * same epoch is found when the create-only manifest write meets its
   * manifest, one of a newer epoch (or one that numbered past this writer)
   * at the next full listing (a GC run on its cadence, or the snapshot after
   * any failure); until then what this writer commits sorts below it and no
   * restore picks it. On a store without conditional puts 'listing' is used.
   */
  writerCheck?: 'listing' | 'create-only'
  /** Things worth a log line that do not fail a snapshot. */
  onEvent?: (event: SnapshotterEvent) => void
  /**
   * Called once per snapshot right before its manifest is written (after the
   * upload and the check for newer epochs): an owner proves there that it
   * still holds the partition (`claim.check()`, see docs/ownership.md).
   * With it, on a store that can hold claims (conditionalPut and
   * compareAndSwap), a newer owner, who must take the claim first, is found
   * before this snapshotter's next manifest, and that check stands for the
   * HEAD of the new data objects (see "Listing rules" in docs/snapshots.md;
   * without it, see `writerCheck`). A rejection fails the snapshot with
   * that very error (a TidemarkError such as TIDEMARK_OWNERSHIP_LOST is not
   * turned into a retriable upload failure); no manifest is written and the uploaded data objects are left
   * for gc(), as after any failure.
   */
  beforeCommit?: () => Promise<void>
  /**
   * The partition's manifests as the caller listed them right before (a
   * processor's start: `listManifests` and `readValidManifests`), so that the
   * first snapshot does not list them again. Used only where the view is
   * trusted (`beforeCommit` on a store that can hold a claim); the objects
   * that snapshot reuses are then checked with a HEAD each instead of a
   * data listing, and the GC cadence starts at construction (no GC after
   * the first snapshot).
   */
  knownManifests?: { refs: readonly ManifestRef[]; valid: ReadonlyArray<{ ref: ManifestRef; manifest: SnapshotManifest }> }
  /**
   * The files a restore wrote into this partition store and checked
   * (`RestoreResult.verifiedFiles`). Without them the first snapshot reads
   * and hashes every table file of the store to learn which ones the newest
   * snapshot already holds (100 MiB of state: a few hundred milliseconds of
   * CPU, on a hand-off's critical path). Only the files still there, of the
   * same size, unchanged since this snapshotter first looks at them, count.
   */
  verifiedFiles?: readonly CheckedFile[]
  /** Where snapshots, their failures and the events above are logged (pino-compatible); nothing is logged without one. */
  logger?: Logger
}

export type SnapshotterEvent =
  | { type: 'gc-failed'; error: TidemarkError }
  | { type: 'objects-unavailable'; objects: string[]; reason: string }
  | { type: 'live-set-unknown'; message: string }
  /** Listed manifests that do not verify (junk, truncated, of another key): ignored for numbering, fencing and reuse. Reported once per Snapshotter. */
  | { type: 'manifests-invalid'; manifests: Array<{ key: string; reason: CorruptReason; message: string }> }

export interface SnapshotFileResult extends SnapshotFile {
  /** Uploaded with this snapshot (false: referenced from an earlier one). */
  readonly uploaded: boolean
}

export interface SnapshotResult {
  id: string
  /** The manifest's key in the snapshot store. */
  key: string
  epoch: number
  sequence: number
  /** The checkpoint's source positions: replay starts after them. */
  positions: Position[]
  /** Every file was uploaded (a compact point). */
  full: boolean
  /** Why the snapshot is full, when it is. */
  fullReason?: FullReason
  files: SnapshotFileResult[]
  /** Size of the state: the sum of the files. */
  bytesTotal: number
  /** Bytes written to the snapshot store: new data objects and the manifest. */
  bytesUploaded: number
  /** New data objects (keys in the store). */
  objects: string[]
  /** How long commits were blocked by the checkpoint. */
  stallMs: number
  /** From the end of the checkpoint until the manifest was written. */
  uploadMs: number
  gc?: GcResult
}

export interface TakeSnapshotOptions {
  /** Upload every file, referencing nothing older. */
  full?: boolean
  /**
   * Whether the garbage collection that is due after this snapshot (see
   * gcAfterSnapshot) runs before the snapshot resolves. Default true. false
   * leaves it due for the next snapshot: a hand-off, whose next owner waits
   * for it, passes false.
   */
  gc?: boolean
}
