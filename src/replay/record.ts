import { isTidemarkError, TidemarkError } from '../errors.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { readAll } from '../snapshot/catalog.js'
import type { SnapshotLayout } from '../snapshot/layout.js'
import type { ResolvedReplay } from './options.js'

export const REPLAY_FORMAT = 'tidemark-replay/1'
/** The name of the replay's record in its partition store's metadata. */
export const REPLAY_METADATA = 'tidemark.replay'
/** Where the replay's seed says where it started (seed.ts). */
export const REPLAY_START_METADATA = 'tidemark.replay.start'
/**
 * The claim the last call on this store took ({ epoch, exclusive }):
 * exclusive while every claim of the replay's partition so far was taken by
 * calls on this store, so that what it shows is all any call committed.
 */
export const REPLAY_CLAIM_METADATA = 'tidemark.replay.claim'

/**
 * The end of the replay (ReplayEnd), in its store. Written with `to` once
 * every emitted record was delivered, right before the final snapshot is
 * taken: a snapshot that holds it is a final one (empty outbox, at `to`).
 * Written again with that snapshot once it is committed, so that no
 * snapshot holds the id and a later call on this store returns it.
 */
export const REPLAY_END_METADATA = 'tidemark.replay.end'

export interface ReplayEnd {
  to: string
  snapshot?: { id: string; key: string }
}

export interface ReplayClaimMark {
  epoch: number
  exclusive: boolean
}
const MAX_RECORD_BYTES = 64 * 1024

/**
 * What makes two replay calls the same job: everything that decides its
 * state and its outputs. A second call with an equal record resumes; one
 * with another record is refused. JSON with offsets as strings, so it
 * compares and stores as text.
 */
export interface ReplayRecord {
  format: typeof REPLAY_FORMAT
  job: string
  partition: string
  source: { topic: string; partition: number; from: string | null; to: string }
  start: { kind: 'empty' } | { kind: 'snapshot'; job: string; store: string; snapshot: string } | { kind: 'offset'; job: string | null; store: string | null; offset: string }
  /** Names and kinds, sorted by name. */
  states: Array<{ name: string; kind: string }>
  fingerprint: string | null
  /** The output sink's name, or null without one. */
  output: string | null
}

export function replayRecord<E>(r: ResolvedReplay<E>): ReplayRecord {
  const s = r.start
  return {
    format: REPLAY_FORMAT,
    job: r.job,
    partition: r.layout.partition,
    source: { topic: r.source.topic, partition: r.source.partition, from: r.source.from?.toString() ?? null, to: r.source.to.toString() },
    start: s.kind === 'empty'
      ? { kind: 'empty' }
      : s.kind === 'snapshot'
        ? { kind: 'snapshot', job: s.job, store: s.store.url, snapshot: s.snapshot }
        : { kind: 'offset', job: s.job ?? null, store: s.job === undefined ? null : s.store.url, offset: s.offset.toString() },
    states: r.states.map((d) => ({ name: d.name, kind: d.kind })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
    fingerprint: r.fingerprint ?? null,
    output: r.output?.name ?? null,
  }
}

/** The fields in which two records differ, as `path: stored -> asked`. */
export function differences(stored: unknown, asked: ReplayRecord): string[] {
  const out: string[] = []
  const walk = (a: unknown, b: unknown, path: string): void => {
    if (a !== null && b !== null && typeof a === 'object' && typeof b === 'object' && Array.isArray(a) === Array.isArray(b)) {
      const keys = new Set([...Object.keys(a), ...Object.keys(b)])
      for (const k of keys) walk((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], path === '' ? k : `${path}.${k}`)
      return
    }
    if (JSON.stringify(a) !== JSON.stringify(b)) out.push(`${path}: ${JSON.stringify(a) ?? 'absent'} -> ${JSON.stringify(b) ?? 'absent'}`)
  }
  walk(stored, asked, '')
  return out
}

export function recordKey(layout: SnapshotLayout): string {
  return `${layout.prefix}replay.json`
}

/**
 * Makes the replay's namespace in the snapshot store its own: writes the
 * record create-only when the namespace is new, or checks that the record
 * there is this one. A namespace that holds snapshots or a claim but no
 * record belongs to a job that is no replay (a live job), and a record with
 * other parameters to another replay: both are refused with
 * TIDEMARK_REPLAY_JOB_EXISTS and nothing is written. `stored` is the record
 * there as the caller read it (readRecord; undefined: none). Returns whether the
 * record was there already (a resume).
 */
export async function claimNamespace(store: SnapshotStore, layout: SnapshotLayout, record: ReplayRecord, stored: unknown): Promise<boolean> {
  const key = recordKey(layout)
  if (stored !== undefined) {
    checkSame(stored, record, `the snapshot store ${store.url}`, key)
    return true
  }
  const foreign = []
  // Two are enough to know whether anything but the record is there.
  for await (const o of store.list(layout.prefix, { limit: 2 })) if (o.key !== key) foreign.push(o)
  if (foreign.length > 0) {
    throw new TidemarkError(
      'TIDEMARK_REPLAY_JOB_EXISTS',
      `job ${layout.job} partition ${layout.partition} already has objects in ${store.url} (${foreign[0]!.key}) and no replay record: it is no replay job, and a replay never writes into another job's snapshots; pick a new job name`,
      { details: { reason: 'not-a-replay', job: layout.job, partition: layout.partition, key: foreign[0]!.key } },
    )
  }
  try {
    await store.put(key, encodeRecord(record), { ifNoneMatch: true })
    return false
  } catch (err) {
    if (!isTidemarkError(err, 'TIDEMARK_DFS_OBJECT_EXISTS')) throw err
    // Another call of this replay got there first: the same parameters resume it.
    const raced = await readRecord(store, key)
    checkSame(raced, record, `the snapshot store ${store.url}`, key)
    return true
  }
}

/** Refuses a record that is not this replay's (undefined: none, in a store that must have one). */
export function checkSame(stored: unknown, record: ReplayRecord, where: string, key: string): void {
  if (stored === undefined) {
    throw new TidemarkError('TIDEMARK_REPLAY_JOB_EXISTS', `${where} holds no replay record at ${key}: it was not made by a replay; a replay never writes over it`, {
      details: { reason: 'not-a-replay', key },
    })
  }
  const diff = differences(stored, record)
  if (diff.length > 0) {
    throw new TidemarkError(
      'TIDEMARK_REPLAY_JOB_EXISTS',
      `replay job ${record.job} partition ${record.partition} already exists in ${where} with other parameters (${diff.join('; ')}); resume it with the same parameters, or pick a new job name`,
      { details: { reason: 'other-parameters', key, differences: diff } },
    )
  }
}

/**
 * Writes `record` over the namespace's record: only for a replay that
 * committed nothing of its range, started again with other parameters (see
 * replayJob), whose record is the only thing of it that other calls read.
 */
export async function replaceRecord(store: SnapshotStore, layout: SnapshotLayout, record: ReplayRecord): Promise<void> {
  await store.put(recordKey(layout), encodeRecord(record))
}

function encodeRecord(record: ReplayRecord): Buffer {
  return Buffer.from(`${JSON.stringify(record, null, 2)}\n`, 'utf8')
}

/** The record at `key`: undefined when there is none, `{ unreadable }` when it is not JSON (it then differs from every record). */
export async function readRecord(store: SnapshotStore, key: string): Promise<unknown> {
  let body: Buffer
  try {
    body = await readAll(await store.get(key, { metadata: true }), MAX_RECORD_BYTES)
  } catch (err) {
    if (isTidemarkError(err, 'TIDEMARK_DFS_NOT_FOUND')) return undefined
    if (err instanceof RangeError) return { unreadable: err.message }
    throw err
  }
  try {
    return JSON.parse(body.toString('utf8')) as unknown
  } catch (err) {
    // Compared as it is: an unreadable record differs from every record.
    return { unreadable: (err as Error).message }
  }
}
