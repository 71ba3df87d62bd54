import { readdir } from 'node:fs/promises'
import { isTidemarkError, TidemarkError } from '../errors.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import type { RevisionedLog } from '../log/revisioned-log.js'
import { jsonCodec, decodeWith, type Codec } from '../store/codec.js'
import { PartitionStore } from '../store/partition-store.js'
import type { StateDefinition } from '../store/state.js'
import { listManifests, readManifest } from '../snapshot/catalog.js'
import { SnapshotLayout } from '../snapshot/layout.js'
import { restoreSnapshot } from '../snapshot/restore/index.js'
import { PartitionSynchronizer, type EventHandler } from './partition-synchronizer.js'
import { ProgressMeter, type Progress } from './progress.js'
import { describeValue } from '../util/describe-value.js'

export interface PointInTimeOptions<E> {
  job: string
  topic: string
  partition: number
  log: RevisionedLog
  states: readonly StateDefinition[]
  handler: EventHandler<E>
  codec?: Codec<E>
  batchSize?: number
  /** Snapshots to start from; without them the replay starts at offset 0. */
  snapshotStore?: SnapshotStore
  /**
   * The state as of an offset (every event at or before it), or as of a time:
   * every event before the first one whose `timestampOf` is after it. The
   * embedded file log stores no timestamps, so a time target needs
   * `timestampOf` to read the event's own time.
   */
  target: { offset: bigint } | { timestamp: number; timestampOf: (event: E) => number }
  /** A new directory for the restored store; it must not exist or be empty. The live store is never touched. */
  path: string
  onProgress?: (progress: Progress) => void
}

export interface PointInTimeResult {
  path: string
  /** The store's position: the last event applied (undefined: none). */
  offset: bigint | undefined
  /** The snapshot it started from, if any. */
  snapshot?: string
  /** Snapshots at or before the target that could not be used, and why. */
  skipped: { id: string; reason: string }[]
  replayed: number
}

/**
 * Restores a partition's state as of a point in the past into a separate
 * directory: the newest usable snapshot at or before the target, then the
 * log replayed through the handler up to the target.
 */
export async function restoreToPoint<E>(options: PointInTimeOptions<E>): Promise<PointInTimeResult> {
  if (typeof options !== 'object' || options === null) throw new TypeError(`options must be an object, got ${describeValue(options)}`)
  const { job, topic, partition, log, states, handler, snapshotStore, path } = options
  const codec = options.codec ?? jsonCodec<E>()
  if (typeof path !== 'string' || path === '') throw new TypeError('options.path must be a non-empty string')
  const existing = await readdir(path).catch((err: NodeJS.ErrnoException) => (err.code === 'ENOENT' ? [] : Promise.reject(err)))
  if (existing.length > 0) throw new RangeError(`options.path ${path} must not exist or be empty: a point-in-time restore never writes over a store`)

  const target = await resolveTarget(options, codec)
  const tail = await log.tail()
  if (target >= tail) {
    throw new TidemarkError('TIDEMARK_POINT_NOT_REACHABLE', `offset ${target} of ${topic}/${partition} is at or after the log's tail ${tail}`, { details: { topic, partition, offset: target, tail } })
  }

  const skipped: { id: string; reason: string }[] = []
  let snapshot: string | undefined
  if (snapshotStore !== undefined) {
    const layout = new SnapshotLayout(job, partition)
    for (const ref of await listManifests(snapshotStore, layout)) {
      let offset: bigint | undefined
      try {
        const manifest = await readManifest(snapshotStore, layout, ref)
        offset = manifest.positions.find((p) => p.topic === topic && p.partition === partition)?.offset
      } catch (err) {
        if (!isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT')) throw err
        skipped.push({ id: ref.id, reason: (err as Error).message })
        continue
      }
      if (offset === undefined || offset > target) continue
      try {
        await restoreSnapshot({ snapshotStore, job, partition, target: path, snapshot: ref.id, useLocal: false })
        snapshot = ref.id
        break
      } catch (err) {
        if (!isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT') && !isTidemarkError(err, 'TIDEMARK_SNAPSHOT_NOT_FOUND')) throw err
        skipped.push({ id: ref.id, reason: (err as Error).message })
      }
    }
  }

  const store = await PartitionStore.open({ path, states })
  try {
    const sync = new PartitionSynchronizer({ store, log, topic, partition, handler, codec, batchSize: options.batchSize ?? 1000 })
    const from = sync.getRevision() + 1n
    const oldest = await log.oldest()
    if (from < oldest) {
      throw new TidemarkError('TIDEMARK_POINT_NOT_REACHABLE', `no usable snapshot at or before offset ${target} of ${topic}/${partition}, and the log starts at ${oldest}`, { details: { topic, partition, offset: target, oldest, skipped } })
    }
    const meter = new ProgressMeter('replay', (p) => options.onProgress?.(p))
    const total = Number(target + 1n - from)
    let done = 0
    const replayed = await sync.fetchUpdates({
      end: target + 1n,
      onBatch: ({ events }) => meter.update((done += events), total),
    })
    meter.finish()
    return { path, offset: store.position(topic, partition), ...(snapshot === undefined ? {} : { snapshot }), skipped, replayed }
  } finally {
    await store.close()
  }
}

/** The offset of the last event at or before the target. */
async function resolveTarget<E>(options: PointInTimeOptions<E>, codec: Codec<E>): Promise<bigint> {
  const { target, log, topic, partition } = options
  if ('offset' in target) {
    if (typeof target.offset !== 'bigint' || target.offset < 0n) throw new TypeError(`target.offset must be a non-negative bigint, got ${String(target.offset)}`)
    return target.offset
  }
  if (typeof target.timestamp !== 'number' || !Number.isFinite(target.timestamp)) throw new TypeError(`target.timestamp must be a number of milliseconds, got ${String(target.timestamp)}`)
  if (typeof target.timestampOf !== 'function') throw new TypeError('target.timestampOf must be a function (event) => milliseconds')
  // Event times are only known by reading the events: scan from the oldest
  // entry for the first one after the target time.
  let last: bigint | undefined
  for await (const entry of log.read(await log.oldest())) {
    const event = decodeWith(codec, entry.data, () => `event ${topic}/${partition}@${entry.revision}`)
    if (target.timestampOf(event) > target.timestamp) break
    last = entry.revision
  }
  if (last === undefined) {
    throw new TidemarkError('TIDEMARK_POINT_NOT_REACHABLE', `no event of ${topic}/${partition} is at or before ${new Date(target.timestamp).toISOString()}`, { details: { topic, partition, timestamp: target.timestamp } })
  }
  return last
}
