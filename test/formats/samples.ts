// The golden format samples of test/fixtures/formats/v1/: what they hold, and
// how today's code reads each into plain JSON. scripts/formats/make-golden.ts
// writes the samples and records these readings next to them; golden.test.ts
// reads the committed samples again and compares. See docs/formats.md.
import { createHash } from 'node:crypto'
import { cp, readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { ClassicLevel } from 'classic-level'
import tar from 'tar-stream'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { openFileLog } from '../../src/log/file-log/index.js'
import { readClaim } from '../../src/ownership/claim.js'
import { parseClaim } from '../../src/ownership/record.js'
import { parseRecordId } from '../../src/outputs/id.js'
import { readDedupeWatermarks, readOutbox } from '../../src/outputs/partition-outputs.js'
import { outboxRecordCodec } from '../../src/outputs/record.js'
import { DEDUPE_STATE, OUTBOX_STATE } from '../../src/outputs/states.js'
import type { OutboxRecord } from '../../src/outputs/types.js'
import { readRecord, recordKey, REPLAY_CLAIM_METADATA, REPLAY_METADATA, REPLAY_START_METADATA } from '../../src/replay/record.js'
import { listManifests, readManifest } from '../../src/snapshot/catalog.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { restoreSnapshot } from '../../src/snapshot/restore/index.js'
import { stateDigest } from '../../src/store/digest.js'
import { PartitionStore } from '../../src/store/partition-store.js'
import { mapState, valueState, type StateDefinition } from '../../src/store/state.js'
import { rawCodec } from '../../src/store/codec.js'
import { inspectStoreDir, readMarker } from '../../src/store/store-dir.js'
import { decodeEntry, type SyncEntry } from '../../src/synchronizer/entry.js'
import { decodeCompactPoint, listCompactPoints, readBody } from '../../src/synchronizer/compact-point.js'
import { createStateSynchronizer } from '../../src/synchronizer/state-synchronizer.js'

/** The version of the samples: a later format gets a folder of its own beside this one, and this one stays. */
export const GOLDEN_DIR = join(import.meta.dirname, '..', 'fixtures', 'formats', 'v1')

/** The one instant every sample's clock says. */
export const CLOCK_MS = Date.parse('2026-01-01T00:00:00.000Z')

export const JOB = 'orders'
export const SOURCE_TOPIC = 'orders'
/** Where the state synchronizer sample keeps its compact points, in the snapshot store sample. */
export const COMPACT_PREFIX = 'sync/counter/'
/** The job whose namespace holds the replay record sample. */
export const REPLAY_JOB = 'replay-orders'

export const COUNTS = valueState<number>('counts')
export const CARTS = mapState<number>('carts')
export const BLOBS = valueState<Uint8Array, 'bytes'>('blobs', { codec: rawCodec(), keyType: 'bytes' })
/** The map state's keys the samples write (a map view lists sub-keys of one key only). */
export const CART_KEYS = ['alice', 'bob', 'carol']
export const BLOB_KEYS = [Buffer.of(0x00, 0xff), Buffer.of(0x01), Buffer.from('text key', 'utf8')]

/** States of the snapshot sample's store. */
export const SNAPSHOT_STATES: StateDefinition[] = [COUNTS, CARTS]
/** User states of the partition store sample, which also holds the outbox and dedupe states. */
export const STORE_STATES: StateDefinition[] = [COUNTS, CARTS, BLOBS]
export const METADATA_NAMES = [REPLAY_METADATA, REPLAY_START_METADATA, REPLAY_CLAIM_METADATA, 'golden.note']

/** The state and updates of the synchronizer sample. */
export interface Tally { total: number; names: string[] }
export interface TallyUpdate { add: number; name: string }
export const applyTally = (s: Tally, u: TallyUpdate): Tally => ({ total: s.total + u.add, names: [...s.names, u.name] })

type Plain = null | boolean | number | string | Plain[] | { [k: string]: Plain }

/** JSON-safe: a bigint becomes "<digits>n", bytes become "bytes:<hex>", a Map an object, undefined is dropped. */
export function plain(value: unknown): Plain {
  if (typeof value === 'bigint') return `${value}n`
  if (value instanceof Uint8Array) return `bytes:${Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex')}`
  if (value instanceof Map) return plain(Object.fromEntries(value))
  if (Array.isArray(value)) return value.map(plain)
  if (value !== null && typeof value === 'object') {
    const out: Record<string, Plain> = {}
    for (const [k, v] of Object.entries(value)) if (v !== undefined) out[k] = plain(v)
    return out
  }
  return value as Plain
}

export function expectedPath(sample: string, dir = GOLDEN_DIR): string {
  return join(dir, `${sample}.expected.json`)
}

/** The samples, each read from a copy under `work` (LevelDB and the file log write when they open). */
export const SAMPLES = {
  'snapshot-store': readSnapshotStore,
  'partition-store': readPartitionStore,
  'sync-log': readSyncLog,
  'output-log': readOutputLog,
  'claim-held': (golden: string) => readHeldClaim(golden),
  'claim-process': (golden: string) => readHeldClaim(golden, 'claim-process.json'),
} as const satisfies Record<string, (golden: string, work: string) => Promise<Plain>>

export type SampleName = keyof typeof SAMPLES

async function copy(golden: string, name: string, work: string): Promise<string> {
  const to = join(work, name)
  await cp(join(golden, name), to, { recursive: true })
  return to
}

async function valueEntries(store: PartitionStore, def: StateDefinition): Promise<Array<[unknown, unknown]>> {
  const out: Array<[unknown, unknown]> = []
  if (def.kind === 'value') {
    for await (const entry of store.transaction().value(def).entries()) out.push(entry)
  } else {
    const view = store.transaction().map(def)
    for (const key of CART_KEYS) {
      for await (const [sub, value] of view.entries(key)) out.push([[key, sub], value])
    }
  }
  return out
}

/** Each state's entries, the positions and the user states' digest of an open store. */
async function storeContents(store: PartitionStore, states: readonly StateDefinition[]): Promise<Record<string, Plain>> {
  const contents: Record<string, Plain> = {}
  for (const def of states) contents[def.name] = plain(await valueEntries(store, def))
  return {
    positions: plain(store.positions()),
    states: contents,
    digest: await stateDigest(store, states),
  }
}

/**
 * The snapshot store sample: its manifests, the entries of each tar data
 * object as a tar reader sees them, each snapshot restored and opened, the
 * partition's released claim and the replay record of another job.
 */
async function readSnapshotStore(golden: string, work: string): Promise<Plain> {
  const root = await copy(golden, 'snapshot-store', work)
  const store = new FsSnapshotStore({ root })
  const layout = new SnapshotLayout(JOB, 0)
  const manifests: Plain[] = []
  const restores: Record<string, Plain> = {}
  for (const ref of (await listManifests(store, layout)).reverse()) {
    const manifest = await readManifest(store, layout, ref)
    manifests.push({ key: ref.key, manifest: plain(manifest) })
    const target = join(work, `restored-${manifest.id}`)
    const result = await restoreSnapshot({ snapshotStore: store, job: JOB, partition: 0, target, snapshot: manifest.id, fsync: false })
    const opened = await PartitionStore.open({ path: target, states: SNAPSHOT_STATES, create: false })
    try {
      restores[manifest.id] = { source: result.source, files: result.files, positions: plain(result.positions), store: await storeContents(opened, SNAPSHOT_STATES) }
    } finally {
      await opened.close()
    }
  }
  const archives: Record<string, Plain> = {}
  for await (const info of store.list(layout.dataPrefix)) archives[info.key] = await tarEntries(await readFile(join(root, info.key)))
  const claim = await readClaim(store, JOB, 0)
  const replayKey = recordKey(new SnapshotLayout(REPLAY_JOB, 0))
  return {
    manifests,
    archives,
    restores,
    claim: plain(claim === undefined ? null : claim.record ?? { problem: claim.problem }),
    replay: { key: replayKey, record: plain(await readRecord(store, replayKey)) },
  }
}

/** Every entry of a tar archive as any tar reader sees it: header fields and the SHA-256 of the data. */
async function tarEntries(bytes: Buffer): Promise<Plain> {
  const extract = tar.extract()
  const out: Plain[] = []
  Readable.from([bytes]).pipe(extract as unknown as NodeJS.WritableStream)
  for await (const entry of extract) {
    const h = entry.header
    const hash = createHash('sha256')
    for await (const chunk of entry as AsyncIterable<Buffer>) hash.update(chunk)
    out.push({ name: h.name, type: h.type ?? null, size: h.size ?? null, mode: h.mode ?? null, mtime: h.mtime?.toISOString() ?? null, sha256: hash.digest('hex') })
  }
  return { bytes: bytes.length, entries: out }
}

/**
 * The partition store sample: user states, positions, outbox, dedupe
 * watermarks and metadata through PartitionStore, the marker, and every
 * LevelDB key and value as bytes (the key layout itself).
 */
async function readPartitionStore(golden: string, work: string): Promise<Plain> {
  const path = await copy(golden, 'partition-store', work)
  const kind = (await inspectStoreDir(path)).kind
  const marker = await readMarker(path)
  const store = await PartitionStore.open({ path, states: [...STORE_STATES, OUTBOX_STATE, DEDUPE_STATE], create: false })
  let read: Record<string, Plain>
  try {
    const outbox = await readOutbox(store)
    const metadata: Record<string, Plain> = {}
    for (const name of METADATA_NAMES) metadata[name] = plain(await store.getMetadata(name)) ?? null
    read = {
      ...(await storeContents(store, STORE_STATES)),
      outbox: outbox.map((r) => ({ ...outboxRecord(r), parsedId: plain(parseRecordId(r.id)) })),
      watermarks: plain(await readDedupeWatermarks(store)),
      metadata,
    }
  } finally {
    await store.close()
  }
  const raw = await rawEntries(path)
  return { dir: kind, marker: plain(marker) ?? null, ...read, raw }
}

/** Every LevelDB entry of a closed store as [key hex, value]: the value as hex, or as `value` says; `keep` picks entries by key. */
export async function rawEntries(path: string, keep: (key: Buffer) => boolean = () => true, value: (bytes: Buffer) => string = (b) => b.toString('hex')): Promise<Plain[]> {
  const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer' })
  const raw: Plain[] = []
  try {
    await db.open({ createIfMissing: false })
    for await (const [k, v] of db.iterator()) if (keep(k)) raw.push([k.toString('hex'), value(v)])
  } finally {
    await db.close()
  }
  return raw
}

function outboxRecord(r: OutboxRecord): Record<string, Plain> {
  return plain({ id: r.id, topic: r.topic, partition: r.partition, key: r.key, value: r.value, headers: r.headers }) as Record<string, Plain>
}

async function segmentNames(dir: string): Promise<string[]> {
  return (await readdir(dir)).sort()
}

/**
 * The state synchronizer sample: a file log of synchronizer entries, its
 * oldest segments dropped by compaction, and the compact points in the
 * snapshot store sample; read raw, then by a new synchronizer client.
 */
async function readSyncLog(golden: string, work: string): Promise<Plain> {
  const dir = await copy(golden, 'sync-log', work)
  const root = await copy(golden, 'snapshot-store', work)
  const store = new FsSnapshotStore({ root })
  const files = await segmentNames(dir)
  const log = await openFileLog(dir)
  try {
    const entries: Plain[] = []
    for await (const { revision, data } of log.read(await log.oldest())) entries.push({ revision: plain(revision), bytes: data.byteLength, sha256: sha256(data), entry: syncEntry(decodeEntry(data, revision, dir)) })
    const points: Plain[] = []
    for (const ref of await listCompactPoints(store, COMPACT_PREFIX)) {
      const decoded = decodeCompactPoint(await readBody(store, ref.key), ref.revision)
      points.push({ key: ref.key, revision: plain(ref.revision), ...('state' in decoded ? { state: plain(json(decoded.state)) } : { problem: decoded.problem }) })
    }
    const sync = createStateSynchronizer<Tally, TallyUpdate>({ log, apply: applyTally, compactPoints: { store, prefix: COMPACT_PREFIX } })
    await sync.fetchUpdates()
    const synchronized = { state: plain(sync.getState()), revision: plain(sync.getRevision()) }
    await sync.close()
    return { files, oldest: plain(await log.oldest()), tail: plain(await log.tail()), entries, compactPoints: points, synchronized }
  } finally {
    await log.close()
  }
}

function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex')
}

const json = (bytes: Uint8Array): unknown => JSON.parse(Buffer.from(bytes).toString('utf8'))

/** A synchronizer entry with its JSON state or updates decoded; an update's padding is shown by its length (the entry's SHA-256 keeps its bytes). */
function syncEntry(entry: SyncEntry): Plain {
  if (entry.kind === 'init') return { kind: 'init', state: plain(json(entry.state)) }
  return {
    kind: 'updates',
    updates: entry.updates.map((u) => {
      const update = json(u) as Record<string, unknown>
      return plain(typeof update.pad === 'string' ? { ...update, pad: `${update.pad.length} characters` } : update)
    }),
  }
}

/** The output log sample: a file log written by fileLogSink, each entry an output record in its binary form. */
async function readOutputLog(golden: string, work: string): Promise<Plain> {
  const dir = await copy(golden, 'output-log', work)
  const files = await segmentNames(dir)
  const codec = outboxRecordCodec()
  const log = await openFileLog(dir)
  try {
    const entries: Plain[] = []
    for await (const { revision, data } of log.read(0n)) entries.push({ revision: plain(revision), bytes: data.byteLength, record: outboxRecord(codec.decode(data)) })
    return { files, oldest: plain(await log.oldest()), tail: plain(await log.tail()), entries }
  } finally {
    await log.close()
  }
}

/** A claim with a lease, renewed, of a consumer group's generation (partition 1: the snapshot store sample holds partition 0's released one). */
async function readHeldClaim(golden: string, file = 'claim-held.json'): Promise<Plain> {
  const parsed = parseClaim(await readFile(join(golden, file)), JOB, '1')
  return plain('record' in parsed ? parsed.record : parsed)
}
