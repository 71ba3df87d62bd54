import { lstat } from 'node:fs/promises'
import { join } from 'node:path'
import { inspectLocal, restoreKeepingStore, type LocalState, type RestoreResult, type ReusableFile } from '../snapshot/restore/index.js'
import type { VerifiedManifests } from '../snapshot/catalog.js'
import type { Prefetch } from '../snapshot/prefetch.js'
import type { PartitionStore } from '../store/partition-store.js'
import type { SnapshotFollower } from '../snapshot/follow.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import type { StateDefinition } from '../store/state.js'
import type { Logger } from '../logging/logger.js'
import type { LifecycleEvents } from './lifecycle-events.js'
import { ProgressMeter } from './progress.js'
import { fileKind } from '../snapshot/leveldb-files.js'
import { mapLimit } from '../util/index.js'

/** A partition's restore settings: the part of PartitionLifecycleOptions that a restore takes. */
export interface RestoreStepOptions {
  job: string
  /** The partition's name in the snapshot store: its number for a standalone processor, `<topic>-<partition>` in a consumer group. */
  key: number | string
  /** Labels of the source partition, for messages and logs. */
  topic: string
  partition: number
  /** The local partition store directory. */
  path: string
  states: readonly StateDefinition[]
  /** Start from empty state when neither a local store nor a usable snapshot exists. */
  allowEmpty: boolean
  downloadConcurrency?: number
  logger: Logger
  events: Pick<LifecycleEvents, 'progress' | 'restore'>
  /**
   * A warm copy of the partition's snapshots that this process kept as a
   * standby: stopped, and its files handed to the restore (which then
   * downloads only what came after its last sync), once the claim is held;
   * with an assigned claim, as the start begins (the lifecycle's #restoreAhead).
   */
  standby?: SnapshotFollower
}

export type IntactLocal = LocalState & { state: 'intact' }

/** A restore's outcome: the store comes back open when the local one was used as it was. */
export interface RestoredStep {
  result: RestoreResult
  store?: PartitionStore
}

/**
 * The local store, inspected and opened (by `open`) while the claim is
 * taken, so that a start that uses it as it is opens it once. Undefined
 * when it is not an intact store or anything here failed: the restore then
 * inspects it again, and reports what it finds as it always did.
 */
export async function inspectIntact(path: string, open: () => Promise<PartitionStore>): Promise<IntactLocal | undefined> {
  try {
    const local = await inspectLocal(path, true, open)
    return local.state === 'intact' ? local : undefined
  } catch {
    return undefined
  }
}

/** The standby copy's files, once its follower stopped (a sync must not remove what the restore links). */
export async function standbyFiles(o: RestoreStepOptions): Promise<ReusableFile[] | undefined> {
  if (o.standby === undefined) return undefined
  await o.standby.stop()
  return o.standby.reusableFiles()
}

/**
 * The table files that a restore installed at `path` and verified, to be
 * linked by the next restore over the same store instead of hashed again
 * (the restore of a hand-off over the store restored ahead of the claim:
 * hashing a 512 MiB store's tables took 1.5 s). A table's bytes are synced
 * by the restore that installed them, and LevelDB never rewrites a table;
 * one that a compaction removed since (the store was open) is left out.
 * Only tables: LevelDB rewrites CURRENT and MANIFESTs at every open.
 */
export async function restoredTables(path: string, result: RestoreResult): Promise<ReusableFile[]> {
  const tables = (result.verifiedFiles ?? []).filter((f) => fileKind(f.name) === 'table')
  const found = await mapLimit(tables, 8, async (f) => {
    const file = join(path, f.name)
    const info = await lstat(file).catch(() => undefined)
    return info?.isFile() === true && info.size === f.size ? { ...f, path: file, synced: true } : undefined
  })
  return found.filter((f) => f !== undefined)
}

/**
 * One restore of the partition from `known` (restoreKeepingStore): `local`
 * is the store inspected beforehand (closed here unless it comes back
 * open), `reuse` the files it may link instead of downloading. The
 * prefetch and the standby copy are disposed of once it ended, whatever
 * the outcome: the restored store holds its own links to their files.
 */
export async function restoreStep(o: RestoreStepOptions, store: SnapshotStore, known: VerifiedManifests, reuse: ReusableFile[] | undefined, local: IntactLocal | undefined, prefetch: Prefetch | undefined): Promise<RestoredStep> {
  const meter = o.events.progress === undefined ? undefined : new ProgressMeter('restore', o.events.progress)
  const kept = await restoreKeepingStore({
    snapshotStore: store,
    job: o.job,
    partition: o.key,
    target: o.path,
    allowEmpty: o.allowEmpty,
    ...(o.downloadConcurrency === undefined ? {} : { downloadConcurrency: o.downloadConcurrency }),
    ...(meter === undefined ? {} : { onProgress: (p: { bytesDownloaded: number; bytesTotal: number }) => meter.update(p.bytesDownloaded, p.bytesTotal) }),
    onEvent: (event) => o.events.restore(event),
    logger: o.logger,
    knownManifests: known,
    states: o.states,
    ...(reuse === undefined ? {} : { reuse }),
  }, local).finally(async () => {
    await prefetch?.dispose()
    await o.standby?.dispose().catch((error: unknown) => o.logger.warn({ job: o.job, topic: o.topic, partition: o.partition, err: error }, 'removing the standby copy failed'))
  })
  meter?.finish()
  return kept
}
