/**
 * Restore of the store that bench/snapshot.ts generates (--mb MiB, default
 * 1100) from S3: a full snapshot, then an incremental one after
 * --changePercent of the keys changed; the restore reads the files of the
 * newest one (from both snapshots' objects), verifies every SHA-256, fsyncs
 * every file, and opens the result. rawDownloadSeconds GETs the same objects
 * whole, in parallel with the same concurrency, into files that it fsyncs
 * too, in the same run. The same pair without fsync is reported beside.
 * Each is run --rounds times, alternating, and the fastest is reported.
 */
import { createWriteStream } from 'node:fs'
import { mkdir, open, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { GetObjectCommand } from '@aws-sdk/client-s3'
import { RESTORE_DEFAULTS, restoreSnapshot, Snapshotter, type RestoreResult } from '../src/index.js'
import { benchDir, emit, intFlags, round } from './_util.js'
import { benchS3, changeKeys, generateStore, peakRssMB, phasePeaks } from './snapshot.js'

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { mb: 1100, valueBytes: 1000, changePercent: 1, rounds: 2, concurrency: RESTORE_DEFAULTS.downloadConcurrency })
  const dir = benchDir('restore')
  const s3 = await benchS3('bench-restore')
  try {
    const g = await generateStore(join(dir.path, 'store'), opts.mb, opts.valueBytes)
    const peaks = phasePeaks()
    peaks.phase('snapshots')
    const snapshotStore = s3.store('job')
    const snapshotter = new Snapshotter({ snapshotStore, partitionStore: g.store, job: 'bench', partition: 0 })
    await snapshotter.takeSnapshot()
    await changeKeys(g, Math.round((g.keys * opts.changePercent) / 100), 1, 11)
    const snapshot = await snapshotter.takeSnapshot()
    await snapshotter.close()
    await g.store.close()
    await rm(g.store.path, { recursive: true, force: true })

    const manifest = (await snapshotter.latest())!
    const objects = manifest.objects.map((o) => ({ key: `${s3.store('job').options.prefix}bench/0/${o.key}`, size: o.size }))

    // Raw: each object GET into a file, fsynced when the restore fsyncs too,
    // so that both leave the same durable bytes.
    const rawDownload = async (round: number, fsync: boolean): Promise<number> => {
      const rawDir = join(dir.path, `raw-${round}`)
      await mkdir(rawDir)
      const t0 = performance.now()
      let next = 0
      await Promise.all(Array.from({ length: Math.min(opts.concurrency, objects.length) }, async () => {
        while (next < objects.length) {
          const o = objects[next++]!
          const response = await s3.admin.send(new GetObjectCommand({ Bucket: s3.bucket, Key: o.key }))
          const path = join(rawDir, o.key.replaceAll('/', '_'))
          await pipeline(response.Body as Readable, createWriteStream(path))
          if (fsync) {
            const handle = await open(path, 'r+')
            await handle.sync()
            await handle.close()
          }
        }
      }))
      const seconds = (performance.now() - t0) / 1000
      await rm(rawDir, { recursive: true, force: true })
      return seconds
    }
    let progressCalls = 0
    let result: RestoreResult | undefined
    const restoreOnce = async (round: number, fsync: boolean): Promise<number> => {
      const target = join(dir.path, `restored-${round}`)
      result = await restoreSnapshot({
        snapshotStore, job: 'bench', partition: 0, target, downloadConcurrency: opts.concurrency, fsync,
        onProgress: () => { progressCalls++ },
      })
      await rm(target, { recursive: true, force: true })
      return result.durationMs / 1000
    }

    const times = { restore: [] as number[], raw: [] as number[], restoreNoFsync: [] as number[], rawNoFsync: [] as number[] }
    for (let r = 0; r < opts.rounds; r++) {
      peaks.phase('rawDownload')
      times.raw.push(await rawDownload(r, true))
      peaks.phase('restore')
      times.restore.push(await restoreOnce(r, true))
      peaks.phase('rawDownload')
      times.rawNoFsync.push(await rawDownload(r, false))
      peaks.phase('restore')
      times.restoreNoFsync.push(await restoreOnce(r, false))
    }
    const peakRssMBByPhase = peaks.stop()

    const best = (xs: number[]): number => Math.min(...xs)
    emit({
      bench: 'restore',
      stateBytes: manifest.stateBytes,
      objects: objects.length,
      objectBytes: objects.reduce((sum, o) => sum + o.size, 0),
      bytesDownloaded: result!.bytesDownloaded,
      restoredSnapshot: result!.snapshot?.id,
      expectedSnapshot: snapshot.id,
      restoreSeconds: round(best(times.restore), 2),
      rawDownloadSeconds: round(best(times.raw), 2),
      ratio: round(best(times.restore) / best(times.raw)),
      restoreSecondsNoFsync: round(best(times.restoreNoFsync), 2),
      rawDownloadSecondsNoFsync: round(best(times.rawNoFsync), 2),
      ratioNoFsync: round(best(times.restoreNoFsync) / best(times.rawNoFsync)),
      all: Object.fromEntries(Object.entries(times).map(([k, v]) => [k, v.map((x) => round(x, 2))])),
      concurrency: opts.concurrency,
      progressCalls,
      peakRssMB: peakRssMB(),
      peakRssMBByPhase,
    })
  } finally {
    await s3.close()
    dir.cleanup()
  }
}
