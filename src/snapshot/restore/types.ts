import type { SnapshotStore } from '../../snapshot-store/snapshot-store.js'
import type { Position } from '../../store/position.js'
import type { StateDefinition } from '../../store/state.js'
import type { CorruptReason } from '../archive.js'
import type { ManifestRef } from '../catalog.js'
import type { SnapshotManifest } from '../manifest.js'
import type { CheckedFile } from '../options.js'
import type { Logger } from '../../logging/logger.js'

export interface RestoreOptions {
  snapshotStore: SnapshotStore
  job: string
  partition: string | number
  /**
   * The partition store directory to fill. It must be absent, empty, or hold
   * a partition store (which is used or replaced): one Tidemark made (it
   * holds the TIDEMARK-STORE marker) or a plain LevelDB store of an earlier
   * version. Anything else fails with TIDEMARK_STORE_NOT_A_STORE before
   * anything is downloaded, moved or deleted.
   */
  target: string
  /** Restore exactly this snapshot id: no fallback to older ones, the local store is not considered. */
  snapshot?: string
  /** Use the local store at `target` when it is intact and at or after the snapshot. Default true. */
  useLocal?: boolean
  /** When no snapshot is usable (and no local store), create an empty directory instead of failing. Default false. */
  allowEmpty?: boolean
  /** Byte ranges downloaded at once. Default 6. */
  downloadConcurrency?: number
  /** Largest byte range one request reads (consecutive files are read in one range up to this size). Default 128 MiB. */
  rangeBytes?: number
  /** fsync every restored file before it is moved into place. Default true. */
  fsync?: boolean
  /** Minimum time between two onProgress calls (the last one always comes). Default 250 ms. */
  progressIntervalMs?: number
  onProgress?: (progress: RestoreProgress) => void
  onEvent?: (event: RestoreEvent) => void
  /** Where the restore logs what it decided (pino-compatible); nothing is logged without one. */
  logger?: Logger
  /**
   * The partition's manifests as the caller listed and read them right
   * before (`listManifests` and `readValidManifests`, as a processor's start
   * does to choose its epoch), so that the restore lists nothing and reads
   * no manifest twice. The rules stay those of a listing: newest first,
   * a listed manifest that is not among `valid` is read (and skipped when
   * it does not verify), and every snapshot's objects are verified as they
   * download. A manifest committed after that listing is not seen.
   */
  knownManifests?: { refs: readonly ManifestRef[]; valid: ReadonlyArray<{ ref: ManifestRef; manifest: SnapshotManifest }> }
  /**
   * Files already downloaded and verified on the target's file system
   * (prefetchSnapshot, src/snapshot/prefetch.ts; a SnapshotFollower's
   * reusableFiles(), src/snapshot/follow.ts): a file of the restored
   * snapshot with the same name, size and SHA-256 is hard-linked from there
   * instead of downloaded, and fsynced with the downloaded ones (unless
   * it says it is `synced`).
   */
  reuse?: readonly ReusableFile[]
  /**
   * The program's states: a snapshot whose manifest records one of them at a
   * higher version than declared fails the restore with
   * TIDEMARK_STATE_VERSION_AHEAD before anything is downloaded or the local
   * store is used (docs/state-evolution.md).
   */
  states?: readonly StateDefinition[]
}

/** A file of a restored store whose bytes were checked against its manifest (RestoreResult.verifiedFiles). */
export type VerifiedFile = CheckedFile

/** A verified local copy of a snapshot file (see RestoreOptions.reuse). */
export interface ReusableFile extends CheckedFile {
  path: string
  /**
   * True when the file's bytes are on disk already (fsynced by whoever
   * wrote them): the restore links it without syncing it again, and the
   * fsync of the restored directory makes the link durable. A SnapshotFollower's
   * files say so; a prefetch's do not. Leave it out unless it is certain:
   * a file still in the page cache alone would be lost to a power cut
   * after the store that links it was installed.
   */
  synced?: boolean
}

export interface RestoreProgress {
  snapshot: string
  bytesDownloaded: number
  bytesTotal: number
  filesDone: number
  filesTotal: number
}

export interface SkippedSnapshot {
  id: string
  key: string
  /** Why it failed verification, or `other-lineage`: older than a snapshot of another lineage (an offline transform's), so never a fallback for it. */
  reason: CorruptReason | 'other-lineage'
  message: string
}

export type RestoreEvent =
  | { type: 'snapshot-skipped'; skipped: SkippedSnapshot }
  | { type: 'snapshot-restoring'; id: string; key: string; bytesTotal: number; files: number }
  | { type: 'local-store-used'; positions: Position[]; reason: string }
  | { type: 'local-store-replaced'; reason: string }

export interface SnapshotSummary {
  id: string
  key: string
  epoch: number
  sequence: number
  createdAt: string
  positions: Position[]
}

export interface RestoreResult {
  /** Where the state came from: a downloaded snapshot, the local store that was already there, or nothing (allowEmpty). */
  source: 'snapshot' | 'local' | 'empty'
  target: string
  /** The restored snapshot; with source 'local', the newest snapshot the local store was compared with, if any. */
  snapshot?: SnapshotSummary
  /** The store's source positions: replay starts after them. */
  positions: Position[]
  bytesDownloaded: number
  bytesTotal: number
  files: number
  /**
   * With source 'snapshot': the snapshot's files as written into the target,
   * each checked against its size and SHA-256. A Snapshotter of the restored
   * store takes them as `verifiedFiles`, so that its first snapshot does not
   * read the whole store again to learn which files it already holds.
   */
  verifiedFiles?: VerifiedFile[]
  durationMs: number
  /** Newer snapshots that could not be used, newest first, and why. */
  skipped: SkippedSnapshot[]
}
