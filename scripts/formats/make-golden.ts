/**
 * Writes the golden format samples with today's code, and next to each the
 * JSON that today's code reads from it (test/formats/samples.ts):
 *
 *   npx tsx scripts/formats/make-golden.ts [<folder>] [--replace]
 *
 * The folder defaults to test/fixtures/formats/v1. Committed samples are
 * never rewritten for a change of the code (that is what they guard), so an
 * existing folder is refused; --replace is for checking that a second run of
 * the code that made them gives the same bytes. A new format version writes
 * its samples into a new folder (v2) and the v1 samples stay.
 *
 * Deterministic: one fixed clock, fixed inputs, and the few values the code
 * draws at random (an owner's id, host and pid; a data object's token; a
 * compact point's writer id) and the creation times it takes from the wall
 * clock are replaced by fixed ones, written back through the same encoders.
 * A second run leaves `git status` clean.
 */
import { cp, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { openFileLog } from '../../src/log/file-log/index.js'
import { acquireClaim } from '../../src/ownership/claim.js'
import { parseClaim, serializeClaim, type ClaimOwner } from '../../src/ownership/record.js'
import { fileLogSink } from '../../src/outputs/file-log-sink.js'
import { resolveOutputs } from '../../src/outputs/options.js'
import { PartitionOutputs } from '../../src/outputs/partition-outputs.js'
import { decodeOutboxRecord, encodeOutboxRecord } from '../../src/outputs/record.js'
import type { OutboxRecord, OutputSink } from '../../src/outputs/types.js'
import { claimNamespace, REPLAY_CLAIM_METADATA, REPLAY_FORMAT, REPLAY_METADATA, REPLAY_START_METADATA, type ReplayRecord } from '../../src/replay/record.js'
import { listManifests } from '../../src/snapshot/catalog.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { encodeManifest, parseManifest } from '../../src/snapshot/manifest.js'
import { Snapshotter } from '../../src/snapshot/snapshotter.js'
import { PartitionStore } from '../../src/store/partition-store.js'
import { STORE_MARKER } from '../../src/store/store-dir.js'
import { compactPointKey, listCompactPoints } from '../../src/synchronizer/compact-point.js'
import { createStateSynchronizer } from '../../src/synchronizer/state-synchronizer.js'
import {
  applyTally, BLOB_KEYS, BLOBS, CARTS, CLOCK_MS, COMPACT_PREFIX, COUNTS, expectedPath, GOLDEN_DIR, JOB, REPLAY_JOB, SAMPLES,
  SNAPSHOT_STATES, SOURCE_TOPIC, STORE_STATES, type SampleName, type Tally, type TallyUpdate,
} from '../../test/formats/samples.js'

const OWNER: ClaimOwner = { id: '0123456789abcdef', name: 'golden', host: 'golden-host', pid: 4242 }
/** The owner with its process identity on a Linux host (the fields a holder proven dead is taken by). */
const OWNER_PROCESS: ClaimOwner = { ...OWNER, bootId: '6f1d1e43-7b8a-4c53-9b1e-2a4f4c0e9d17', pidNamespace: 'pid:[4026531836]', startTime: 1234567 }
const CREATED_AT = new Date(CLOCK_MS).toISOString()
const DATA_TOKEN = '00000000'
const WRITER_ID = '00000000c0de'

const at = (offset: bigint, partition = 0): { topic: string; partition: number; offset: bigint } => ({ topic: SOURCE_TOPIC, partition, offset })

async function main(): Promise<void> {
  const args = process.argv.slice(2)
  const replace = args.includes('--replace')
  const target = resolve(args.find((a) => !a.startsWith('--')) ?? GOLDEN_DIR)
  if (!replace && (await stat(target).catch(() => undefined)) !== undefined) {
    console.error(`${target} exists; committed samples are not rewritten (pass --replace only to check that a run gives the same bytes)`)
    process.exit(2)
  }
  const work = await mkdtemp(join(tmpdir(), 'tidemark-golden-'))
  const out = join(work, 'v1')
  try {
    await snapshotStoreSample(work, join(out, 'snapshot-store'))
    await syncLogSample(join(out, 'sync-log'), join(out, 'snapshot-store'))
    await outputLogSample(work, join(out, 'output-log'))
    await partitionStoreSample(join(out, 'partition-store'))
    await heldClaimSample(work, join(out, 'claim-held.json'))
    await heldClaimSample(work, join(out, 'claim-process.json'), OWNER_PROCESS)
    await replayRecordSample(join(out, 'snapshot-store'))

    // What today's code reads from each sample, recorded beside it.
    for (const name of Object.keys(SAMPLES) as SampleName[]) {
      const reading = join(work, `read-${name}`)
      const result = await SAMPLES[name](out, reading)
      await writeFile(expectedPath(name, out), `${JSON.stringify(result, null, 2)}\n`)
      await rm(reading, { recursive: true, force: true })
    }
    await rm(target, { recursive: true, force: true })
    await cp(out, target, { recursive: true })
    console.log(`wrote the samples of ${Object.keys(SAMPLES).join(', ')} into ${target}`)
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}

/** Two snapshots (a full one, then an incremental one) of a small store, taken under a claim that is then released. */
async function snapshotStoreSample(work: string, root: string): Promise<void> {
  const store = new FsSnapshotStore({ root })
  const layout = new SnapshotLayout(JOB, 0)
  const claim = await acquireClaim({ store, job: JOB, partition: 0, owner: OWNER.name, clock: () => CLOCK_MS })
  const ps = await PartitionStore.open({ path: join(work, 'snapshot-source'), states: SNAPSHOT_STATES })
  const snapshotter = new Snapshotter({
    snapshotStore: store, partitionStore: ps, job: JOB, partition: 0, epoch: claim.epoch,
    gcAfterSnapshot: false, checkpoint: 'close', maxAmplification: 100, beforeCommit: () => claim.check(),
  })
  const fruits = ['apple', 'pear', 'plum', 'fig', 'kiwi']
  for (let i = 0; i < fruits.length; i++) {
    const tx = ps.transaction()
    tx.value(COUNTS).put(fruits[i]!, i + 1)
    tx.map(CARTS).put(i % 2 === 0 ? 'alice' : 'bob', fruits[i]!, i + 10)
    await tx.commit(at(BigInt(i)))
  }
  await snapshotter.takeSnapshot()
  const tx = ps.transaction()
  tx.value(COUNTS).put('apple', 100)
  tx.value(COUNTS).delete('pear')
  tx.map(CARTS).put('carol', 'fig', 7)
  tx.map(CARTS).delete('bob', 'pear')
  await tx.commit(at(5n))
  const second = await snapshotter.takeSnapshot()
  await ps.close()
  await claim.release({ lastSnapshot: second.key })

  // Fixed data object tokens and creation times, through encodeManifest.
  for (const ref of await listManifests(store, layout)) {
    const manifest = parseManifest(await readFile(join(root, ref.key)), { job: JOB, partition: '0', epoch: ref.epoch, sequence: ref.sequence })
    const fixed = (key: string): string => key.replace(/^(data\/\d{10}-\d{12}-)[^-]+(-\d+\.tar)$/, `$1${DATA_TOKEN}$2`)
    for (const o of manifest.objects) {
      const from = join(root, layout.prefix, o.key)
      const to = join(root, layout.prefix, fixed(o.key))
      if (from !== to) await rename(from, to).catch((err: NodeJS.ErrnoException) => { if (err.code !== 'ENOENT') throw err })
    }
    const normal = {
      ...manifest,
      createdAt: CREATED_AT,
      objects: manifest.objects.map((o) => ({ ...o, key: fixed(o.key) })),
      files: manifest.files.map((f) => ({ ...f, object: fixed(f.object) })),
    }
    await writeFile(join(root, ref.key), encodeManifest(normal))
  }
  await fixClaim(join(root, layout.claimKey), JOB, '0')
}

/** The claim's owner as fixed values, written back with serializeClaim. */
async function fixClaim(path: string, job: string, partition: string, owner = OWNER): Promise<void> {
  const parsed = parseClaim(await readFile(path), job, partition)
  if (!('record' in parsed)) throw new Error(`${path}: ${parsed.problem}`)
  await writeFile(path, serializeClaim({ ...parsed.record, owner }))
}

/**
 * A synchronizer's log that rolled over several segments (4 KiB, the
 * smallest) and was truncated by its second compaction, and its two
 * compact points in the snapshot store sample.
 */
async function syncLogSample(dir: string, root: string): Promise<void> {
  const store = new FsSnapshotStore({ root })
  const log = await openFileLog(dir, { segmentBytes: 4096 })
  // The padding fills segments with few entries; apply() ignores it.
  const update = (add: number, name: string): TallyUpdate & { pad: string } => ({ add, name, pad: '.'.repeat(1200) })
  const sync = createStateSynchronizer<Tally, TallyUpdate>({ log, apply: applyTally, compactPoints: { store, prefix: COMPACT_PREFIX } })
  await sync.initialize({ total: 0, names: [] })
  await sync.updateStateUnconditionally(update(2, 'a'), update(3, 'b'))
  await sync.updateStateUnconditionally(update(5, 'c'))
  await sync.updateState((s, updates) => { updates.push(update(s.total, 'double')) })
  await sync.updateStateUnconditionally(update(1, 'd'))
  await sync.compact((s) => s)
  await sync.updateStateUnconditionally(update(1, 'e'))
  await sync.updateStateUnconditionally(update(1, 'f'))
  // Truncates the log before the first compact point: its first segment goes.
  await sync.compact((s) => s)
  await sync.updateStateUnconditionally(update(7, 'g'))
  await sync.close()
  await log.close()
  for (const ref of await listCompactPoints(store, COMPACT_PREFIX)) {
    await rename(join(root, ref.key), join(root, compactPointKey(COMPACT_PREFIX, ref.revision, WRITER_ID)))
  }
}

/** Output records as fileLogSink appends them: a file log whose entries are their binary form. */
async function outputLogSample(work: string, dir: string): Promise<void> {
  const sinkDir = join(work, 'sink')
  const sink = fileLogSink({ dir: sinkDir })
  const record = (id: string, key: string | Buffer | null, value: string | Buffer | null, partition: number, headers: Record<string, string | Buffer>): OutboxRecord => {
    const asBytes = (v: string | Buffer): Buffer => (typeof v === 'string' ? Buffer.from(v, 'utf8') : v)
    const all = { ...Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, asBytes(v)])), 'tidemark-id': Buffer.from(id, 'utf8') }
    return decodeOutboxRecord(encodeOutboxRecord({ id, topic: 'orders-out', partition, key: key === null ? null : asBytes(key), value: value === null ? null : asBytes(value), headers: all }))
  }
  await sink.send([
    record(`tm1:${JOB}:${SOURCE_TOPIC}:0:10:0`, 'apple', '{"n":3}', -1, { trace: 't-1' }),
    record(`tm1:${JOB}:${SOURCE_TOPIC}:0:10:1`, null, 'no key', 2, {}),
  ])
  await sink.send([
    record(`tm1:${JOB}:${SOURCE_TOPIC}:0:11:0`, Buffer.of(0, 1, 2, 255), null, -1, { bin: Buffer.of(0xca, 0xfe), 'ünïcode': 'välue' }),
  ])
  await sink.close()
  await cp(join(sinkDir, 'orders-out'), dir, { recursive: true })
}

/** A sink that is never called: the sample's outbox stays undelivered. */
const IDLE_SINK: OutputSink = {
  name: 'golden',
  send: () => Promise.reject(new Error('the golden sample delivers nothing')),
  close: () => Promise.resolve(),
}

const REPLAY_RECORD: ReplayRecord = {
  format: REPLAY_FORMAT,
  job: REPLAY_JOB,
  partition: '0',
  source: { topic: SOURCE_TOPIC, partition: 0, from: '3', to: '5' },
  start: { kind: 'snapshot', job: JOB, store: 'file:///var/lib/golden/snapshots', snapshot: '0000000001-000000000000' },
  states: [{ name: 'carts', kind: 'map' }, { name: 'counts', kind: 'value' }],
  fingerprint: 'v2-of-the-handler',
  output: 'file-log:/var/lib/golden/out',
}

/** A store with every kind of key: three user states, two source positions, an outbox, dedupe watermarks and metadata. */
async function partitionStoreSample(path: string): Promise<void> {
  const outputs = new PartitionOutputs({ job: JOB, topic: SOURCE_TOPIC, partition: 0, outputs: resolveOutputs({ sink: IDLE_SINK }), dedupe: 'tidemark-ids' })
  const store = await PartitionStore.open({ path, states: outputs.states(STORE_STATES) })
  let tx = store.transaction()
  tx.value(COUNTS).put('apple', 3)
  tx.value(COUNTS).put('ünïcode', -1.5)
  tx.map(CARTS).put('alice', 'apple', 2)
  tx.map(CARTS).put('alice', 'fig', 1)
  tx.map(CARTS).put('carol', 'pear', 4)
  tx.value(BLOBS).put(BLOB_KEYS[0]!, Buffer.of(1, 2, 3))
  tx.value(BLOBS).put(BLOB_KEYS[1]!, Buffer.alloc(0))
  if (!outputs.accept(tx, 'tm1:upstream:clicks:2:100:0')) throw new Error('dedupe refused a first id')
  outputs.put(tx, 10n, 0, { topic: 'orders-out', key: 'apple', value: '{"n":3}', headers: { trace: 't-1' } })
  outputs.put(tx, 10n, 1, { topic: 'audit', value: null, partition: 2 })
  await tx.commit(at(10n))
  outputs.committed(10n)
  tx = store.transaction()
  tx.value(BLOBS).put(BLOB_KEYS[2]!, Buffer.from('text value', 'utf8'))
  if (!outputs.accept(tx, 'tm1:upstream:clicks:2:101:3')) throw new Error('dedupe refused a newer id')
  if (outputs.accept(tx, 'tm1:upstream:clicks:2:101:2')) throw new Error('dedupe took an older id')
  if (!outputs.accept(tx, [Buffer.from('tm1:other%3Ajob:clicks:0:7:0', 'utf8')])) throw new Error('dedupe refused an id of another upstream partition')
  outputs.put(tx, 12n, 0, { topic: 'orders-out', key: Buffer.of(0, 255), value: Buffer.of(0xde, 0xad), headers: { bin: Buffer.of(1) } })
  await tx.commit([at(12n), at(3n, 1)])
  outputs.committed(12n)
  await store.setMetadata(REPLAY_METADATA, REPLAY_RECORD)
  await store.setMetadata(REPLAY_START_METADATA, { from: '3', snapshot: { job: JOB, id: '0000000001-000000000000' }, warmedUp: 0 })
  await store.setMetadata(REPLAY_CLAIM_METADATA, { epoch: 2, exclusive: true })
  await store.setMetadata('golden.note', { written: CREATED_AT, by: 'scripts/formats/make-golden.ts' })
  await store.flush()
  await store.close()
  if (!(await readdir(path)).includes(STORE_MARKER)) throw new Error('the store has no marker')
  const marker = JSON.parse(await readFile(join(path, STORE_MARKER), 'utf8')) as Record<string, unknown>
  await writeFile(join(path, STORE_MARKER), `${JSON.stringify({ ...marker, createdAt: CREATED_AT })}\n`)
  // LevelDB's info log holds wall-clock times and its LOCK is made on open: neither is part of the store.
  for (const name of await readdir(path)) if (/^(?:LOG|LOG\.old|LOCK)$/.test(name)) await rm(join(path, name))
}

/** A claim with a lease, of a consumer group's generation, renewed once. */
async function heldClaimSample(work: string, file: string, owner = OWNER): Promise<void> {
  await rm(join(work, 'claims'), { recursive: true, force: true })
  const store = new FsSnapshotStore({ root: join(work, 'claims') })
  let now = CLOCK_MS
  const claim = await acquireClaim({ store, job: JOB, partition: 1, owner: OWNER.name, leaseMs: 30_000, generation: 7, minEpoch: 4, clock: () => now })
  now += 10_000
  await claim.renew()
  const key = new SnapshotLayout(JOB, 1).claimKey
  await fixClaim(join(work, 'claims', key), JOB, '1', owner)
  await cp(join(work, 'claims', key), file)
}

/** The replay record of another job, in the snapshot store sample (a replay's namespace holds nothing else of a live job). */
async function replayRecordSample(root: string): Promise<void> {
  const store = new FsSnapshotStore({ root })
  await claimNamespace(store, new SnapshotLayout(REPLAY_JOB, 0), REPLAY_RECORD, undefined)
}

await main()
