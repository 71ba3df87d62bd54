import { rename } from 'node:fs/promises'
import { isTidemarkError, TidemarkError } from '../errors.js'
import { readClaim, type StoredClaim } from '../ownership/claim.js'
import { PartitionProcessor, type StartResult } from '../runtime/partition-processor.js'
import { listManifests, readValidManifests } from '../snapshot/catalog.js'
import { stateDigest } from '../store/digest.js'
import { PartitionStore } from '../store/partition-store.js'
import { inspectStoreDir } from '../store/store-dir.js'
import { resolveReplayOptions, type ReplayJobOptions, type ResolvedReplay } from './options.js'
import { ProgressSnapshots } from './progress-snapshots.js'
import {
  checkSame, claimNamespace, differences, readRecord, recordKey, REPLAY_CLAIM_METADATA, REPLAY_END_METADATA, REPLAY_FORMAT, REPLAY_METADATA, REPLAY_START_METADATA,
  replaceRecord, replayRecord, type ReplayClaimMark, type ReplayEnd, type ReplayRecord,
} from './record.js'
import { rangeInvalid, removeStaging, seedStaging, seedStore, type Seed } from './seed.js'

export interface ReplayResult {
  job: string
  topic: string
  partition: number
  /** The range: the first offset replayed (after the start) and the last. */
  from: bigint
  to: bigint
  /** The store's position at the end: the last event of the range that the log holds. */
  offset: bigint | undefined
  /** Where this call found the replay: new (seeded from its start), or resumed from its own store or snapshot. */
  source: 'new' | 'local' | 'snapshot'
  /** The start snapshot (another job's), for a new replay that restored one. */
  startSnapshot?: { job: string; id: string }
  /** Events applied by this call (a resume applies only what is left). */
  events: number
  /** Events applied before the range to reach an offset start (their outputs were discarded). */
  warmedUp: number
  /** The snapshot of the result at `to`, in the replay's own namespace. */
  snapshot: { id: string; key: string }
  /** sha256 (hex) of the final state: every state's keys and values in order (stateDigest). */
  digest: string
}

/**
 * Runs a handler deterministically over a fixed offset range of one source
 * partition, from a snapshot (another job's), an offset or empty state, into
 * a new job with its own snapshots and outputs: a backfill, or a what-if.
 *
 * Killed at any point, a second call with the same options continues from
 * what was committed: from the local store at `path`, or from the replay's
 * own newest snapshot when that store is gone. No event is applied twice or
 * skipped, and emitted records keep their ids (job, source topic, partition,
 * offset, index), so a replay killed and resumed delivers the same records,
 * byte for byte, as one that was not (records of the last unconfirmed send
 * may be delivered twice, with the same ids). It ends with every output
 * delivered and its final snapshot (at `to`, with an empty outbox), and
 * resolves with the state's digest. A call after the end delivers nothing
 * and resolves with the same result: the same final snapshot.
 * A call with other parameters is refused (TIDEMARK_REPLAY_JOB_EXISTS)
 * unless nothing of the range was committed yet: then it starts again.
 */
export async function replayJob<E>(options: ReplayJobOptions<E>): Promise<ReplayResult> {
  const r = resolveReplayOptions(options)
  // An already aborted signal stops the call before anything is written.
  r.signal?.throwIfAborted()
  const record = replayRecord(r)
  const { topic, partition, to, log } = r.source
  const report = (message: string): void => r.onProgress?.({ phase: 'prepare', message })

  const start = r.start
  if (start.kind !== 'empty' && start.job === r.job && start.store.url === r.snapshots.url) {
    throw new TidemarkError(
      'TIDEMARK_REPLAY_SOURCE_JOB',
      `the replay's job ${r.job} is the job it starts from, in the same snapshot store ${r.snapshots.url}: a replay writes only into a new job's namespace, never into its source's; pick a new job name`,
      { details: { job: r.job, store: r.snapshots.url } },
    )
  }
  const tail = await log.tail()
  if (to >= tail) throw rangeInvalid('beyond-tail', `options.source.to (${to}) is at or after the tail of ${topic}/${partition} (${tail}): a replay runs over events the log already holds`, r)

  // Both checks before anything is written: the local store must be this
  // replay's (or absent), and so must the namespace in the snapshot store.
  let local = await readLocalRecord(r.path)
  const ownSnapshots = await listManifests(r.snapshots, r.layout)
  // Read once: the restart's check and the claim of the namespace both need it.
  const inNamespace = await readRecord(r.snapshots, recordKey(r.layout))
  const restart = await restartable(r, record, local, inNamespace, ownSnapshots.length)
  // The claim the last call on this store took: a restarted store's too, whose
  // claims the new store continues (restartable checked they were all its).
  const previousMark = local.kind === 'store' ? local.claim : undefined
  if (restart !== undefined) {
    report(`starting replay job ${r.job} again with other parameters (${restart.join('; ')}): its earlier call committed nothing of its range`)
    // The new record first: a kill before the store is gone leaves a store
    // that is still unstarted, which the next call discards the same way.
    // The store goes in one rename, to where the seed is built (seedStore
    // removes what it finds there first): never half a store at `path`.
    await replaceRecord(r.snapshots, r.layout, record)
    await removeStaging(seedStaging(r.path))
    await rename(r.path, seedStaging(r.path))
    local = { kind: 'none' }
  } else if (local.kind === 'store') {
    checkSame(local.record, record, `the local store ${r.path}`, REPLAY_METADATA)
  }
  if (restart === undefined) await claimNamespace(r.snapshots, r.layout, record, inNamespace)

  let seed: Seed | undefined
  if (local.kind === 'none' && ownSnapshots.length === 0) {
    report(`starting replay job ${r.job} at ${describeStart(r)}`)
    seed = await seedStore(r, record, await log.oldest())
  } else {
    report(`resuming replay job ${r.job} from ${local.kind === 'store' ? `its store ${r.path}` : 'its newest snapshot'}`)
  }
  r.signal?.throwIfAborted()

  const snapshotErrors: unknown[] = []
  const processor = new PartitionProcessor<E>({
    job: r.job,
    log,
    topic,
    partition,
    path: r.path,
    states: r.states,
    handler: r.handler,
    ...(r.source.codec === undefined ? {} : { codec: r.source.codec }),
    batchSize: r.batchSize,
    replayBatchSize: r.batchSize,
    // The seed, or the replay's own progress, is always there: never an empty start.
    allowEmpty: false,
    // No schedule of its own: the replay starts its progress snapshots
    // (ProgressSnapshots), so that none runs into its final one.
    snapshots: { store: r.snapshots, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    // A replay is resumed right after its process was killed, while the
    // dead process's lease still runs; the newest call of a replay wins (an
    // older one still running stops with TIDEMARK_OWNERSHIP_LOST).
    ownership: { takeover: 'force' },
    ...(r.output === undefined ? {} : { outputs: { sink: r.output } }),
  })
  processor.on('progress', (progress) => {
    if (progress.phase !== 'process') r.onProgress?.({ phase: progress.phase === 'restore' ? 'restore' : 'replay', progress })
  })
  const progressSnapshots = new ProgressSnapshots({
    take: () => processor.snapshot(),
    onTaken: (s) => r.onProgress?.({ phase: 'snapshot', id: s.id, final: false }),
    intervalMs: r.checkpoints.intervalMs,
    everyEvents: r.checkpoints.everyEvents,
  })
  processor.on('commit', ({ offset, events }) => {
    progressSnapshots.noteCommit(events)
    r.onProgress?.({ phase: 'commit', offset, events })
  })
  processor.on('snapshot-failed', (error) => snapshotErrors.push(error))

  try {
    // The claim before this call takes it: was it this store's calls' all along?
    const before = await readClaim(r.snapshots, r.job, r.layout.partition)
    const started = await processor.start()
    const store = processor.store
    const mark: ReplayClaimMark = { epoch: started.epoch, exclusive: claimedHereOnly(before, previousMark, started.epoch) }
    await store.setMetadata(REPLAY_CLAIM_METADATA, mark)
    // A store restored from the replay's own snapshot carries its record too.
    checkSame(await store.getMetadata(REPLAY_METADATA), record, `the replay's store ${r.path}`, REPLAY_METADATA)
    const events = await processor.catchUp({ end: to + 1n, ...(r.signal === undefined ? {} : { signal: r.signal }) })
    r.signal?.throwIfAborted()
    // None may start (or still run) once delivery ends: see finalSnapshot.
    await progressSnapshots.stop()
    if (r.output !== undefined) {
      r.onProgress?.({ phase: 'deliver', records: 0 })
      await processor.flushOutputs()
    }
    const snapshot = await finalSnapshot(r, processor, started, snapshotErrors)
    r.onProgress?.({ phase: 'snapshot', id: snapshot.id, final: true })
    const digest = await stateDigest(store, r.states)
    const offset = store.position(topic, partition)
    const begun = await store.getMetadata<Seed>(REPLAY_START_METADATA)
    return {
      job: r.job,
      topic,
      partition,
      from: BigInt(begun?.from ?? '0'),
      to,
      offset,
      source: seed !== undefined ? 'new' : started.source === 'snapshot' ? 'snapshot' : 'local',
      ...(begun?.snapshot == null ? {} : { startSnapshot: begun.snapshot }),
      events,
      warmedUp: begun?.warmedUp ?? 0,
      snapshot,
      digest,
    }
  } finally {
    await processor.close()
  }
}

/**
 * The final snapshot: at `to`, taken after every emitted record was
 * delivered (its outbox is empty), and the one every later call returns.
 * A snapshot taken before, at `to` too, may hold records still to deliver:
 * restored by a later call, it would send them again. So the store says
 * which one it is (REPLAY_END_METADATA): a call on this store recorded it;
 * a store restored from it holds the mark written right before it. Else it
 * is taken now (no progress snapshot runs any more).
 */
async function finalSnapshot<E>(r: ResolvedReplay<E>, processor: PartitionProcessor<E>, started: StartResult, errors: unknown[]): Promise<{ id: string; key: string }> {
  const { topic, partition } = r.source
  const store = processor.store
  const position = store.position(topic, partition)
  const at = (positions: readonly { topic: string; partition: number; offset: bigint }[]): boolean =>
    positions.some((p) => p.topic === topic && p.partition === partition && p.offset === position)
  // null: the seed's, when it came from another replay's final snapshot.
  const end = (await store.getMetadata<ReplayEnd | null>(REPLAY_END_METADATA)) ?? undefined
  const recorded = end?.snapshot?.id ?? (end !== undefined && started.source === 'snapshot' ? started.snapshot : undefined)
  if (recorded !== undefined) {
    const refs = (await listManifests(r.snapshots, r.layout)).filter((ref) => ref.id === recorded)
    const { valid } = await readValidManifests(r.snapshots, r.layout, refs)
    const found = valid[0]
    if (found !== undefined && at(found.manifest.positions)) {
      const snapshot = { id: found.ref.id, key: found.ref.key }
      if (end?.snapshot === undefined) await store.setMetadata(REPLAY_END_METADATA, { to: String(r.source.to), snapshot } satisfies ReplayEnd)
      return snapshot
    }
  }
  await store.setMetadata(REPLAY_END_METADATA, { to: String(r.source.to) } satisfies ReplayEnd)
  const before = errors.length
  const taken = await processor.snapshot()
  if (taken === undefined || !at(taken.positions)) {
    const error = errors[before]
    if (isTidemarkError(error)) throw error
    throw new TidemarkError('TIDEMARK_SNAPSHOT_UPLOAD_FAILED', `the final snapshot of replay job ${r.job} at ${topic}/${partition}@${position} failed; call the replay again to take it`, { cause: error })
  }
  const snapshot = { id: taken.id, key: taken.key }
  await store.setMetadata(REPLAY_END_METADATA, { to: String(r.source.to), snapshot } satisfies ReplayEnd)
  return snapshot
}

/**
 * `unstarted`: the store holds a replay record and is at its seed's
 * position, in the source that record names: nothing of the range
 * committed. `claim`: the claim its last call took (undefined before any).
 */
type LocalRecord = { kind: 'none' } | { kind: 'store'; record: unknown; unstarted: boolean; claim: ReplayClaimMark | undefined }

/**
 * Whether every claim of the partition so far, `epoch` (just taken) too, was
 * taken by calls on the store this call runs on: the claim before this one
 * was the one its last call took (`previous`; for a store seeded by this
 * call, there was none), and nobody took one in between.
 */
function claimedHereOnly(before: StoredClaim | undefined, previous: ReplayClaimMark | undefined, epoch: number): boolean {
  const intact = previous === undefined ? before === undefined : previous.exclusive && before?.record?.epoch === previous.epoch
  return intact && epoch === (before?.record?.epoch ?? 0) + 1
}

/**
 * The parameters' differences when this call may start the replay again with
 * other parameters, else undefined (then the usual checks decide). That is
 * when its earlier call committed nothing of its range: its local store (of
 * this job and partition) is still at its seed's position and it has no
 * snapshot of its own. No event of the range was applied and no record
 * emitted, so nothing depends on the old parameters: a handler that failed
 * on its first batch can be fixed and the same job run again. Without the
 * local store nobody can tell what was committed (and delivered) before it
 * was lost, so other parameters are refused as always; so they are while
 * the partition's claim is held, and once a call that did not run on this
 * store took it (REPLAY_CLAIM_METADATA): that call, on another machine with
 * its own store, may have committed and delivered what this one does not show.
 */
async function restartable<E>(r: ResolvedReplay<E>, record: ReplayRecord, local: LocalRecord, inNamespace: unknown, ownSnapshots: number): Promise<string[] | undefined> {
  if (local.kind !== 'store' || !local.unstarted || ownSnapshots > 0) return undefined
  const stored = local.record as ReplayRecord
  if (stored.job !== record.job || stored.partition !== record.partition) return undefined
  // A namespace without the record is no replay's: claimNamespace decides.
  if (inNamespace === undefined) return undefined
  const diff = [...new Set([...differences(local.record, record), ...differences(inNamespace, record)])]
  if (diff.length === 0) return undefined
  // Another call of the replay, with its own store (another machine), may be
  // running it under the old parameters and have committed and delivered
  // what this store does not show: only a claim that was released, or whose
  // lease ran out, shows that no call runs it now.
  const claim = await readClaim(r.snapshots, r.job, r.layout.partition)
  if (claim === undefined) return local.claim === undefined ? diff : undefined
  const until = claim.record?.leaseUntil
  if (!(until === 0 || (typeof until === 'number' && until < Date.now()))) return undefined
  // And every claim so far was taken by calls on this store: a call on
  // another machine that ran (and delivered) before or after them took one.
  if (local.claim?.exclusive !== true || claim.record?.epoch !== local.claim.epoch) return undefined
  return diff
}

/**
 * The replay record of the store at `path`, and whether it is unstarted,
 * read without changing anything. A store without a record
 * is not this replay's (checkSame refuses it); a path that holds something
 * else fails on open (TIDEMARK_STORE_NOT_A_STORE).
 */
async function readLocalRecord(path: string): Promise<LocalRecord> {
  const dir = await inspectStoreDir(path)
  if (dir.kind === 'absent' || dir.kind === 'empty') return { kind: 'none' }
  let store: PartitionStore
  try {
    store = await PartitionStore.open({ path, create: false })
  } catch (err) {
    // A marked directory without a database: a restore that was cut short.
    if (isTidemarkError(err, 'TIDEMARK_STORE_NOT_FOUND')) return { kind: 'none' }
    throw err
  }
  try {
    const record = await store.getMetadata<ReplayRecord>(REPLAY_METADATA)
    const seed = await store.getMetadata<Seed>(REPLAY_START_METADATA)
    let unstarted = false
    if (record?.format === REPLAY_FORMAT && /^\d+$/.test(String(seed?.from)) && typeof record.source?.topic === 'string' && typeof record.source.partition === 'number') {
      // The record's source, not the asked one: a call that names another
      // topic must not find "no position" in a store that has one elsewhere.
      const position = store.position(record.source.topic, record.source.partition)
      unstarted = position === undefined ? seed!.from === '0' : position === BigInt(seed!.from) - 1n
    }
    return { kind: 'store', record, unstarted, claim: await store.getMetadata<ReplayClaimMark>(REPLAY_CLAIM_METADATA) }
  } finally {
    await store.close()
  }
}

function describeStart<E>(r: ResolvedReplay<E>): string {
  const s = r.start
  if (s.kind === 'empty') return `empty state, offsets ${r.source.from ?? 0n}..${r.source.to}`
  if (s.kind === 'snapshot') return `snapshot ${s.snapshot} of job ${s.job}, up to offset ${r.source.to}`
  return `the state as of offset ${s.offset}${s.job === undefined ? '' : ` (from job ${s.job}'s snapshots)`}, up to offset ${r.source.to}`
}
