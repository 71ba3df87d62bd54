/**
 * How cost grows with the state (issue 12 item 7), on S3 (radosgw started
 * by benchS3, or TIDEMARK_S3_ENDPOINT):
 *
 * - series "size": for each of --sizes MiB (default 128,512,1024), a store
 *   generated as bench/snapshot.ts does, a full snapshot (snapshotSeconds,
 *   wall time of takeSnapshot) and a restore of it (restoreSeconds, with its
 *   checksums and fsyncs). Beside them the raw baseline of the same bytes:
 *   plain PutObject of the same table files at the snapshot's concurrency
 *   (rawPutMBps), and GetObject of the snapshot's objects whole into files,
 *   each fsynced, at the restore's concurrency (rawGetMBps); --raw 0 skips
 *   it. One measurement each, not interleaved: these points show a trend, the
 *   ratios with targets are the snapshot and restore benches'.
 * - series "incremental": on the store of --incremental-mb (default 512; the
 *   size point's store when it is one of --sizes), --percents of the keys
 *   (default 0.1,1,10) changed one step after the other, each followed by a
 *   snapshot: the bytes uploaded against the keys changed and the table files
 *   LevelDB wrote for them (newTableBytes). Each step waits until the store's
 *   compactions are done before its snapshot, so that what a step's writes
 *   cause is counted in its own snapshot and not in the next one.
 *
 * peakRssMB of a point is the sampled peak of this process while it
 * snapshots and restores (the store is generated in a child process); the
 * process-wide maximum is saved as processPeakRssMB. Each point carries the
 * load average when it started. All points go to bench/results/growth.json
 * for `npm run readme:bench`.
 */
import { createWriteStream } from 'node:fs'
import { link, mkdir, open, readdir, readFile, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { parseArgs } from 'node:util'
import { GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3'
import { S3_DEFAULTS, type S3SnapshotStore } from '../connectors/s3/index.js'
import { RESTORE_DEFAULTS, restoreSnapshot, Snapshotter, SNAPSHOT_DEFAULTS, type SnapshotResult } from '../src/index.js'
import { saveFigures } from './_figures.js'
import { benchDir, emit, loadAvg, round } from './_util.js'
import { benchS3, changeKeys, emptyBucket, generateStore, peakRssMB, phasePeaks, settle, type BenchS3, type GeneratedStore } from './snapshot.js'

const MiB = 1024 * 1024

interface Options {
  sizes: number[]
  incrementalMb: number
  percents: number[]
  valueBytes: number
  raw: boolean
}

function parseOptions(args: string[]): Options {
  const { values } = parseArgs({
    args,
    strict: true,
    options: { sizes: { type: 'string' }, 'incremental-mb': { type: 'string' }, percents: { type: 'string' }, 'value-bytes': { type: 'string' }, raw: { type: 'string' } },
  })
  const list = (flag: string, text: string, integer: boolean): number[] => {
    const xs = text.split(',').map((s) => Number(s.trim()))
    if (xs.length === 0 || xs.some((x) => !(x > 0) || !Number.isFinite(x) || (integer && !Number.isSafeInteger(x)))) {
      throw new RangeError(`--${flag} must be a comma-separated list of positive ${integer ? 'integers' : 'numbers'}, got ${text}`)
    }
    return xs
  }
  const sizes = list('sizes', values.sizes ?? '128,512,1024', true)
  const [incrementalMb] = list('incremental-mb', values['incremental-mb'] ?? (sizes.includes(512) ? '512' : String(sizes[0])), true)
  const percents = list('percents', values.percents ?? '0.1,1,10', false)
  if (percents.some((p) => p > 100)) throw new RangeError(`--percents must be at most 100, got ${values.percents}`)
  const [valueBytes] = list('value-bytes', values['value-bytes'] ?? '1000', true)
  if (values.raw !== undefined && values.raw !== '0' && values.raw !== '1') throw new RangeError(`--raw must be 0 or 1, got ${values.raw}`)
  return { sizes, incrementalMb: incrementalMb!, percents, valueBytes: valueBytes!, raw: values.raw !== '0' }
}

/** Runs `work` on each item, `concurrency` at a time; the seconds it all took. */
async function timedParallel<T>(items: readonly T[], concurrency: number, work: (item: T) => Promise<void>): Promise<number> {
  let next = 0
  const t0 = performance.now()
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, async () => {
    while (next < items.length) await work(items[next++]!)
  }))
  return (performance.now() - t0) / 1000
}

/** One store of `mb` MiB on its own prefix, with its first (full) snapshot taken. */
interface SizedStore {
  g: GeneratedStore
  snapshotter: Snapshotter
  prefix: string
  full: SnapshotResult
}

/** A generated store of `mb` MiB and its Snapshotter, on a prefix of its own. */
async function generated(s3: BenchS3, dir: string, mb: number, opts: Options): Promise<{ g: GeneratedStore; snapshotStore: S3SnapshotStore; snapshotter: Snapshotter }> {
  const g = await generateStore(join(dir, `store-${mb}`), mb, opts.valueBytes)
  const snapshotStore = s3.store(`growth-${mb}`)
  return { g, snapshotStore, snapshotter: new Snapshotter({ snapshotStore, partitionStore: g.store, job: 'bench', partition: 0 }) }
}

async function sizePoint(s3: BenchS3, dir: string, mb: number, opts: Options): Promise<{ point: Record<string, unknown>; sized: SizedStore }> {
  const pointLoad = loadAvg()
  const { g, snapshotStore, snapshotter } = await generated(s3, dir, mb, opts)
  const prefix = snapshotStore.options.prefix
  const peaks = phasePeaks()

  // The same table files as the snapshot will hold, linked while the store is quiet.
  const rawDir = join(dir, `raw-${mb}`)
  await mkdir(rawDir)
  if (opts.raw) {
    await g.store.quiesce(async (path) => {
      for (const name of await readdir(path)) if (name.endsWith('.ldb')) await link(join(path, name), join(rawDir, name))
    })
  }

  peaks.phase('snapshot')
  const s0 = performance.now()
  const full = await snapshotter.takeSnapshot()
  const snapshotSeconds = (performance.now() - s0) / 1000

  let raw: Record<string, number> = {}
  if (opts.raw) {
    peaks.phase('rawPut')
    // The snapshot's concurrency: objects at a time x parts per object.
    const putConcurrency = SNAPSHOT_DEFAULTS.uploadConcurrency * S3_DEFAULTS.uploadConcurrency
    const tables = await readdir(rawDir)
    let putBytes = 0
    const putSeconds = await timedParallel(tables, putConcurrency, async (name) => {
      const body = await readFile(join(rawDir, name))
      putBytes += body.length
      await s3.admin.send(new PutObjectCommand({ Bucket: s3.bucket, Key: `raw-${mb}/${name}`, Body: body }))
    })
    await emptyBucket(s3.admin, s3.bucket, `raw-${mb}/`)
    await rm(rawDir, { recursive: true, force: true })

    peaks.phase('rawGet')
    const manifest = (await snapshotter.latest())!
    const getDir = join(dir, `get-${mb}`)
    await mkdir(getDir)
    let getBytes = 0
    const getSeconds = await timedParallel(manifest.objects, RESTORE_DEFAULTS.downloadConcurrency, async (o) => {
      const response = await s3.admin.send(new GetObjectCommand({ Bucket: s3.bucket, Key: `${prefix}bench/0/${o.key}` }))
      const path = join(getDir, o.key.replaceAll('/', '_'))
      await pipeline(response.Body as Readable, createWriteStream(path))
      const handle = await open(path, 'r+')
      await handle.sync()
      await handle.close()
      getBytes += o.size
    })
    await rm(getDir, { recursive: true, force: true })
    raw = {
      rawPutSeconds: round(putSeconds, 2), rawPutMBps: round(putBytes / MiB / putSeconds, 1), rawPutConcurrency: putConcurrency,
      rawGetSeconds: round(getSeconds, 2), rawGetMBps: round(getBytes / MiB / getSeconds, 1), rawGetConcurrency: RESTORE_DEFAULTS.downloadConcurrency,
    }
  } else {
    await rm(rawDir, { recursive: true, force: true })
  }

  peaks.phase('restore')
  const target = join(dir, `restored-${mb}`)
  const restored = await restoreSnapshot({ snapshotStore, job: 'bench', partition: 0, target })
  const restoreSeconds = restored.durationMs / 1000
  await rm(target, { recursive: true, force: true })
  const peakRssMBByPhase = peaks.stop()

  const snapshotMBps = full.bytesUploaded / MiB / snapshotSeconds
  const restoreMBps = restored.bytesDownloaded / MiB / restoreSeconds
  const point = {
    bench: 'growth',
    series: 'size',
    mb,
    loadAvg: pointLoad,
    stateBytes: full.bytesTotal,
    keys: g.keys,
    snapshotSeconds: round(snapshotSeconds, 2),
    snapshotMBps: round(snapshotMBps, 1),
    uploadMBps: round(full.bytesUploaded / MiB / (full.uploadMs / 1000), 1),
    stallMs: round(full.stallMs, 1),
    fullUploadBytes: full.bytesUploaded,
    restoreSeconds: round(restoreSeconds, 2),
    restoreMBps: round(restoreMBps, 1),
    bytesDownloaded: restored.bytesDownloaded,
    ...raw,
    ...(opts.raw ? { uploadRatio: round(snapshotMBps / raw.rawPutMBps!), restoreRatio: round(restoreSeconds / raw.rawGetSeconds!) } : {}),
    peakRssMB: Math.max(peakRssMBByPhase.snapshot ?? 0, peakRssMBByPhase.restore ?? 0),
    peakRssMBByPhase,
  }
  return { point, sized: { g, snapshotter, prefix, full } }
}

/** The incremental series on a store whose full snapshot is taken: one point per percentage, applied one after the other. */
async function incrementalSeries(sized: SizedStore, mb: number, opts: Options): Promise<Array<Record<string, unknown>>> {
  const { g, snapshotter } = sized
  const points: Array<Record<string, unknown>> = []
  let previous = sized.full
  for (const [step, percent] of opts.percents.entries()) {
    const pointLoad = loadAvg()
    const changedKeys = Math.max(1, Math.round((g.keys * percent) / 100))
    await changeKeys(g, changedKeys, 10 + step, 1000 + step)
    await settle(g.store.path)
    const t0 = performance.now()
    const r = await snapshotter.takeSnapshot()
    const snapshotSeconds = (performance.now() - t0) / 1000
    const before = new Set(previous.files.map((f) => f.name))
    const newTables = r.files.filter((f) => f.name.endsWith('.ldb') && !before.has(f.name))
    const newTableBytes = newTables.reduce((sum, f) => sum + f.size, 0)
    const point = {
      bench: 'growth',
      series: 'incremental',
      mb,
      changedPercent: percent,
      loadAvg: pointLoad,
      changedKeys,
      keys: g.keys,
      changedValueBytes: changedKeys * opts.valueBytes,
      uploadedBytes: r.bytesUploaded,
      newTableBytes,
      newTables: newTables.length,
      uploadedPercent: round((r.bytesUploaded / r.bytesTotal) * 100, 2),
      uploadToNewTables: newTableBytes > 0 ? round(r.bytesUploaded / newTableBytes) : null,
      stateBytes: r.bytesTotal,
      fullUploadBytes: sized.full.bytesUploaded,
      full: r.full,
      ...(r.fullReason === undefined ? {} : { fullReason: r.fullReason }),
      snapshotSeconds: round(snapshotSeconds, 2),
    }
    points.push(point)
    previous = r
  }
  return points
}

async function closeSized(s3: BenchS3, sized: SizedStore): Promise<void> {
  await sized.snapshotter.close()
  await sized.g.store.close()
  await rm(sized.g.store.path, { recursive: true, force: true })
  // radosgw's memstore holds every object in RAM: free each size's before the next.
  await emptyBucket(s3.admin, s3.bucket, sized.prefix)
}

export async function run(args: string[]): Promise<void> {
  const opts = parseOptions(args)
  const loadAtStart = loadAvg()
  const dir = benchDir('growth')
  const s3 = await benchS3('bench-growth')
  const points: Array<Record<string, unknown>> = []
  const report = (p: Record<string, unknown>): void => {
    emit(p)
    points.push(p)
  }
  try {
    let incrementalDone = false
    for (const mb of opts.sizes) {
      const { point, sized } = await sizePoint(s3, dir.path, mb, opts)
      report(point)
      try {
        if (mb === opts.incrementalMb && !incrementalDone) {
          for (const p of await incrementalSeries(sized, mb, opts)) report(p)
          incrementalDone = true
        }
      } finally {
        await closeSized(s3, sized)
      }
    }
    if (!incrementalDone) {
      // A store of its own, not one of the size points: its full snapshot only starts the series.
      const { g, snapshotStore, snapshotter } = await generated(s3, dir.path, opts.incrementalMb, opts)
      const sized = { g, snapshotter, prefix: snapshotStore.options.prefix, full: await snapshotter.takeSnapshot() }
      try {
        for (const p of await incrementalSeries(sized, opts.incrementalMb, opts)) report(p)
      } finally {
        await closeSized(s3, sized)
      }
    }
    saveFigures('growth', args, {
      bench: 'growth',
      loadAvg: loadAtStart,
      node: process.version,
      sizes: opts.sizes,
      incrementalMb: opts.incrementalMb,
      percents: opts.percents,
      valueBytes: opts.valueBytes,
      baseline: opts.raw ? 'PutObject of the same table files at the snapshot\'s concurrency; GetObject of the snapshot\'s objects whole into files, each fsynced, at the restore\'s concurrency' : 'none (--raw 0)',
      processPeakRssMB: peakRssMB(),
      points,
    })
  } finally {
    await s3.close()
    dir.cleanup()
  }
}
