/**
 * Many small partitions in one process, on the default store budget
 * (issue 38): --partitions PartitionProcessors (default 1024) on the file
 * log, one log and one store each, snapshots to a file-system store on the
 * default schedule, their claims held by one member lease.
 *
 *   npm run bench -- many [--partitions 1024] [--mb 4] [--value-bytes 1000] [--rate 5000] [--seconds 20] [--rounds 3] [--interval-ms 5000]
 *
 * Each partition is first filled with --mb MiB of state (events of
 * --value-bytes, one key each) and its processor catches up; the run then
 * waits until every partition has a snapshot of its whole fill
 * (`drainSeconds`: the catch-up made all of them due at once, and the
 * pacer starts 16 per interval). Then --rounds
 * interleaved pairs of --seconds windows write the same total event rate
 * (--rate events/s, keys at random within each partition's, so the state
 * stays its size): over every partition (`many`), and over the first 16
 * only (`few`, the others idle meanwhile). manyRatio is the median of the
 * per-pair ratios of the aggregate commit rates (the window's events over
 * the seconds from its start until the last of them committed; the time
 * after its appends is `manyLagMs` / `fewLagMs`): 1 when the process keeps
 * up with the rate whatever the partition count. The rate is a quarter of the 20,000 events/s of
 * 1 KB it was, meant to be within what both sides sustain on the 2-core
 * machine the figures come from (`manyCommitRate` and `fewCommitRate` say
 * whether they did): at 20,000
 * neither kept up (4,800 to 17,000 committed a second, falling from round to
 * round), LevelDB's one compaction thread of the process was the limit of
 * both (a memtable of a 64 KiB share rewrites a 4 MiB partition's level 1
 * about every 4 flushes), and the ratio swung from 0.4 to 14 with whichever
 * side met the compaction debt the other left.
 *
 * snapshotRequestsRatio: the snapshot store's requests (every kind, as
 * bench/_counting-store.ts counts them; `requestShapes` names the most
 * frequent, by kind and key with numbers as #) per minute in the `many` windows
 * over those in the `few` windows, each side's windows summed.
 * The processors run the default schedule scaled down in time: its
 * `intervalMs` is --interval-ms (5 s) instead of 5 minutes, so that each
 * window holds several intervals and the figure is the steady state's
 * rather than wherever the first interval snapshots after the fill happen
 * to fall (they came after the windows, or in one side's only). The
 * process's pacer gives time-based snapshots `slots` turns per `intervalMs`
 * whatever the interval, so the ratio is the one of the 5-minute schedule;
 * `everyBytes` (256 MiB) is not reached in a window on either side. Every
 * processor is open in both windows, so both count the claims' checks and
 * the lease of all of them: this compares one process's requests as its
 * writes spread, not against a process that holds only 16 partitions.
 * `snapshotsTaken` and `fewSnapshotsTaken` count each side's snapshots.
 *
 * peakRssMB is the process's peak RSS (getrusage); `peakRssMBByPhase` the
 * highest RSS in each phase (the fill's appends, the processors' start and
 * catch-up of their backlogs, the drain of the snapshots the catch-up
 * made due, the windows), sampled as the snapshot bench
 * does (phasePeaks).
 * `memoryAtPeakMB`: process.memoryUsage() at each phase's highest RSS
 * (V8's heap, the buffers; the rest of the RSS is native, mostly LevelDB).
 * openFdsMax is the most open file descriptors, sampled every 100 ms
 * (`openFdsMaxByPhase`; storeFdsMax: those on the partition stores' files,
 * `storeFdsByKind` at their most: tables, write-ahead logs, MANIFEST, LOCK,
 * LOG; logFdsMax: on the logs' segments). The budget's share and how many stores had their LevelDB
 * open are reported at the end.
 */
import { setMaxListeners } from 'node:events'
import { readdirSync, readlinkSync } from 'node:fs'
import { join } from 'node:path'
import { defaultStoreBudget, FsSnapshotStore, openFileLog, PartitionProcessor, valueState, type FileLog } from '../src/index.js'
import { MemberLease } from '../src/ownership/index.js'
import { mapLimit } from '../src/util/index.js'
import { CountingStore, getClass, putClass, type RequestCounts } from './_counting-store.js'
import { saveFigures } from './_figures.js'
import { benchDir, emit, intFlags, loadAvg, pairedRatio, prefixed, rng, round } from './_util.js'
import { peakRssMB, phasePeaks } from './snapshot.js'

const MiB = 1024 * 1024
const FEW = 16
/** Events per append while filling: one append per event took an hour for 1,024 × 4 MiB. */
const FILL_BATCH = 500
const rows = valueState<string>('rows')

interface Row { k: number; v: number }

interface Partition {
  log: FileLog
  processor: PartitionProcessor<Row>
  keys: number
}

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { partitions: 1024, mb: 4, 'value-bytes': 1000, rate: 5000, seconds: 20, rounds: 3, 'interval-ms': 5000 })
  const loadAvgAtStart = loadAvg()
  const dir = benchDir('many')
  const random = rng(38)
  // A few hundred distinct values, each of value-bytes that do not compress to nothing.
  const values = Array.from({ length: 256 }, () => Array.from({ length: opts['value-bytes'] }, () => String.fromCharCode(97 + Math.floor(random() * 26))).join(''))
  const snapshots = new CountingStore(new FsSnapshotStore({ root: join(dir.path, 'snapshots') }))
  const requestsOf = (c: RequestCounts): number => putClass(c) + getClass(c)
  const lease = await MemberLease.start({ store: snapshots, job: 'many' })
  const sampled = sampleProcess(join(dir.path, 'stores'), join(dir.path, 'logs'))
  const parts: Partition[] = []
  const abort = new AbortController()
  // Every processor's run() listens to it.
  setMaxListeners(0, abort.signal)
  const running: Array<Promise<void>> = []
  let committed = 0
  // A window's wait for its own events' commits: resolved by the commit that reaches `until`.
  let windowCommitted: { until: number; resolve: () => void } | undefined
  let snapshotsTaken = 0
  // Partitions with a snapshot of their whole fill, and the wait for all of them (see `drainSeconds`).
  const caughtUp = new Set<number>()
  let drained = (): void => {}
  try {
    const keys = Math.max(1, Math.floor(opts.mb * MiB / opts['value-bytes']))
    const t0 = performance.now()
    for (let p = 0; p < opts.partitions; p++) {
      const log = await openFileLog(join(dir.path, 'logs', String(p)), { sync: false })
      const processor = new PartitionProcessor<Row>({
        job: 'many', topic: 'many', partition: p, log, path: join(dir.path, 'stores', String(p)), states: [rows],
        handler: (tx, row) => { tx.value(rows).put(`k${row.k}`, values[row.v]!) },
        snapshots: { store: snapshots, graceMs: 0, schedule: { intervalMs: opts['interval-ms'] } },
        ownership: { memberLease: lease },
      })
      processor.on('commit', ({ events }) => {
        committed += events
        if (windowCommitted !== undefined && committed >= windowCommitted.until) {
          windowCommitted.resolve()
          windowCommitted = undefined
        }
      })
      processor.on('snapshot', (r) => {
        snapshotsTaken++
        if (r.positions.some((at) => at.offset >= BigInt(keys - 1)) && caughtUp.add(p).size === opts.partitions) drained()
      })
      processor.on('snapshot-failed', (error) => process.stderr.write(`many: snapshot of ${p} failed: ${error.message}\n`))
      parts.push({ log, processor, keys })
    }
    // Filled through the log and the processors, as a partition's state grows.
    sampled.phase('fill')
    await mapLimit(parts, 8, async (part) => {
      for (let k = 0; k < part.keys; k += FILL_BATCH) {
        await part.log.appendAll(Array.from({ length: Math.min(FILL_BATCH, part.keys - k) }, (_, i) => encode({ k: k + i, v: (k + i) & 255 })))
      }
    })
    sampled.phase('catchUp')
    await mapLimit(parts, 8, (part) => part.processor.start())
    for (const part of parts) running.push(part.processor.run(abort.signal))
    await mapLimit(parts, 8, async (part) => {
      while ((part.processor.offset ?? -1n) < BigInt(part.keys - 1)) await new Promise((resolve) => setTimeout(resolve, 100))
    })
    const fillSeconds = (performance.now() - t0) / 1000
    // Every partition committed its catch-up and is due by time: the pacer
    // starts their snapshots `slots` per interval, minutes of them. The
    // windows compare the steady state, so they start when each partition
    // has a snapshot of its whole fill (before this wait, a window counted
    // the backlog's uploads as they completed, whichever side it fell in).
    sampled.phase('drain')
    const t1 = performance.now()
    await new Promise<void>((resolve) => {
      drained = resolve
      if (caughtUp.size === opts.partitions) resolve()
    })
    const drainSeconds = (performance.now() - t1) / 1000
    sampled.phase('windows')

    const window = async (targets: readonly Partition[], shapes: Map<string, number>): Promise<{ rate: number; written: number; lagMs: number; seconds: number; requests: number; snapshots: number }> => {
      const before = committed
      const snapshotsBefore = snapshotsTaken
      const requestsBefore = requestsOf(snapshots.counts)
      const logBefore = snapshots.log.length
      const start = performance.now()
      const end = start + opts.seconds * 1000
      let written = 0
      let next = 0
      // Every 10 ms, what the rate owes since the start, round-robin over the targets.
      while (performance.now() < end) {
        const owed = Math.floor(((performance.now() - start) / 1000) * opts.rate) - written
        const appends: Array<Promise<bigint>> = []
        for (let i = 0; i < owed; i++) {
          const part = targets[next++ % targets.length]!
          appends.push(part.log.append(encode({ k: Math.floor(random() * part.keys), v: Math.floor(random() * 256) })))
        }
        written += owed
        await Promise.all(appends)
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
      // The window ends when its own events are committed: a side that fell
      // behind pays its backlog in its own window. (Without this wait the
      // next window committed it and counted it as its own rate: the ratios
      // of one run went 0.652, 1.268, 0.651, each side lifted by the other's debt.)
      const appended = performance.now()
      if (committed - before < written) await new Promise<void>((resolve) => { windowCommitted = { until: before + written, resolve } })
      const lagMs = performance.now() - appended
      for (const line of snapshots.log.slice(logBefore)) {
        const shape = line.replace(/\d+/g, '#')
        shapes.set(shape, (shapes.get(shape) ?? 0) + 1)
      }
      const seconds = (performance.now() - start) / 1000
      return { rate: written / seconds, written, lagMs, seconds, requests: requestsOf(snapshots.counts) - requestsBefore, snapshots: snapshotsTaken - snapshotsBefore }
    }
    const many: number[] = []
    const few: number[] = []
    const ratios: number[] = []
    const requests = { many: 0, few: 0 }
    const lags = { many: [] as number[], few: [] as number[] }
    const elapsed = { many: 0, few: 0 }
    const taken = { many: 0, few: 0 }
    // Which requests they were: kind and key with every number as #.
    const shapes = { many: new Map<string, number>(), few: new Map<string, number>() }
    for (let r = 0; r < opts.rounds; r++) {
      const order = r % 2 === 0 ? ['few', 'many'] as const : ['many', 'few'] as const
      const rates: Record<string, number> = {}
      for (const side of order) {
        const w = await window(side === 'many' ? parts : parts.slice(0, FEW), shapes[side])
        rates[side] = w.rate
        requests[side] += w.requests
        lags[side].push(Math.round(w.lagMs))
        elapsed[side] += w.seconds
        taken[side] += w.snapshots
      }
      many.push(rates.many!)
      few.push(rates.few!)
      ratios.push(rates.many! / rates.few!)
    }
    const budget = defaultStoreBudget()
    const result = {
      bench: 'many',
      partitions: opts.partitions,
      mbPerPartition: opts.mb,
      valueBytes: opts['value-bytes'],
      rate: opts.rate,
      seconds: opts.seconds,
      intervalMs: opts['interval-ms'],
      fillSeconds: round(fillSeconds, 1),
      drainSeconds: round(drainSeconds, 1),
      manyCommitRate: many.map((x) => Math.round(x)),
      fewCommitRate: few.map((x) => Math.round(x)),
      manyLagMs: lags.many,
      fewLagMs: lags.few,
      ...prefixed('manyRatio', pairedRatio(ratios)),
      snapshotRequestsPerMinute: round(requests.many / (elapsed.many / 60), 1),
      fewSnapshotRequestsPerMinute: round(requests.few / (elapsed.few / 60), 1),
      // null when the few windows made no request at all.
      // Per minute on each side: a window that waits for its backlog lasts longer.
      snapshotRequestsRatio: requests.few === 0 ? null : round((requests.many / elapsed.many) / (requests.few / elapsed.few), 3),
      snapshotsTaken: taken.many,
      fewSnapshotsTaken: taken.few,
      requestShapes: { many: topShapes(shapes.many), few: topShapes(shapes.few) },
      peakRssMB: peakRssMB(),
      ...sampled.stop(),
      budgetMemoryMB: round(budget.options.memoryBytes / MiB, 1),
      budgetShare: budget.share,
      openStoresAtEnd: budget.openStores,
      loadAvgAtStart,
      loadAvgAtEnd: loadAvg(),
    }
    emit(result)
    saveFigures('many', args, result)
  } finally {
    abort.abort()
    await Promise.allSettled(running)
    await mapLimit(parts, 16, async (part) => {
      await part.processor.close().catch(() => undefined)
      await part.log.close()
    })
    await lease.release().catch(() => undefined)
    sampled.stop()
    dir.cleanup()
  }
}

/** The 8 most frequent request shapes, most first. */
function topShapes(shapes: Map<string, number>): Record<string, number> {
  return Object.fromEntries([...shapes].sort((a, b) => b[1] - a[1]).slice(0, 8))
}

function encode(row: Row): Buffer {
  return Buffer.from(JSON.stringify(row))
}

interface ProcessPeaks {
  /** The highest RSS of each phase (phasePeaks). */
  peakRssMBByPhase: Record<string, number>
  /** process.memoryUsage() in MiB at each phase's highest RSS of the 100 ms samples: V8's heap, the buffers, and the rest native (LevelDB). */
  memoryAtPeakMB: Record<string, Record<string, number>>
  openFdsMax: number
  openFdsMaxByPhase: Record<string, number>
  storeFdsMax: number
  /** The store descriptors of the sample with the most, by file kind (fileKind). */
  storeFdsByKind: Record<string, number>
  logFdsMax: number
}

/**
 * Samples the process every 100 ms (its RSS every 20 ms, phasePeaks): the
 * open file descriptors, those on files under `stores` and under `logs`,
 * and its memory, the highest of each phase.
 */
function sampleProcess(stores: string, logs: string): { phase(name: string): void; stop(): ProcessPeaks } {
  const rss = phasePeaks()
  const peaks: Omit<ProcessPeaks, 'peakRssMBByPhase'> = { memoryAtPeakMB: {}, openFdsMax: 0, openFdsMaxByPhase: {}, storeFdsMax: 0, storeFdsByKind: {}, logFdsMax: 0 }
  let current = 'setup'
  const sample = (): void => {
    const m = process.memoryUsage()
    if ((peaks.memoryAtPeakMB[current]?.rss ?? 0) * MiB < m.rss) {
      peaks.memoryAtPeakMB[current] = Object.fromEntries(['rss', 'heapTotal', 'heapUsed', 'external', 'arrayBuffers'].map((k) => [k, round(m[k as keyof NodeJS.MemoryUsage] / MiB, 0)]))
    }
    const fds = readdirSync('/proc/self/fd')
    let onLogs = 0
    const kinds: Record<string, number> = {}
    for (const fd of fds) {
      try {
        const target = readlinkSync(`/proc/self/fd/${fd}`)
        if (target.startsWith(stores)) kinds[fileKind(target)] = (kinds[fileKind(target)] ?? 0) + 1
        else if (target.startsWith(logs)) onLogs++
      } catch {
        // closed meanwhile
      }
    }
    const onStores = Object.values(kinds).reduce((a, b) => a + b, 0)
    if (onStores > peaks.storeFdsMax) peaks.storeFdsByKind = kinds
    peaks.storeFdsMax = Math.max(peaks.storeFdsMax, onStores)
    peaks.logFdsMax = Math.max(peaks.logFdsMax, onLogs)
    peaks.openFdsMax = Math.max(peaks.openFdsMax, fds.length)
    peaks.openFdsMaxByPhase[current] = Math.max(peaks.openFdsMaxByPhase[current] ?? 0, fds.length)
  }
  const timer = setInterval(sample, 100)
  return {
    phase(name) {
      sample()
      rss.phase(name)
      current = name
    },
    stop() {
      sample()
      clearInterval(timer)
      return { peakRssMBByPhase: rss.stop(), ...peaks }
    },
  }
}

/** What a descriptor on a store holds: LevelDB's tables, write-ahead log, MANIFEST, LOCK, LOG, or another file. */
function fileKind(path: string): string {
  const name = path.slice(path.lastIndexOf('/') + 1)
  if (name.endsWith('.ldb') || name.endsWith('.sst')) return 'table'
  if (name.endsWith('.log')) return 'wal'
  if (name.startsWith('MANIFEST')) return 'manifest'
  if (name === 'LOCK' || name === 'LOG') return name
  return 'other'
}
