import { rename, rm } from 'node:fs/promises'
import { isTidemarkError, TidemarkError } from '../errors.js'
import { formatRecordId } from '../outputs/id.js'
import { PartitionSynchronizer } from '../runtime/partition-synchronizer.js'
import { ProgressMeter } from '../runtime/progress.js'
import { listManifests, readManifest, readValidManifests } from '../snapshot/catalog.js'
import { SnapshotLayout } from '../snapshot/layout.js'
import type { SnapshotManifest } from '../snapshot/manifest.js'
import { restoreSnapshot } from '../snapshot/restore/index.js'
import { jsonCodec } from '../store/codec.js'
import { PartitionStore } from '../store/partition-store.js'
import { inspectStoreDir } from '../store/store-dir.js'
import { clearOutbox, outputStates } from './outbox.js'
import type { ReplayContext, ResolvedReplay } from './options.js'
import { REPLAY_END_METADATA, REPLAY_METADATA, REPLAY_START_METADATA, type ReplayRecord } from './record.js'

/** Where a replay's state came from; kept in its store's metadata (REPLAY_START_METADATA), so a resume reports it too. */
export interface Seed {
  /** The range's first offset (one past the start's position), as a decimal string. */
  from: string
  /** The start snapshot restored, if any. */
  snapshot: { job: string; id: string } | null
  /** Events applied before the range (an offset start), their outputs discarded. */
  warmedUp: number
}

/**
 * Builds the replay's starting store beside `path` and moves it into place
 * in one rename, with the replay's record in its metadata: a store at
 * `path` is therefore always a whole seed of this replay (or its progress),
 * never half of one, and a kill during the seed leaves only the staging
 * directory, which the next call removes and builds again.
 */
export async function seedStore<E>(r: ResolvedReplay<E>, record: ReplayRecord, oldest: bigint): Promise<Seed> {
  const staging = seedStaging(r.path)
  await removeStaging(staging)
  const { topic, partition } = r.source
  const start = r.start
  const report = (message: string): void => r.onProgress?.({ phase: 'prepare', message })

  // The state to start from, and the position it is at.
  let position: bigint | undefined
  let manifest: SnapshotManifest | undefined
  if (start.kind === 'snapshot') {
    const layout = new SnapshotLayout(start.job, partition)
    const ref = (await listManifests(start.store, layout)).find((m) => m.id === start.snapshot)
    if (ref === undefined) {
      throw new TidemarkError('TIDEMARK_SNAPSHOT_NOT_FOUND', `snapshot ${start.snapshot} of ${layout.prefix} does not exist in ${start.store.url}`, { details: { job: start.job, partition, snapshot: start.snapshot, skipped: [] } })
    }
    manifest = await readManifest(start.store, layout, ref)
    position = positionOf(manifest, topic, partition)
    if (position === undefined) {
      throw rangeInvalid('start-mismatch', `snapshot ${start.snapshot} of job ${start.job} holds no position of ${topic}/${partition}: it is not a snapshot of this source`, r)
    }
  } else if (start.kind === 'offset' && start.job !== undefined) {
    const layout = new SnapshotLayout(start.job, partition)
    const { valid } = await readValidManifests(start.store, layout, await listManifests(start.store, layout))
    // Newest first: the first at or before the offset is the one to start from.
    for (const v of valid) {
      const at = positionOf(v.manifest, topic, partition)
      if (at !== undefined && at <= start.offset) {
        manifest = v.manifest
        position = at
        break
      }
    }
  }
  const from = start.kind === 'empty' ? (r.source.from ?? 0n) : (start.kind === 'offset' ? start.offset + 1n : position! + 1n)
  if (r.source.from !== undefined && r.source.from !== from) {
    throw rangeInvalid('start-mismatch', `the start ends at offset ${from - 1n}, so the range starts at ${from}, not at options.source.from (${r.source.from})`, r)
  }
  if (from > r.source.to) throw rangeInvalid('start-mismatch', `the start is at offset ${from - 1n}, at or after options.source.to (${r.source.to}): nothing is left to replay`, r)
  // The first offset read: the range's, or the warm-up's before it.
  const firstRead = position === undefined ? (start.kind === 'empty' ? from : 0n) : position + 1n
  if (firstRead < oldest) {
    throw rangeInvalid('truncated', `the replay must read ${topic}/${partition} from offset ${firstRead}, but the log's oldest entry is ${oldest}`, r)
  }

  if (manifest !== undefined) {
    const source = start as { job: string; store: typeof r.snapshots }
    report(`restoring snapshot ${manifest.id} of job ${source.job}`)
    const meter = new ProgressMeter('restore', (progress) => r.onProgress?.({ phase: 'restore', progress }))
    await restoreSnapshot({
      snapshotStore: source.store, job: source.job, partition, target: staging, snapshot: manifest.id, useLocal: false,
      onProgress: (p) => meter.update(p.bytesDownloaded, p.bytesTotal),
    })
    meter.finish()
  }
  const seed: Seed = { from: from.toString(), snapshot: manifest === undefined ? null : { job: (start as { job: string }).job, id: manifest.id }, warmedUp: 0 }

  const store = await PartitionStore.open({ path: staging, states: [...r.states, ...outputStates()] })
  try {
    // Outputs the start snapshot's job had not delivered are that job's,
    // under its ids: the replay delivers only its own.
    await clearOutbox(store)
    // So is the end a replay's final snapshot holds: it would pass a
    // progress snapshot of this replay off as its final one (finalSnapshot).
    await store.setMetadata(REPLAY_END_METADATA, null)
    if (start.kind === 'offset' && start.offset > (position ?? -1n)) {
      seed.warmedUp = await warmUp(r, store, start.offset)
    }
    // The position the range starts after, also where no event lies at it
    // (an empty start at from > 0, a Kafka offset whose record did not take
    // effect): the replay reads from `from`, never before.
    const at = store.position(topic, partition)
    if (from > 0n && (at === undefined || at < from - 1n)) {
      const tx = store.transaction()
      await tx.commit({ topic, partition, offset: from - 1n })
    }
    await store.setMetadata(REPLAY_START_METADATA, seed)
    await store.setMetadata(REPLAY_METADATA, record)
  } finally {
    await store.close()
  }
  await rename(staging, r.path)
  return seed
}

/** Where the seed of the replay whose store is at `path` is built. */
export function seedStaging(path: string): string {
  return `${path}.replay-seed`
}

/** Applies the events after the start snapshot up to `offset`: state only, outputs discarded. */
async function warmUp<E>(r: ResolvedReplay<E>, store: PartitionStore, offset: bigint): Promise<number> {
  const { topic, partition } = r.source
  const job = r.job
  // emit() hands back the id the record would have had, so a handler that
  // keeps ids in its state builds the same state as in the range.
  const handler = (tx: Parameters<typeof r.handler>[0], event: E, ctx: { topic: string; partition: number; offset: bigint }): void | Promise<void> => {
    let index = 0
    const context: ReplayContext = {
      topic: ctx.topic, partition: ctx.partition, offset: ctx.offset,
      emit: () => formatRecordId({ job, topic: ctx.topic, partition: ctx.partition, offset: ctx.offset, index: index++ }),
    }
    return r.handler(tx, event, context)
  }
  const sync = new PartitionSynchronizer<E>({ store, log: r.source.log, topic, partition, handler, codec: r.source.codec ?? jsonCodec<E>(), batchSize: r.batchSize })
  const meter = new ProgressMeter('replay', (progress) => r.onProgress?.({ phase: 'warm-up', progress }))
  const first = sync.getRevision() + 1n
  const total = Number(offset + 1n - first)
  let done = 0
  const applied = await sync.fetchUpdates({
    end: offset + 1n,
    ...(r.signal === undefined ? {} : { signal: r.signal }),
    onBatch: ({ events }) => meter.update((done += events), total),
  })
  meter.finish()
  r.signal?.throwIfAborted()
  return applied
}

function positionOf(manifest: SnapshotManifest, topic: string, partition: number): bigint | undefined {
  return manifest.positions.find((p) => p.topic === topic && p.partition === partition)?.offset
}

export function rangeInvalid<E>(reason: 'beyond-tail' | 'truncated' | 'start-mismatch', message: string, r: ResolvedReplay<E>): TidemarkError {
  return new TidemarkError('TIDEMARK_REPLAY_RANGE_INVALID', message, {
    details: { reason, topic: r.source.topic, partition: r.source.partition, from: r.source.from, to: r.source.to },
  })
}

/** Removes a staging directory a killed seed left; only one Tidemark made (or an empty one). */
export async function removeStaging(staging: string): Promise<void> {
  const dir = await inspectStoreDir(staging)
  if (dir.kind === 'absent') return
  if (dir.kind === 'foreign') {
    throw new TidemarkError('TIDEMARK_STORE_NOT_A_STORE', `${staging}, where a replay builds its starting store, holds something else (${dir.reason}); it was left as it is`, { details: { path: staging } })
  }
  await rm(staging, { recursive: true, force: true }).catch((err: unknown) => {
    if (!isTidemarkError(err)) throw err
  })
}
