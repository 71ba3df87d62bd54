/**
 * A process that does one measured thing and reports its own peak RSS.
 *
 * The memory targets of `restore`, `partitions` and `replay` are read here, in a fresh
 * process, instead of from the bench's own: RSS that a process once reached
 * stays counted (the allocator keeps what it freed), so a phase's peak there
 * starts from whatever the phases before it left. In the restore bench the
 * restore phase began at the 258 MB that generating and snapshotting the
 * store had left (Node 26; 219 MB on Node 20, where the same restore
 * measured 219), and in the partitions bench the plain PutObject rounds,
 * which read 16 files whole at a time, left 376-401 MB before each
 * snapshot round. Neither figure was the restore's or the snapshot's.
 *
 * measureInChild() spawns this file with a JSON job; the child prints one
 * JSON line: { peakRssMB, bytes | events }. The raw baselines run the same way, so
 * that each side's peak is its own.
 */
import { spawn } from 'node:child_process'
import { createWriteStream, readFileSync } from 'node:fs'
import { mkdir, open, readFile, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { fileURLToPath } from 'node:url'
import { GetObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3'
import { S3SnapshotStore } from '../connectors/s3/index.js'
import { FsSnapshotStore, openFileLog, PartitionStore, restoreSnapshot, Snapshotter, valueState, rawCodec } from '../src/index.js'
import { replayProcessor } from './_replay-owner.js'

export interface ChildS3 {
  endpoint: string
  region: string
  credentials: { accessKeyId: string; secretAccessKey: string }
  bucket: string
}

export type ChildJob =
  /** restoreSnapshot() of each partition of `job` at once into target/p<N>, with the store's defaults. */
  | { kind: 'restore'; s3: ChildS3; prefix: string; job: string; partitions: number; target: string; fsync?: boolean; downloadConcurrency?: number; maxConcurrentDownloads?: number }
  /** A full snapshot of each store at once under `job`, one Snapshotter per store, as partitions.ts's snapshot rounds. */
  | { kind: 'snapshot'; s3: ChildS3; prefix: string; job: string; stores: string[]; maxConcurrentUploads?: number }
  /** Plain GetObject of each key whole into a file (fsynced), `concurrency` at a time. */
  | { kind: 'rawGet'; s3: ChildS3; keys: string[]; target: string; concurrency: number }
  /** Plain PutObject of each file, read whole, `concurrency` at a time, under raw-rss/. */
  | { kind: 'rawPut'; s3: ChildS3; files: string[]; concurrency: number }
  /** The replay bench's new owner (bench/replay.ts): restores from the file-system store and replays the file log read-only. */
  | { kind: 'replay'; log: string; snapshots: string; path: string; batch: number; replayBatch: number }

export interface ChildResult {
  peakRssMB: number
  /** Bytes moved (the S3 jobs). */
  bytes?: number
  /** Events replayed (replay). */
  events?: number
}

const kv = valueState('kv', { codec: rawCodec() })
const CHILD = fileURLToPath(import.meta.url)

/** Runs `job` in a fresh process (this file, with the bench's own loader) and returns what it reports. */
export function measureInChild(job: ChildJob): Promise<ChildResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...process.execArgv, CHILD, JSON.stringify(job)], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
    child.on('error', reject)
    child.on('close', (code, signal) => {
      const line = out.trim().split('\n').pop() ?? ''
      if (code !== 0) return reject(new Error(`rss child (${job.kind}) exited with ${code ?? signal}: ${out}`))
      try {
        resolve(JSON.parse(line) as ChildResult)
      } catch (err) {
        reject(new Error(`rss child (${job.kind}) printed no result: ${out}`, { cause: err }))
      }
    })
  })
}

function snapshotStoreOf(s3: ChildS3, prefix: string, limits: { maxConcurrentUploads?: number; maxConcurrentDownloads?: number }): S3SnapshotStore {
  return new S3SnapshotStore({ endpoint: s3.endpoint, region: s3.region, forcePathStyle: true, credentials: s3.credentials, bucket: s3.bucket, prefix, ...limits })
}

async function runJob(job: ChildJob): Promise<Omit<ChildResult, 'peakRssMB'>> {
  switch (job.kind) {
    case 'restore': {
      const store = snapshotStoreOf(job.s3, job.prefix, job.maxConcurrentDownloads === undefined ? {} : { maxConcurrentDownloads: job.maxConcurrentDownloads })
      try {
        const results = await Promise.all(Array.from({ length: job.partitions }, (_, p) => restoreSnapshot({
          snapshotStore: store, job: job.job, partition: p, target: join(job.target, `p${p}`),
          ...(job.fsync === undefined ? {} : { fsync: job.fsync }),
          ...(job.downloadConcurrency === undefined ? {} : { downloadConcurrency: job.downloadConcurrency }),
        })))
        return { bytes: results.reduce((sum, r) => sum + r.bytesDownloaded, 0) }
      } finally {
        await store.close()
        await rm(job.target, { recursive: true, force: true })
      }
    }
    case 'snapshot': {
      const store = snapshotStoreOf(job.s3, job.prefix, job.maxConcurrentUploads === undefined ? {} : { maxConcurrentUploads: job.maxConcurrentUploads })
      const stores = await Promise.all(job.stores.map((path) => PartitionStore.open({ path, states: [kv] })))
      try {
        const snapshotters = stores.map((partitionStore, p) => new Snapshotter({ snapshotStore: store, partitionStore, job: job.job, partition: p }))
        const results = await Promise.all(snapshotters.map((s) => s.takeSnapshot()))
        await Promise.all(snapshotters.map((s) => s.close()))
        return { bytes: results.reduce((sum, r) => sum + r.bytesUploaded, 0) }
      } finally {
        await Promise.all(stores.map((s) => s.close()))
        await store.close()
      }
    }
    case 'rawGet': {
      const client = new S3Client({ endpoint: job.s3.endpoint, region: job.s3.region, forcePathStyle: true, credentials: job.s3.credentials })
      await mkdir(job.target, { recursive: true })
      let bytes = 0
      let next = 0
      try {
        await Promise.all(Array.from({ length: Math.min(job.concurrency, job.keys.length) }, async () => {
          while (next < job.keys.length) {
            const key = job.keys[next++]!
            const response = await client.send(new GetObjectCommand({ Bucket: job.s3.bucket, Key: key }))
            const path = join(job.target, key.replaceAll('/', '_'))
            await pipeline(response.Body as Readable, createWriteStream(path))
            const handle = await open(path, 'r+')
            bytes += (await handle.stat()).size
            await handle.sync()
            await handle.close()
          }
        }))
      } finally {
        client.destroy()
        await rm(job.target, { recursive: true, force: true })
      }
      return { bytes }
    }
    case 'replay': {
      const log = await openFileLog(job.log, { readOnly: true })
      const owner = replayProcessor(log, new FsSnapshotStore({ root: job.snapshots }), job.path, job)
      try {
        const started = await owner.start()
        if (started.source !== 'snapshot') throw new Error(`expected a restore from the snapshot, got ${started.source}`)
        return { events: await owner.catchUp() }
      } finally {
        await owner.close()
        await log.close()
        await rm(job.path, { recursive: true, force: true })
      }
    }
    case 'rawPut': {
      const client = new S3Client({ endpoint: job.s3.endpoint, region: job.s3.region, forcePathStyle: true, credentials: job.s3.credentials })
      let bytes = 0
      let next = 0
      try {
        await Promise.all(Array.from({ length: Math.min(job.concurrency, job.files.length) }, async () => {
          while (next < job.files.length) {
            const i = next++
            const body = await readFile(job.files[i]!)
            bytes += body.length
            await client.send(new PutObjectCommand({ Bucket: job.s3.bucket, Key: `raw-rss/${i}`, Body: body }))
          }
        }))
      } finally {
        client.destroy()
      }
      return { bytes }
    }
  }
}

if (process.argv[1] === CHILD) {
  const job = JSON.parse(process.argv[2] ?? '') as ChildJob
  const counts = await runJob(job)
  // VmHWM, the high-water mark of this process's own memory map: getrusage's
  // maxRSS is kept across execve on Linux, and the forked child's copy of the
  // bench's page tables before the exec counted in it (three different jobs
  // all reported the bench's 240 MB).
  const hwm = Number(/VmHWM:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1])
  if (!Number.isFinite(hwm) || hwm <= 0) throw new Error('no VmHWM in /proc/self/status')
  const result: ChildResult = { peakRssMB: Math.round(hwm / 102.4) / 10, ...counts }
  process.stdout.write(`${JSON.stringify(result)}\n`)
}
