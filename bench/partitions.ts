/**
 * Many partitions in one process: --partitions (default 16) partition stores
 * of --mb MiB each (default 64; one generated store, copied), all sharing one
 * S3SnapshotStore, as a StatefulConsumer's partitions do. Each round
 * snapshots every partition at once (a full snapshot each, under a job name
 * of its own) and restores every partition at once (from one set of
 * snapshots taken at the start), with each Snapshotter's and restore's
 * default concurrency: the store's maxConcurrentUploads and
 * maxConcurrentDownloads (--limit, default the store's default) bound the
 * requests of all of them together.
 *
 * Raw baselines, at the same total concurrency (--limit) in the same run:
 * PutObject of the same table files (each file whole, read into memory
 * first); GetObject of the same data objects whole into files, each fsynced,
 * as bench/restore.ts's raw side. --rounds interleaved pairs each; putRatio
 * and getRatio are the medians of the per-pair throughput ratios
 * (Tidemark's bytes/s ÷ raw bytes/s). The requests in flight are counted at
 * the store's client (a GET until its body closes; data objects only), to
 * show the limit held.
 *
 * S3: as bench/snapshot.ts (TIDEMARK_S3_ENDPOINT or a radosgw started here).
 */
import { cp, link, mkdir, readdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { GetObjectCommand, PutObjectCommand, UploadPartCommand } from '@aws-sdk/client-s3'
import { S3SnapshotStore, S3_DEFAULTS } from '../connectors/s3/index.js'
import { PartitionStore, RESTORE_DEFAULTS, restoreSnapshot, SNAPSHOT_DEFAULTS } from '../src/index.js'
import { saveFigures } from './_figures.js'
import { measureInChild } from './_rss-child.js'
import { benchDir, emit, interleaved, intFlags, loadAvg, median, prefixed, round } from './_util.js'
import { benchS3, emptyBucket, generateStore, kv, peakRssMB, phasePeaks, rawGet, rawPut, snapshotEach } from './snapshot.js'

const MiB = 1024 * 1024

interface Transfer {
  bytes: number
  seconds: number
}

const mbps = (t: Transfer): number => t.bytes / MiB / t.seconds

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { partitions: 16, mb: 64, valueBytes: 1000, rounds: 3, limit: S3_DEFAULTS.maxConcurrentUploads })
  const loadAtStart = loadAvg()
  const dir = benchDir('partitions')
  const s3 = await benchS3('bench-partitions')
  const snapshotStore = new S3SnapshotStore({
    endpoint: s3.endpoint, region: s3.region, forcePathStyle: true, credentials: s3.credentials, bucket: s3.bucket, prefix: 'job',
    maxConcurrentUploads: opts.limit, maxConcurrentDownloads: opts.limit,
  })
  const inFlight = countInFlight(snapshotStore)
  const stores: PartitionStore[] = []
  try {
    // One generated store, copied: the partitions hold the same bytes, under keys of their own.
    const first = join(dir.path, 'p0')
    const g = await generateStore(first, opts.mb, opts.valueBytes)
    await g.store.close()
    for (let p = 1; p < opts.partitions; p++) await cp(first, join(dir.path, `p${p}`), { recursive: true })
    for (let p = 0; p < opts.partitions; p++) stores.push(await PartitionStore.open({ path: join(dir.path, `p${p}`), states: [kv] }))

    // The raw side's files: each partition's table files, linked while it is quiescent.
    const rawDir = join(dir.path, 'raw')
    const tables: string[] = []
    for (const [p, store] of stores.entries()) {
      await mkdir(join(rawDir, `p${p}`), { recursive: true })
      await store.quiesce(async (path) => {
        for (const name of await readdir(path)) {
          if (!name.endsWith('.ldb')) continue
          await link(join(path, name), join(rawDir, `p${p}`, name))
          tables.push(`p${p}/${name}`)
        }
      })
    }

    const peaks = phasePeaks()
    peaks.phase('snapshot')
    const snapshotAll = (job: string): Promise<Transfer> => snapshotEach(snapshotStore, stores, job)
    // The snapshots that every restore round reads.
    await snapshotAll('restore')
    inFlight.reset()

    const put = await interleaved(opts.rounds, async () => {
      peaks.phase('rawPut')
      return rawPut(s3, s3.admin, rawDir, tables, opts.limit)
    }, async (r) => {
      peaks.phase('snapshot')
      const job = `put-${r}`
      const t = await snapshotAll(job)
      await emptyBucket(s3.admin, s3.bucket, `${snapshotStore.options.prefix}${job}/`)
      return t
    }, (raw, ours) => mbps(ours) / mbps(raw))
    const maxUploadsInFlight = inFlight.reset().put

    const objects: string[] = []
    for (const key of await listAll(snapshotStore, 'restore/')) if (key.includes('/data/')) objects.push(`${snapshotStore.options.prefix}${key}`)
    const get = await interleaved(opts.rounds, async (r) => {
      peaks.phase('rawGet')
      return rawGet(s3, objects, join(dir.path, `raw-get-${r}`), opts.limit)
    }, async (r) => {
      peaks.phase('restore')
      const target = join(dir.path, `restored-${r}`)
      const t0 = performance.now()
      const results = await Promise.all(stores.map((_s, p) => restoreSnapshot({ snapshotStore, job: 'restore', partition: p, target: join(target, `p${p}`) })))
      const seconds = (performance.now() - t0) / 1000
      await rm(target, { recursive: true, force: true })
      return { bytes: results.reduce((sum, x) => sum + x.bytesDownloaded, 0), seconds }
    }, (raw, ours) => mbps(ours) / mbps(raw))
    const maxDownloadsInFlight = inFlight.reset().get
    const peakRssMBByPhase = peaks.stop()

    // The memory target: each side alone in a fresh process (bench/_rss-child.ts
    // says why this process's phases cannot tell it), the stores closed here first.
    await Promise.all(stores.splice(0).map((s) => s.close()))
    const childS3 = { endpoint: s3.endpoint, region: s3.region, credentials: s3.credentials, bucket: s3.bucket }
    const storePaths = Array.from({ length: opts.partitions }, (_, p) => join(dir.path, `p${p}`))
    const snapshotRss = await measureInChild({ kind: 'snapshot', s3: childS3, prefix: 'job', job: 'rss', stores: storePaths, maxConcurrentUploads: opts.limit })
    await emptyBucket(s3.admin, s3.bucket, `${snapshotStore.options.prefix}rss/`)
    const restoreRss = await measureInChild({ kind: 'restore', s3: childS3, prefix: 'job', job: 'restore', partitions: opts.partitions, target: join(dir.path, 'rss-restore'), maxConcurrentDownloads: opts.limit })
    const rawPutRss = await measureInChild({ kind: 'rawPut', s3: childS3, dir: rawDir, names: tables, concurrency: opts.limit })
    const rawGetRss = await measureInChild({ kind: 'rawGet', s3: childS3, keys: objects, target: join(dir.path, 'rss-raw-get'), concurrency: opts.limit })

    const result = {
      bench: 'partitions',
      baseline: `PutObject of the same table files (whole) and GetObject of the same data objects (whole, into files, each fsynced), ${opts.limit} requests at a time, as the store's shared limit`,
      loadAvg: loadAtStart,
      partitions: opts.partitions,
      mbPerPartition: opts.mb,
      stateBytes: median(put.measured.map((t) => t.bytes)),
      maxConcurrentUploads: opts.limit,
      maxConcurrentDownloads: opts.limit,
      uploadConcurrencyPerPartition: SNAPSHOT_DEFAULTS.uploadConcurrency * S3_DEFAULTS.uploadConcurrency,
      downloadConcurrencyPerPartition: RESTORE_DEFAULTS.downloadConcurrency,
      maxUploadsInFlight,
      maxDownloadsInFlight,
      putMBps: round(median(put.measured.map(mbps)), 1),
      rawPutMBps: round(median(put.raw.map(mbps)), 1),
      ...prefixed('putRatio', put),
      getMBps: round(median(get.measured.map(mbps)), 1),
      rawGetMBps: round(median(get.raw.map(mbps)), 1),
      ...prefixed('getRatio', get),
      // Processes that only snapshot every partition, or only restore them; the larger.
      peakRssMB: Math.max(snapshotRss.peakRssMB, restoreRss.peakRssMB),
      snapshotPeakRssMB: snapshotRss.peakRssMB,
      restorePeakRssMB: restoreRss.peakRssMB,
      // Processes that only put the same table files, or only get the same objects.
      rawPutPeakRssMB: rawPutRss.peakRssMB,
      rawGetPeakRssMB: rawGetRss.peakRssMB,
      // This process, for information: each phase starts from what the ones before it left.
      processPeakRssMB: peakRssMB(),
      peakRssMBByPhase,
    }
    emit(result)
    saveFigures('partitions', args, result)
  } finally {
    await Promise.all(stores.map((s) => s.close()))
    await snapshotStore.close()
    await s3.close()
    dir.cleanup()
  }
}

async function listAll(store: S3SnapshotStore, prefix: string): Promise<string[]> {
  const keys: string[] = []
  for await (const o of store.list(prefix)) keys.push(o.key)
  return keys
}

/**
 * The most upload requests (PutObject, UploadPart) and GetObject requests in
 * flight at once on the store's client; a GET counts until its body closes.
 */
function countInFlight(store: S3SnapshotStore): { reset(): { put: number; get: number } } {
  const now = { put: 0, get: 0 }
  const max = { put: 0, get: 0 }
  const client = store.client
  const send = client.send.bind(client) as (command: unknown) => Promise<unknown>
  const counted = async (command: unknown): Promise<unknown> => {
    // Data objects only: manifests and claims are small, and their puts take no slot.
    const data = ((command as { input?: { Key?: string } }).input?.Key ?? '').includes('/data/')
    const kind = !data ? undefined : command instanceof GetObjectCommand ? 'get' : command instanceof PutObjectCommand || command instanceof UploadPartCommand ? 'put' : undefined
    if (kind === undefined) return send(command)
    max[kind] = Math.max(max[kind], ++now[kind])
    let response: unknown
    try {
      response = await send(command)
    } catch (err) {
      now[kind]--
      throw err
    }
    const body = (response as { Body?: Readable }).Body
    if (kind === 'get' && body !== undefined && !body.closed) body.once('close', () => { now.get-- })
    else now[kind]--
    return response
  }
  client.send = counted as typeof client.send
  return {
    reset() {
      const seen = { ...max }
      max.put = now.put
      max.get = now.get
      return seen
    },
  }
}
