/**
 * Snapshots of a generated partition store of --mb MiB (default 1100) to S3:
 * a full snapshot, an incremental one after --changePercent of the keys
 * changed, and --snapshots (default 25) snapshots taken back to back while a
 * writer commits --writeRate events/s, to measure how long commits stall.
 * rawPutMBps puts the same table files with plain PutObject requests, at the
 * same concurrency as the snapshot upload, in the same run.
 *
 * --throttle-mbps N (20 is the documented choice: a slow S3) puts the store
 * behind a proxy that lets N MiB/s through each way (bench/_throttle.ts), for
 * the snapshots and the plain puts alike; the store is then 256 MiB unless
 * --mb says otherwise, so that the run still ends in a few minutes. The
 * result goes to bench/results/snapshot.json, or snapshot-throttled.json.
 *
 * S3: TIDEMARK_S3_ENDPOINT (+ TIDEMARK_S3_ACCESS_KEY, TIDEMARK_S3_SECRET_KEY,
 * TIDEMARK_S3_REGION), or a throwaway radosgw started with
 * scripts/services/ceph-rgw/start.sh. Objects are deleted at the end
 * (radosgw's memstore keeps them in RAM).
 */
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { createWriteStream, mkdtempSync, readFileSync } from 'node:fs'
import { link, mkdir, open, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { fileURLToPath } from 'node:url'
import {
  CreateBucketCommand, DeleteBucketCommand, DeleteObjectsCommand, GetObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client,
} from '@aws-sdk/client-s3'
import { S3SnapshotStore, S3_DEFAULTS } from '../connectors/s3/index.js'
import { PartitionStore, rawCodec, Snapshotter, SNAPSHOT_DEFAULTS, valueState, type SnapshotResult, type SnapshotStore } from '../src/index.js'
import { saveFigures } from './_figures.js'
import { startThrottle } from './_throttle.js'
import { benchDir, emit, intFlags, loadAvg, rng, round } from './_util.js'

const MiB = 1024 * 1024
export const kv = valueState('kv', { codec: rawCodec() })
export const TOPIC = 'events'

export interface BenchS3 {
  endpoint: string
  region: string
  credentials: { accessKeyId: string; secretAccessKey: string }
  bucket: string
  admin: S3Client
  /** A snapshot store on the bucket; `endpoint` reaches the same server another way (a throttling proxy). */
  store(prefix: string, options?: { uploadConcurrency?: number; partSize?: number; endpoint?: string }): S3SnapshotStore
  /** Deletes every object of the bucket, the bucket, and stops radosgw if this process started it. */
  close(): Promise<void>
}

/** An S3 bucket for a benchmark: on TIDEMARK_S3_ENDPOINT, or on a radosgw started here. */
export async function benchS3(name: string): Promise<BenchS3> {
  let endpoint = process.env.TIDEMARK_S3_ENDPOINT?.trim()
  let credentials = { accessKeyId: process.env.TIDEMARK_S3_ACCESS_KEY ?? 'minioadmin', secretAccessKey: process.env.TIDEMARK_S3_SECRET_KEY ?? 'minioadmin' }
  const region = process.env.TIDEMARK_S3_REGION ?? 'us-east-1'
  let stop = (): void => {}
  if (endpoint === undefined || endpoint === '') {
    const scripts = fileURLToPath(new URL('../scripts/services/ceph-rgw/', import.meta.url))
    const dir = mkdtempSync(join(tmpdir(), 'tidemark-bench-rgw-'))
    const started = spawnSync('bash', [join(scripts, 'start.sh'), dir], { encoding: 'utf8', env: { ...process.env, TIDEMARK_WATCH_PID: String(process.pid) } })
    const ready = started.stdout.split('\n').find((line) => line.startsWith('READY '))
    if (started.status !== 0 || ready === undefined) throw new Error(`radosgw did not start:\n${started.stderr}${started.stdout}`)
    const fields = Object.fromEntries(ready.split(' ').slice(1).map((w) => w.split('=') as [string, string]))
    endpoint = fields.endpoint!
    credentials = { accessKeyId: fields.access!, secretAccessKey: fields.secret! }
    stop = () => { spawnSync('bash', [join(scripts, 'stop.sh'), dir], { stdio: 'ignore' }) }
  }
  const bucket = `${name}-${randomBytes(6).toString('hex')}`
  const admin = new S3Client({ endpoint, region, forcePathStyle: true, credentials })
  await admin.send(new CreateBucketCommand({ Bucket: bucket }))
  const stores: S3SnapshotStore[] = []
  return {
    endpoint,
    region,
    credentials,
    bucket,
    admin,
    store(prefix, options = {}) {
      const store = new S3SnapshotStore({ endpoint: endpoint!, region, forcePathStyle: true, credentials, bucket, prefix, ...withoutUndefined(options) })
      stores.push(store)
      return store
    },
    async close() {
      await Promise.all(stores.map((s) => s.close()))
      await emptyBucket(admin, bucket, '')
      await admin.send(new DeleteBucketCommand({ Bucket: bucket }))
      admin.destroy()
      stop()
    },
  }
}

function withoutUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>
}

export async function emptyBucket(admin: S3Client, bucket: string, prefix: string): Promise<void> {
  for (let token: string | undefined, more = true; more;) {
    const page = await admin.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }))
    const keys = (page.Contents ?? []).map((o) => ({ Key: o.Key }))
    if (keys.length > 0) await admin.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: keys, Quiet: true } }))
    token = page.NextContinuationToken
    more = page.IsTruncated === true
  }
}

export function keyOf(i: number): string {
  return `key-${i.toString().padStart(9, '0')}`
}

/** Random bytes that snappy cannot shrink: slices of a random pool. */
export function valueSource(valueBytes: number, seed: number): (i: number, version: number) => Buffer {
  const next = rng(seed)
  const pool = Buffer.allocUnsafe(16 * MiB)
  for (let i = 0; i < pool.length; i += 4) pool.writeUInt32LE(Math.floor(next() * 2 ** 32), i)
  return (i, version) => {
    const at = ((i * 2654435761 + version * 40503) >>> 0) % (pool.length - valueBytes)
    return pool.subarray(at, at + valueBytes)
  }
}

export interface GeneratedStore {
  store: PartitionStore
  keys: number
  value: (i: number, version: number) => Buffer
  /** The next offset to commit. */
  offset: bigint
}

/** A store of about `mb` MiB: keys written in order, in batches of 1000, each batch one commit. */
async function writeStore(path: string, mb: number, valueBytes: number): Promise<{ keys: number; offset: bigint }> {
  const store = await PartitionStore.open({ path, states: [kv] })
  const keys = Math.ceil((mb * MiB) / (valueBytes + 16))
  const value = valueSource(valueBytes, 7)
  let offset = 0n
  for (let start = 0; start < keys; start += 1000) {
    const tx = store.transaction()
    const view = tx.value(kv)
    for (let i = start; i < Math.min(keys, start + 1000); i++) view.put(keyOf(i), value(i, 0))
    await tx.commit({ topic: TOPIC, partition: 0, offset: offset++ })
  }
  await store.close()
  return { keys, offset }
}

/**
 * Generates the store in a child process, so that the bulk load's memory
 * does not count in this process's peak RSS, then opens it here and waits
 * for the load's compactions to finish.
 */
export async function generateStore(path: string, mb: number, valueBytes: number): Promise<GeneratedStore> {
  const child = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), 'generate', path, String(mb), String(valueBytes)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] })
  if (child.status !== 0) throw new Error(`generating the store failed (${child.status ?? child.signal})`)
  const { keys, offset } = JSON.parse(child.stdout) as { keys: number; offset: string }
  const store = await PartitionStore.open({ path, states: [kv] })
  await settle(path)
  return { store, keys, value: valueSource(valueBytes, 7), offset: BigInt(offset) }
}

if (process.argv[2] === 'generate' && process.argv[1] === fileURLToPath(import.meta.url)) {
  const [path, mb, valueBytes] = process.argv.slice(3)
  const { keys, offset } = await writeStore(path!, Number(mb), Number(valueBytes))
  process.stdout.write(JSON.stringify({ keys, offset: offset.toString() }))
}

/** Rewrites `count` random keys at `version`, in commits of 1000. */
export async function changeKeys(g: GeneratedStore, count: number, version: number, seed: number): Promise<void> {
  const next = rng(seed)
  for (let done = 0; done < count; done += 1000) {
    const tx = g.store.transaction()
    const view = tx.value(kv)
    for (let j = done; j < Math.min(count, done + 1000); j++) {
      const i = Math.floor(next() * g.keys)
      view.put(keyOf(i), g.value(i, version))
    }
    await tx.commit({ topic: TOPIC, partition: 0, offset: g.offset++ })
  }
}

/** Waits until no table file was added or removed for quietMs: the bulk load's compactions are done. */
export async function settle(path: string, quietMs = 3000): Promise<void> {
  const tables = async (): Promise<string> => (await readdir(path)).filter((n) => n.endsWith('.ldb')).join(',')
  let last = await tables()
  for (let since = performance.now(); performance.now() - since < quietMs;) {
    await new Promise((resolve) => setTimeout(resolve, 200))
    const now = await tables()
    if (now !== last) {
      last = now
      since = performance.now()
    }
  }
}

export function peakRssMB(): number {
  return round(process.resourceUsage().maxRSS / 1024, 1)
}

export function percentile(xs: readonly number[], p: number): number {
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!
}

/** Plain PutObject of each file, `concurrency` at a time; the bytes put and the seconds it took. */
/** A full snapshot of every store at once, one Snapshotter each (partition = index) under `job`: the bytes uploaded and the seconds it took. */
export async function snapshotEach(snapshotStore: SnapshotStore, stores: readonly PartitionStore[], job: string): Promise<{ bytes: number; seconds: number }> {
  const snapshotters = stores.map((partitionStore, p) => new Snapshotter({ snapshotStore, partitionStore, job, partition: p }))
  const t0 = performance.now()
  const results = await Promise.all(snapshotters.map((s) => s.takeSnapshot()))
  const seconds = (performance.now() - t0) / 1000
  await Promise.all(snapshotters.map((s) => s.close()))
  return { bytes: results.reduce((sum, r) => sum + r.bytesUploaded, 0), seconds }
}

/** What the plain baselines need of the bench's S3: the bucket, and a client to empty it with. */
export type PlainS3 = Pick<BenchS3, 'bucket' | 'admin'>

export async function rawPut(s3: PlainS3, client: S3Client, dir: string, names: readonly string[], concurrency: number): Promise<{ bytes: number; seconds: number }> {
  let bytes = 0
  let next = 0
  const t0 = performance.now()
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < names.length) {
      const name = names[next++]!
      const body = await readFile(join(dir, name))
      bytes += body.length
      await client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: `raw/${name}`, Body: body }))
    }
  }))
  const seconds = (performance.now() - t0) / 1000
  await emptyBucket(s3.admin, s3.bucket, 'raw/')
  return { bytes, seconds }
}

/** Plain GetObject of each object whole into a file, fsynced, `concurrency` at a time; the directory is removed after. */
export async function rawGet(s3: PlainS3, keys: readonly string[], dir: string, concurrency: number): Promise<{ bytes: number; seconds: number }> {
  await mkdir(dir, { recursive: true })
  let bytes = 0
  let next = 0
  const t0 = performance.now()
  await Promise.all(Array.from({ length: Math.min(concurrency, keys.length) }, async () => {
    while (next < keys.length) {
      const key = keys[next++]!
      const response = await s3.admin.send(new GetObjectCommand({ Bucket: s3.bucket, Key: key }))
      const path = join(dir, key.replaceAll('/', '_'))
      await pipeline(response.Body as Readable, createWriteStream(path))
      const handle = await open(path, 'r+')
      bytes += (await handle.stat()).size
      await handle.sync()
      await handle.close()
    }
  }))
  const seconds = (performance.now() - t0) / 1000
  await rm(dir, { recursive: true, force: true })
  return { bytes, seconds }
}

/** Peak RSS (anonymous + file-backed, as getrusage counts it) per phase of the run, sampled every 20 ms. */
export function phasePeaks(): { phase(name: string): void; stop(): Record<string, number> } {
  const peaks: Record<string, number> = {}
  let current = 'setup'
  const sample = (): void => {
    const status = readFileSync('/proc/self/status', 'utf8')
    const kb = (field: string): number => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0)
    peaks[current] = Math.max(peaks[current] ?? 0, Math.round((kb('RssAnon') + kb('RssFile') + kb('RssShmem')) / 1024))
  }
  const timer = setInterval(sample, 20)
  return {
    phase(name) {
      sample()
      current = name
    },
    stop() {
      sample()
      clearInterval(timer)
      return peaks
    },
  }
}

export async function run(args: string[]): Promise<void> {
  // mb 0: 1100, or 256 with a throttle (a slow store takes ~13 s per 256 MiB at 20 MiB/s).
  const opts = intFlags(args, { 'mb': 0, 'throttle-mbps': 0, valueBytes: 1000, changePercent: 1, snapshots: 25, writeRate: 5000, writeBatch: 100, uploadConcurrency: SNAPSHOT_DEFAULTS.uploadConcurrency, objectMB: SNAPSHOT_DEFAULTS.maxObjectBytes / MiB, s3Parts: S3_DEFAULTS.uploadConcurrency, partMB: S3_DEFAULTS.partSize / MiB })
  const throttleMBps = opts['throttle-mbps'] > 0 ? opts['throttle-mbps'] : undefined
  const mb = opts.mb > 0 ? opts.mb : throttleMBps === undefined ? 1100 : 256
  const loadAvgAtStart = loadAvg()
  const dir = benchDir('snapshot')
  const s3 = await benchS3('bench-snapshot')
  const throttle = throttleMBps === undefined ? undefined : await startThrottle(s3.endpoint, throttleMBps)
  // The plain puts take the same road as the snapshots.
  const putClient = throttle === undefined ? s3.admin : new S3Client({ endpoint: throttle.endpoint, region: s3.region, forcePathStyle: true, credentials: s3.credentials })
  try {
    const g = await generateStore(join(dir.path, 'store'), mb, opts.valueBytes)
    const dfs = s3.store('job', { uploadConcurrency: opts.s3Parts, partSize: opts.partMB * MiB, endpoint: throttle?.endpoint })
    const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: g.store, job: 'bench', partition: 0, uploadConcurrency: opts.uploadConcurrency, maxObjectBytes: opts.objectMB * MiB })

    // Plain puts of the same table files, at the snapshot's concurrency
    // (objects x parts per object): half before and half after the
    // snapshot's upload, so that both see the machine in the same state.
    const peaks = phasePeaks()
    const rawDir = join(dir.path, 'raw')
    await mkdir(rawDir)
    await g.store.quiesce(async (path) => {
      for (const name of await readdir(path)) if (name.endsWith('.ldb')) await link(join(path, name), join(rawDir, name))
    })
    const tables = (await readdir(rawDir)).sort()
    const rawConcurrency = opts.uploadConcurrency * opts.s3Parts
    peaks.phase('rawPut')
    const rawA = await rawPut(s3, putClient, rawDir, tables.filter((_n, i) => i % 2 === 0), rawConcurrency)

    peaks.phase('fullSnapshot')
    const full = await snapshotter.takeSnapshot()
    const uploadMBps = full.bytesUploaded / MiB / (full.uploadMs / 1000)

    peaks.phase('rawPut')
    const rawB = await rawPut(s3, putClient, rawDir, tables.filter((_n, i) => i % 2 === 1), rawConcurrency)
    const rawPutMBps = (rawA.bytes + rawB.bytes) / MiB / (rawA.seconds + rawB.seconds)
    await rm(rawDir, { recursive: true, force: true })

    peaks.phase('incremental')
    await changeKeys(g, Math.round((g.keys * opts.changePercent) / 100), 1, 11)
    const incremental = await snapshotter.takeSnapshot()
    const before = new Set(full.files.map((f) => f.name))
    const newTableBytes = incremental.files.filter((f) => f.name.endsWith('.ldb') && !before.has(f.name)).reduce((sum, f) => sum + f.size, 0)

    // Snapshots back to back under a write load of writeRate events/s.
    const stalls: number[] = []
    const commitMs: number[] = []
    const results: SnapshotResult[] = []
    let writing = true
    let events = 0
    const next = rng(99)
    const writer = (async () => {
      const t0 = performance.now()
      while (writing) {
        const tx = g.store.transaction()
        const view = tx.value(kv)
        for (let j = 0; j < opts.writeBatch; j++) {
          const i = Math.floor(next() * g.keys)
          view.put(keyOf(i), g.value(i, 2 + events))
        }
        const c0 = performance.now()
        await tx.commit({ topic: TOPIC, partition: 0, offset: g.offset++ })
        commitMs.push(performance.now() - c0)
        events += opts.writeBatch
        const ahead = (events / opts.writeRate) * 1000 - (performance.now() - t0)
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, ahead)))
      }
    })()
    peaks.phase('writeLoad')
    const loadStarted = performance.now()
    for (let n = 0; n < opts.snapshots; n++) {
      const r = await snapshotter.takeSnapshot()
      results.push(r)
      stalls.push(r.stallMs)
    }
    writing = false
    await writer
    const peakRssMBByPhase = peaks.stop()
    const loadSeconds = (performance.now() - loadStarted) / 1000

    const result = {
      bench: 'snapshot',
      throttleMBps: throttleMBps ?? null,
      loadAvg: loadAvgAtStart,
      stateBytes: full.bytesTotal,
      fullUploadBytes: full.bytesUploaded,
      incrementalUploadBytes: incremental.bytesUploaded,
      newTableBytes,
      changedKeys: Math.round((g.keys * opts.changePercent) / 100),
      stallMsP99: round(percentile(stalls, 99), 1),
      stallMsP50: round(percentile(stalls, 50), 1),
      stallSnapshots: stalls.length,
      commitMsMax: round(Math.max(...commitMs), 1),
      writeEventsPerSec: Math.round(events / loadSeconds),
      uploadMBps: round(uploadMBps, 1),
      rawPutMBps: round(rawPutMBps, 1),
      uploadRatio: round(uploadMBps / rawPutMBps),
      rawPutConcurrency: rawConcurrency,
      loadSnapshotsFull: results.filter((r) => r.full).length,
      peakRssMB: peakRssMB(),
      peakRssMBByPhase,
      keys: g.keys,
      valueBytes: opts.valueBytes,
    }
    emit(result)
    saveFigures(throttleMBps === undefined ? 'snapshot' : 'snapshot-throttled', args, result, 'snapshot')
    await snapshotter.close()
    await g.store.close()
  } finally {
    if (putClient !== s3.admin) putClient.destroy()
    await throttle?.close()
    await s3.close()
    dir.cleanup()
  }
}
