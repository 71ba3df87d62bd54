/**
 * Restore of the store that bench/snapshot.ts generates (--mb MiB, default
 * 1100) from S3: a full snapshot, then an incremental one after
 * --changePercent of the keys changed; the restore reads the files of the
 * newest one (from both snapshots' objects), verifies every SHA-256, fsyncs
 * every file, and opens the result. rawDownloadSeconds GETs the same objects
 * whole, in parallel with the same concurrency, into files that it fsyncs
 * too, in the same run. The same pair without fsync is reported beside.
 * --rounds interleaved pairs (raw, restore), after one untimed pair; ratio
 * is the median of the per-pair ratios restore / raw, with min and max.
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
import { Kafka, logLevel, type Message } from 'kafkajs'
import { openFileLog } from '../src/log/index.js'
import { benchKafka, benchProducer, type BenchKafka } from './_kafka.js'
import { saveFigures } from './_figures.js'
import { measureInChild } from './_rss-child.js'
import { benchS3, changeKeys, generateStore, peakRssMB, phasePeaks } from './snapshot.js'

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { mb: 1100, 'size-mb': 0, valueBytes: 1000, changePercent: 1, rounds: 3, concurrency: RESTORE_DEFAULTS.downloadConcurrency })
  if (opts['size-mb'] > 0) opts.mb = opts['size-mb']
  const loadAtStart = loadAvg()
  const dir = benchDir('restore')
  const s3 = await benchS3('bench-restore')
  let kafka: BenchKafka | undefined
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

    const manifest = (await snapshotter.latest())!
    const objects = manifest.objects.map((o) => ({ key: `${s3.store('job').options.prefix}bench/0/${o.key}`, size: o.size }))

    // Raw: each object GET into a file, fsynced when the restore fsyncs too,
    // so that both leave the same durable bytes.
    // CPU seconds of this process per side: on a busy 2-core machine a ratio follows them.
    const cpu = { raw: [] as number[], restore: [] as number[] }
    const cpuSeconds = (since: NodeJS.CpuUsage): number => { const u = process.cpuUsage(since); return (u.user + u.system) / 1e6 }
    const rawDownload = async (round: number, fsync: boolean): Promise<number> => {
      const rawDir = join(dir.path, `raw-${round}`)
      await mkdir(rawDir)
      const cpu0 = process.cpuUsage()
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
      if (fsync) cpu.raw.push(cpuSeconds(cpu0))
      await rm(rawDir, { recursive: true, force: true })
      return seconds
    }
    let progressCalls = 0
    let restored: RestoreResult | undefined
    const restoreOnce = async (round: number, fsync: boolean): Promise<number> => {
      const target = join(dir.path, `restored-${round}`)
      const cpu0 = process.cpuUsage()
      restored = await restoreSnapshot({
        snapshotStore, job: 'bench', partition: 0, target, downloadConcurrency: opts.concurrency, fsync,
        onProgress: () => { progressCalls++ },
      })
      if (fsync) cpu.restore.push(cpuSeconds(cpu0))
      await rm(target, { recursive: true, force: true })
      return restored.durationMs / 1000
    }

    // Raw and restore pairs, each side under its own memory phase.
    const pairs = (fsync: boolean, suffix: string) => interleaved(opts.rounds, async (r) => {
      peaks.phase(`rawDownload${suffix}`)
      return rawDownload(r, fsync)
    }, async (r) => {
      peaks.phase(`restore${suffix}`)
      return restoreOnce(r, fsync)
    }, (raw, restore) => restore / raw)
    // One untimed pair first: the first restore of a process starts the
    // writer thread, opens the restore client's connections and compiles
    // the tar path, which the plain download (its client warmed by the
    // setup) does not pay; its first pair was the highest in every run.
    await rawDownload(-1, true)
    await restoreOnce(-1, true)
    cpu.raw.length = 0
    cpu.restore.length = 0
    const withFsync = await pairs(true, '')
    const noFsync = await pairs(false, 'NoFsync')
    // The memory target: each side alone in a fresh process (bench/_rss-child.ts
    // says why this process's phases cannot tell it).
    const childS3 = { endpoint: s3.endpoint, region: s3.region, credentials: s3.credentials, bucket: s3.bucket }
    const restoreRss = await measureInChild({ kind: 'restore', s3: childS3, prefix: 'job', job: 'bench', partitions: 1, target: join(dir.path, 'rss-restore'), downloadConcurrency: opts.concurrency })
    const rawRss = await measureInChild({ kind: 'rawGet', s3: childS3, keys: objects.map((o) => o.key), target: join(dir.path, 'rss-raw'), concurrency: opts.concurrency })
    if (restoreRss.bytes !== restored!.bytesDownloaded) throw new Error(`the measured restore downloaded ${restoreRss.bytes} bytes, the timed ones ${restored!.bytesDownloaded}`)
    // The changelog for the Kafka Streams way, written after the restore
    // rounds: producing it grows this process to over 1 GB, and what the
    // allocator keeps of that would count in the restore phases' RSS (their
    // plain-download baseline too) if they ran after it.
    peaks.phase('changelog')
    const changelog = await writeChangelog(g.store.path, join(dir.path, 'changelog'))
    kafka = benchKafka(join(dir.path, 'kafka-mock'))
    const kafkaChangelog = await fillKafkaChangelog(kafka.brokers, `bench-restore-changelog-${process.pid}-${Date.now().toString(36)}`, g.store.path)
    await rm(g.store.path, { recursive: true, force: true })
    peaks.phase('changelogFileRebuild')
    const changelogFileSeconds = await rebuildFromChangelog(changelog, join(dir.path, 'rebuilt'))
    peaks.phase('changelogRebuild')
    const changelogSeconds = await rebuildFromKafkaChangelog(kafka.brokers, kafkaChangelog, join(dir.path, 'rebuilt'), CHANGELOG_FETCH)
    const peakRssMBByPhase = peaks.stop()
    const restoreSeconds = median(withFsync.measured)

    const result = {
      bench: 'restore',
      baseline: 'GetObject of the same objects whole, at the same concurrency, into files, each fsynced',
      loadAvg: loadAtStart,
      stateBytes: manifest.stateBytes,
      objects: objects.length,
      objectBytes: objects.reduce((sum, o) => sum + o.size, 0),
      bytesDownloaded: restored!.bytesDownloaded,
      restoredSnapshot: restored!.snapshot?.id,
      expectedSnapshot: snapshot.id,
      restoreSeconds: round(restoreSeconds, 2),
      rawDownloadSeconds: round(median(withFsync.raw), 2),
      restoreCpuSeconds: round(median(cpu.restore), 2),
      rawDownloadCpuSeconds: round(median(cpu.raw), 2),
      ...pairedRatio(withFsync.ratios),
      restoreSecondsNoFsync: round(median(noFsync.measured), 2),
      rawDownloadSecondsNoFsync: round(median(noFsync.raw), 2),
      ...prefixed('ratioNoFsync', pairedRatio(noFsync.ratios)),
      changelogRecords: kafkaChangelog.records,
      changelogSeconds: round(changelogSeconds, 2),
      changelogRatio: round(changelogSeconds / restoreSeconds, 2),
      changelog: `Kafka (librdkafka mock), ${kafkaChangelog.topics.length * MOCK_PARTITIONS_PER_TOPIC} partitions of <= ${PARTITION_BYTES / MiB} MiB; kafkajs consumer, maxBytesPerPartition ${CHANGELOG_FETCH.maxBytesPerPartition / MiB} MiB, maxBytes ${CHANGELOG_FETCH.maxBytes / MiB} MiB; LevelDB batches of <= 1000`,
      changelogFileSeconds: round(changelogFileSeconds, 2),
      changelogFileRatio: round(changelogFileSeconds / restoreSeconds, 2),
      concurrency: opts.concurrency,
      progressCalls,
      // A process that only restores (fsynced, this concurrency), and one that only downloads the same objects.
      peakRssMB: restoreRss.peakRssMB,
      rawPeakRssMB: rawRss.peakRssMB,
      // This process's phases, for information: each starts from what the ones before it left.
      inProcessPeakRssMB: Math.max(peakRssMBByPhase.restore ?? 0, peakRssMBByPhase.restoreNoFsync ?? 0),
      processPeakRssMB: peakRssMB(),
      peakRssMBByPhase,
    }
    emit(result)
    saveFigures('restore', args, result)
  } finally {
    kafka?.stop()
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

/**
 * librdkafka's mock cluster keeps at most 5 MiB (or 100,000 record batches)
 * per partition and drops the oldest beyond that (rdkafka_mock.c), and it
 * makes every topic with 4 partitions. So the changelog is spread over as
 * many partitions of as many topics as it needs, each filled to
 * PARTITION_BYTES; a fetch then returns a record batch of each of many
 * partitions (the mock answers one batch per partition per fetch), which
 * reads faster than one partition would: in the peer's favour.
 */
const MOCK_PARTITIONS_PER_TOPIC = 4
const PARTITION_BYTES = 4 * 1024 * 1024
/** Records per produce request: one record batch, about 1 MiB with 1000-byte values. */
const FILL_BATCH = 1000
const MiB = 1024 * 1024
/**
 * Kafka's consumer defaults (max.partition.fetch.bytes 1 MiB, fetch.max.bytes
 * 50 MiB): the fastest of those tried with kafkajs here (1/10, 1/50 and
 * 8/50 MiB; 8 MiB per partition changes nothing, as the mock answers one
 * record batch per partition and fetch).
 */
const CHANGELOG_FETCH: FetchSizes = { maxBytesPerPartition: 1 * MiB, maxBytes: 50 * MiB }
/** Produce requests in flight while the topics fill (each to its own partition). */
const FILL_IN_FLIGHT = 4

export interface KafkaChangelog {
  topics: string[]
  records: number
  bytes: number
}

/**
 * A compacted changelog of the store in Kafka: one record per key-value as
 * LevelDB holds them (every key once, so compaction has nothing to remove),
 * in key order, partition after partition. Filled before any clock.
 */
export async function fillKafkaChangelog(brokers: string[], prefix: string, storePath: string): Promise<KafkaChangelog> {
  const { producer } = await benchProducer(brokers)
  const db = new ClassicLevel<Buffer, Buffer>(storePath, { keyEncoding: 'buffer', valueEncoding: 'buffer' })
  await db.open()
  const topics: string[] = []
  let records = 0
  let bytes = 0
  let slot = -1
  let slotBytes = PARTITION_BYTES
  const inFlight = new Set<Promise<void>>()
  const send = async (topic: string, partition: number, messages: Message[]): Promise<void> => {
    while (inFlight.size >= FILL_IN_FLIGHT) await Promise.race(inFlight)
    const sent = producer.send({ topic, acks: 1, messages: messages.map((m) => ({ ...m, partition })) }).then(() => { inFlight.delete(sent) })
    inFlight.add(sent)
  }
  try {
    let messages: Message[] = []
    let batchBytes = 0
    const flush = async (): Promise<void> => {
      if (slotBytes + batchBytes > PARTITION_BYTES) {
        slot++
        slotBytes = 0
        if (slot % MOCK_PARTITIONS_PER_TOPIC === 0) topics.push(`${prefix}-${topics.length}`)
      }
      slotBytes += batchBytes
      await send(topics.at(-1)!, slot % MOCK_PARTITIONS_PER_TOPIC, messages)
      messages = []
      batchBytes = 0
    }
    for await (const [key, value] of db.iterator()) {
      messages.push({ key, value })
      records++
      bytes += key.length + value.length
      batchBytes += key.length + value.length
      if (messages.length === FILL_BATCH) await flush()
    }
    if (messages.length > 0) await flush()
    await Promise.all(inFlight)
  } finally {
    await db.close()
    await producer.disconnect()
  }
  return { topics, records, bytes }
}

/** How the restore consumer fetches: kafkajs's defaults are 1 MiB per partition and 10 MiB per fetch. */
export interface FetchSizes {
  maxBytesPerPartition: number
  maxBytes: number
}

/**
 * Kafka Streams' restore: a consumer reads the changelog from its start
 * and puts the records into a fresh LevelDB in batches of up to 1000 (the
 * restore consumer's max.poll.records), each batch written before the
 * next; the store is closed at the end, so everything is written (no
 * fsync, as RocksDB's restore does not sync either). The clock starts when
 * the consumer has joined its group (Kafka Streams' restore consumer is
 * assigned its partitions without a group join) and stops when the store
 * is closed. Nothing is committed: a restore consumer commits no offsets.
 */
export async function rebuildFromKafkaChangelog(brokers: string[], changelog: KafkaChangelog, target: string, fetch: FetchSizes): Promise<number> {
  const kafka = new Kafka({ brokers, clientId: 'bench-changelog-restore', logLevel: logLevel.NOTHING })
  const consumer = kafka.consumer({ groupId: `${changelog.topics[0]!}-restore-${Date.now().toString(36)}`, ...fetch, minBytes: 1, maxWaitTimeInMs: 100 })
  const db = new ClassicLevel<Buffer, Buffer>(target, { keyEncoding: 'buffer', valueEncoding: 'buffer' })
  await db.open()
  let t0 = 0
  consumer.on(consumer.events.GROUP_JOIN, () => { t0 = performance.now() })
  let restored = 0
  let finish!: () => void
  let fail!: (err: unknown) => void
  const finished = new Promise<void>((resolve, reject) => { finish = resolve; fail = reject })
  try {
    await consumer.connect()
    await consumer.subscribe({ topics: changelog.topics, fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        try {
          const messages = batch.messages
          for (let i = 0; i < messages.length; i += 1000) {
            const ops = messages.slice(i, i + 1000).map((m) => ({ type: 'put' as const, key: m.key!, value: m.value! }))
            await db.batch(ops)
            restored += ops.length
          }
          if (restored >= changelog.records) finish()
        } catch (err) {
          fail(err)
          throw err
        }
      },
    })
    await finished
    await db.close()
    const seconds = (performance.now() - t0) / 1000
    if (restored !== changelog.records) throw new Error(`the changelog restore put ${restored} records, the changelog holds ${changelog.records}`)
    return seconds
  } finally {
    await consumer.disconnect()
    if (db.status === 'open') await db.close()
    await rm(target, { recursive: true, force: true })
  }
}
