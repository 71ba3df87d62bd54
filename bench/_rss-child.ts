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
import { readFileSync } from 'node:fs'
import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { S3Client } from '@aws-sdk/client-s3'
import { S3SnapshotStore } from '../connectors/s3/index.js'
import { FsSnapshotStore, openFileLog, PartitionStore, restoreSnapshot } from '../src/index.js'
import { replayProcessor } from './_replay-owner.js'
import { kv, rawGet, rawPut, snapshotEach } from './snapshot.js'

export interface ChildS3 {
  endpoint: string
  region: string
  credentials: { accessKeyId: string; secretAccessKey: string }
  bucket: string
}

export type ChildJob =
  /** restoreSnapshot() of each partition of `job` at once into target/p<N>, with the store's defaults. */
  | { kind: 'restore'; s3: ChildS3; prefix: string; job: string; partitions: number; target: string; fsync?: boolean; downloadConcurrency?: number; maxConcurrentDownloads?: number }
  /** snapshotEach() of bench/snapshot.ts: a full snapshot of each store at once under `job`, as partitions.ts's snapshot rounds. */
  | { kind: 'snapshot'; s3: ChildS3; prefix: string; job: string; stores: string[]; maxConcurrentUploads?: number }
  /** rawGet() of bench/snapshot.ts: each key whole into a file in `target` (fsynced), `concurrency` at a time. */
  | { kind: 'rawGet'; s3: ChildS3; keys: string[]; target: string; concurrency: number }
  /** rawPut() of bench/snapshot.ts: each file `dir`/`names[i]`, read whole, `concurrency` at a time. */
  | { kind: 'rawPut'; s3: ChildS3; dir: string; names: string[]; concurrency: number }
  /** The replay bench's new owner (bench/replay.ts): restores from the file-system store and replays the file log read-only. */
  | { kind: 'replay'; log: string; snapshots: string; path: string; batch: number; replayBatch: number }

export interface ChildResult {
  peakRssMB: number
  /** Bytes moved (the S3 jobs). */
  bytes?: number
  /** Events replayed (replay). */
  events?: number
}

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

function clientOf(s3: ChildS3): S3Client {
  return new S3Client({ endpoint: s3.endpoint, region: s3.region, forcePathStyle: true, credentials: s3.credentials })
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
        return { bytes: (await snapshotEach(store, stores, job.job)).bytes }
      } finally {
        await Promise.all(stores.map((s) => s.close()))
        await store.close()
      }
    }
    case 'rawGet': {
      const admin = clientOf(job.s3)
      try {
        return { bytes: (await rawGet({ bucket: job.s3.bucket, admin }, job.keys, job.target, job.concurrency)).bytes }
      } finally {
        admin.destroy()
      }
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
      const admin = clientOf(job.s3)
      try {
        return { bytes: (await rawPut({ bucket: job.s3.bucket, admin }, admin, job.dir, job.names, job.concurrency)).bytes }
      } finally {
        admin.destroy()
      }
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
