/**
 * Restore of the store that bench/snapshot.ts generates (--mb MiB, default
 * 1100) from S3: a full snapshot, then an incremental one after
 * --changePercent of the keys changed; the restore reads the files of the
 * newest one (from both snapshots' objects), verifies every SHA-256, fsyncs
 * every file, and opens the result. rawDownloadSeconds GETs the same objects
 * whole, in parallel with the same concurrency, into files that it fsyncs
 * too, in the same run. The same pair without fsync is reported beside.
 * --rounds interleaved pairs (raw, restore); ratio is the median of the
 * per-pair ratios restore / raw, with min and max.
 *
 * The peer's method (Kafka Streams): the same state rebuilt by replaying a
 * compacted changelog, one record per key-value of the store (as LevelDB
 * holds them), kept in the embedded file log, into a fresh LevelDB in
 * batches of 1000 (a restore consumer's max.poll.records), closed at the
 * end so that everything is written. changelogRatio = changelogSeconds /
 * the median restore. --size-mb is the same as --mb.
 */
import { createWriteStream } from 'node:fs'
import { mkdir, open, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { GetObjectCommand } from '@aws-sdk/client-s3'
import { RESTORE_DEFAULTS, restoreSnapshot, Snapshotter, type RestoreResult } from '../src/index.js'
import { benchDir, emit, interleaved, intFlags, loadAvg, median, pairedRatio, prefixed, round } from './_util.js'
import { ClassicLevel } from 'classic-level'
import { openFileLog } from '../src/log/index.js'
import { benchS3, changeKeys, generateStore, peakRssMB, phasePeaks } from './snapshot.js'

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { mb: 1100, 'size-mb': 0, valueBytes: 1000, changePercent: 1, rounds: 3, concurrency: RESTORE_DEFAULTS.downloadConcurrency })
  if (opts['size-mb'] > 0) opts.mb = opts['size-mb']
  const loadAtStart = loadAvg()
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
    peaks.phase('changelog')
    const changelog = await writeChangelog(g.store.path, join(dir.path, 'changelog'))
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

    const withFsync = await interleaved(opts.rounds, async (r) => {
      peaks.phase('rawDownload')
      return rawDownload(r, true)
    }, async (r) => {
      peaks.phase('restore')
      return restoreOnce(r, true)
    }, (raw, restore) => restore / raw)
    const noFsync = await interleaved(opts.rounds, (r) => rawDownload(r, false), (r) => restoreOnce(r, false), (raw, restore) => restore / raw)
    peaks.phase('changelogRebuild')
    const changelogSeconds = await rebuildFromChangelog(changelog, join(dir.path, 'rebuilt'))
    const peakRssMBByPhase = peaks.stop()

    emit({
      bench: 'restore',
      baseline: 'GetObject of the same objects whole, at the same concurrency, into files, each fsynced',
      loadAvg: loadAtStart,
      stateBytes: manifest.stateBytes,
      objects: objects.length,
      objectBytes: objects.reduce((sum, o) => sum + o.size, 0),
      bytesDownloaded: result!.bytesDownloaded,
      restoredSnapshot: result!.snapshot?.id,
      expectedSnapshot: snapshot.id,
      restoreSeconds: round(median(withFsync.measured), 2),
      rawDownloadSeconds: round(median(withFsync.raw), 2),
      ...pairedRatio(withFsync.ratios),
      restoreSecondsNoFsync: round(median(noFsync.measured), 2),
      rawDownloadSecondsNoFsync: round(median(noFsync.raw), 2),
      ...prefixed('ratioNoFsync', pairedRatio(noFsync.ratios)),
      changelogRecords: changelog.records,
      changelogSeconds: round(changelogSeconds, 2),
      changelogRatio: round(changelogSeconds / median(withFsync.measured), 2),
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

/** A compacted changelog of the store: one record per key-value, as LevelDB holds them, in the embedded file log. */
async function writeChangelog(storePath: string, logPath: string): Promise<{ path: string; records: number }> {
  const db = new ClassicLevel<Buffer, Buffer>(storePath, { keyEncoding: 'buffer', valueEncoding: 'buffer' })
  await db.open()
  const log = await openFileLog(logPath, { sync: false })
  let records = 0
  let pending: Array<Promise<bigint>> = []
  for await (const [key, value] of db.iterator()) {
    const record = Buffer.allocUnsafe(4 + key.length + value.length)
    record.writeUInt32LE(key.length, 0)
    key.copy(record, 4)
    value.copy(record, 4 + key.length)
    pending.push(log.append(record))
    records++
    if (pending.length >= 1000) {
      await Promise.all(pending)
      pending = []
    }
  }
  await Promise.all(pending)
  await log.close()
  await db.close()
  return { path: logPath, records }
}

/** Kafka Streams' restore: read the changelog from its start and put every record into a fresh store, in batches. */
async function rebuildFromChangelog(changelog: { path: string }, target: string): Promise<number> {
  const t0 = performance.now()
  const log = await openFileLog(changelog.path, { readOnly: true })
  const db = new ClassicLevel<Buffer, Buffer>(target, { keyEncoding: 'buffer', valueEncoding: 'buffer' })
  await db.open()
  let batch = db.batch()
  for await (const entries of log.readBatches(0n)) {
    for (const { data } of entries) {
      const record = Buffer.from(data.buffer, data.byteOffset, data.byteLength)
      const keyLength = record.readUInt32LE(0)
      batch.put(record.subarray(4, 4 + keyLength), record.subarray(4 + keyLength))
      if (batch.length >= 1000) {
        await batch.write()
        batch = db.batch()
      }
    }
  }
  if (batch.length > 0) await batch.write()
  else await batch.close()
  await db.close()
  await log.close()
  const seconds = (performance.now() - t0) / 1000
  await rm(target, { recursive: true, force: true })
  return seconds
}
