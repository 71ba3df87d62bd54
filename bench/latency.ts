/**
 * What a user sees of compactions and snapshots (seed 004's "jitter"): the
 * latency of each event, from the moment it was due to be appended to the
 * commit that holds it, while events arrive at a fixed rate.
 *
 *   npm run bench -- latency [--mb 1100] [--seconds 60] [--rounds 2] [--value-bytes 100] [--interval-ms 10000] [--probe-seconds 30] [--s3-nice 19]
 *
 * A PartitionProcessor on the embedded file log, over a store of --mb MiB
 * generated as the snapshot bench generates it (1000-byte values). A
 * producer process (bench/_rate-appender.ts) appends events; the handler
 * writes a --value-bytes value to the event's key (a random one of the
 * store's keys) and counts the event in a counter of its own.
 *
 * 1. The maximum rate: the producer appends as fast as the log takes it while
 *    the processor (no snapshots) applies, for 2 × --max-seconds; the
 *    committed events/s of the second is `floodRate`, an upper bound (the
 *    processor drains a backlog in large batches). `maxRate` is the highest
 *    fixed rate, from 90 % of it down in steps of 15 %, that a segment of
 *    --probe-seconds (30) keeps up with: p99 within 250 ms (`probes`).
 * 2. At 50 % and at 80 % of it, --rounds rounds, each one segment of
 *    --seconds without snapshots (the baseline: the same processor and rate,
 *    what the job costs with no durability beyond the local disk) and one
 *    with snapshots to radosgw every --interval-ms, in alternating order. Each
 *    side gets --rounds × --seconds of events (120 s by default); the
 *    percentiles pool them. LevelDB compacts as it comes in both.
 *    `p999Ratio` (50 %) and `p999Ratio80` are p99.9 with snapshots over
 *    without.
 * Every segment waits until the processor has committed the producer's last
 * event, and the run ends by checking the store's counter against the events
 * appended (`eventsLost`, `eventsDoubled`) and that each offset was committed
 * once. LevelDB's level-0 file count is sampled every 100 ms
 * (PartitionStore.leveldbProperty): from 8 files LevelDB delays each write
 * by 1 ms (`l0SlowdownMs`: sampled time at 8 or more), from 12 it stops
 * writes until a compaction ends (`l0StopMs`).
 *
 * S3: TIDEMARK_S3_ENDPOINT (see bench/snapshot.ts), or a radosgw started here.
 * The S3 server's processes on this machine (radosgw, ceph-*) run at nice
 * --s3-nice (19; 0 leaves them be): the server stands in for a remote
 * service, whose CPU a user's processor does not share, and on a machine of
 * two cores it would otherwise take a quarter of a core from the processor
 * during each upload. Each side reports the CPU seconds of the processor,
 * the producer and the S3 server, and how late the processor's event loop
 * ran (monitorEventLoopDelay), so that the cause of a spike shows.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process'
import { once } from 'node:events'
import { readdirSync, readFileSync } from 'node:fs'
import { setPriority } from 'node:os'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { createInterface, type Interface } from 'node:readline'
import type { Readable, Writable } from 'node:stream'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { openFileLog, PartitionProcessor, valueState, type FileLog, type SnapshotStore } from '../src/index.js'
import { saveFigures } from './_figures.js'
import { benchDir, emit, intFlags, loadAvg, round } from './_util.js'
import { benchS3, generateStore, kv, keyOf, peakRssMB, TOPIC, valueSource } from './snapshot.js'

const count = valueState<number>('latency-count')
const LOADS = [0.5, 0.8] as const
/**
 * A probe kept up when its p99 stays within this: a processor that keeps up
 * shows the producer's batching and the commits' cadence (tens of ms); one
 * that falls behind shows its backlog, which grows with the run. (A second
 * let 109,127 events/s through at p99 500 ms, and 80 % of it then fell
 * seconds behind over 60 s.)
 */
const KEPT_UP_P99_MS = 250

/** Latencies in 0.1 ms buckets up to 60 s (and one for anything longer): percentiles without keeping millions of samples, which would count in the peak RSS. */
class Histogram {
  readonly buckets = new Uint32Array(600_001)
  count = 0
  max = 0
  add(ms: number): void {
    this.buckets[Math.min(this.buckets.length - 1, Math.max(0, Math.round(ms * 10)))]!++
    this.count++
    if (ms > this.max) this.max = ms
  }
  merge(other: Histogram): this {
    for (let i = 0; i < this.buckets.length; i++) this.buckets[i]! += other.buckets[i]!
    this.count += other.count
    this.max = Math.max(this.max, other.max)
    return this
  }
  /** The smallest latency that p % of the samples do not exceed. */
  percentile(p: number): number {
    const rank = Math.max(1, Math.ceil((p / 100) * this.count))
    let seen = 0
    for (let i = 0; i < this.buckets.length; i++) {
      seen += this.buckets[i]!
      if (seen >= rank) return i === this.buckets.length - 1 ? this.max : i / 10
    }
    return this.max
  }
}

interface Segment {
  latencies: Histogram
  events: number
  l0: number[]
  snapshots: number
  /** The snapshots' checkpoint stalls (ms) and the bytes they uploaded. */
  stallsMs: number[]
  uploadedBytes: number
  committedPerSec: number
  /** The processor's event loop: how late its timers ran (ms). */
  loopDelayMs: { p99: number; p999: number; max: number }
  /** CPU seconds in the segment: this process, the producer, and the S3 server's processes (radosgw, ceph-*) on this machine. */
  cpuSeconds: { processor: number; producer: number; s3: number }
}

const TICKS = 100

/** User + system CPU seconds of a process, from /proc (0 once it is gone). */
function cpuOf(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
    return (Number(fields[11]) + Number(fields[12])) / TICKS
  } catch {
    return 0
  }
}

/**
 * Puts every thread of these processes at the lowest CPU priority (nice 19;
 * Linux keeps a nice value per thread, and threads made later inherit it).
 * The S3 server stands in for a remote service, whose CPU a user's
 * processor does not share: here it takes what the processor leaves.
 */
function niceThreads(pids: readonly number[], nice: number): number {
  let threads = 0
  for (const pid of pids) {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      setPriority(Number(tid), nice)
      threads++
    }
  }
  return threads
}

/** The pids of the S3 server's processes on this machine: a radosgw the bench started and its ceph daemons. */
function s3Pids(): number[] {
  const pids: number[] = []
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`, 'utf8')
      if (/^(radosgw|ceph-)/.test(cmd.split('\0')[0]!.split('/').pop()!)) pids.push(Number(name))
    } catch {
      // gone meanwhile
    }
  }
  return pids
}

interface Producer {
  child: ChildProcessByStdio<Writable, Readable, null>
  lines: Interface
  line(prefix: string): Promise<string>
}

function producer(logDir: string, rate: number, seconds: number, keys: number): Producer {
  const file = fileURLToPath(new URL('./_rate-appender.ts', import.meta.url))
  const child = spawn(process.execPath, ['--import', 'tsx', file, logDir, String(rate), String(seconds), String(keys)], { stdio: ['pipe', 'pipe', 'inherit'] })
  const lines = createInterface({ input: child.stdout })
  const waiting: string[] = []
  let wake: (() => void) | undefined
  lines.on('line', (l) => { waiting.push(l); wake?.() })
  return {
    child,
    lines,
    async line(prefix) {
      for (;;) {
        const i = waiting.findIndex((l) => l.startsWith(prefix))
        if (i !== -1) return waiting.splice(i, 1)[0]!
        if (child.exitCode !== null) throw new Error(`the producer exited (${child.exitCode}) before printing ${prefix}`)
        await new Promise<void>((resolve) => { wake = resolve; child.once('exit', () => resolve()) })
      }
    },
  }
}

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { mb: 1100, seconds: 60, rounds: 2, 'value-bytes': 100, 'interval-ms': 10_000, 'max-seconds': 10, 'probe-seconds': 30, 's3-nice': 19 })
  const loadAvgAtStart = loadAvg()
  const dir = benchDir('latency')
  const s3 = await benchS3('bench-latency')
  const s3Threads = opts['s3-nice'] === 0 ? 0 : niceThreads(s3Pids(), opts['s3-nice'])
  const log: FileLog = await openFileLog(join(dir.path, 'log'))
  const path = join(dir.path, 'store')
  const value = valueSource(opts['value-bytes'], 3)
  const now = (): number => performance.timeOrigin + performance.now()
  // Events commit in offset order, each once: anything else is counted.
  let lastCommitted: bigint | undefined
  let doubled = 0
  let skipped = 0
  let appended = 0
  let version = 0
  try {
    const g = await generateStore(path, opts.mb, 1000)
    const keys = g.keys
    const position = g.store.position(TOPIC, 0) ?? -1n
    await g.store.close()
    // The generated store says it holds the log up to `position`: the log gets as many entries (never applied), so that new events come after it.
    for (let at = 0n; at <= position; at += 1000n) {
      const n = Number(position - at + 1n < 1000n ? position - at + 1n : 1000n)
      await log.appendAll(Array.from({ length: n }, () => Buffer.from('{"k":0,"t":0}')))
    }
    lastCommitted = position
    const snapshotStore: SnapshotStore = s3.store('latency')

    /** One segment: a processor (with snapshots or not) over events at `rate` (0: as fast as they come) for `seconds`. */
    const segment = async (rate: number, seconds: number, snapshots: boolean): Promise<Segment> => {
      version++
      const pending: Array<{ offset: bigint; t: number }> = []
      const latencies = new Histogram()
      const processor = new PartitionProcessor<{ k: number; t: number }>({
        job: 'latency', log, topic: TOPIC, partition: 0, path, states: [kv, count],
        handler: (tx, e, ctx) => {
          tx.value(kv).put(keyOf(e.k), value(e.k, version))
          const c = tx.value(count)
          c.put('n', (c.getSync('n') ?? 0) + 1)
          pending.push({ offset: ctx.offset, t: e.t })
        },
        ...(snapshots ? { snapshots: { store: snapshotStore, schedule: { intervalMs: opts['interval-ms'] } } } : {}),
      })
      let snapshotsTaken = 0
      const stallsMs: number[] = []
      let uploadedBytes = 0
      processor.on('snapshot', (r) => {
        snapshotsTaken++
        stallsMs.push(round(r.stallMs, 1))
        uploadedBytes += r.bytesUploaded
      })
      processor.on('snapshot-failed', (err) => { process.stderr.write(`latency: snapshot failed: ${err.code} ${err.message}\n`) })
      processor.on('commit', ({ offset }) => {
        const at = now()
        let i = 0
        for (; i < pending.length && pending[i]!.offset <= offset; i++) {
          const o = pending[i]!.offset
          latencies.add(at - pending[i]!.t)
          if (lastCommitted !== undefined && o <= lastCommitted) doubled++
          else if (lastCommitted !== undefined && o > lastCommitted + 1n) skipped += Number(o - lastCommitted - 1n)
          if (lastCommitted === undefined || o > lastCommitted) lastCommitted = o
        }
        pending.splice(0, i)
      })
      await processor.start()
      const l0: number[] = []
      const sampler = setInterval(() => {
        const v = processor.store.leveldbProperty('leveldb.num-files-at-level0')
        if (v !== undefined) l0.push(Number(v))
      }, 100)
      const stop = new AbortController()
      const running = processor.run(stop.signal)
      const p = producer(join(dir.path, 'log'), rate, seconds, keys)
      await p.line('ready')
      const servers = s3Pids()
      const cpuAtGo = { processor: process.cpuUsage(), producer: cpuOf(p.child.pid!), s3: servers.reduce((sum, pid) => sum + cpuOf(pid), 0) }
      const loop = monitorEventLoopDelay({ resolution: 10 })
      loop.enable()
      const committedAtGo = latencies.count
      p.child.stdin.write('go\n')
      const goAt = performance.now()
      const [, sentText, lastText] = (await p.line('done ')).split(' ')
      const sent = Number(sentText)
      appended += sent
      const last = BigInt(lastText!)
      // Everything appended is committed before the segment ends.
      while ((processor.store.position(TOPIC, 0) ?? -1n) < last) await new Promise((resolve) => setTimeout(resolve, 20))
      const elapsed = (performance.now() - goAt) / 1000
      loop.disable()
      const own = process.cpuUsage(cpuAtGo.processor)
      const cpuSeconds = {
        processor: round((own.user + own.system) / 1e6, 1),
        producer: round(cpuOf(p.child.pid!) - cpuAtGo.producer, 1),
        s3: round(servers.reduce((sum, pid) => sum + cpuOf(pid), 0) - cpuAtGo.s3, 1),
      }
      clearInterval(sampler)
      stop.abort()
      await running
      await processor.close()
      p.child.stdin.end()
      await once(p.child, 'exit')
      const loopDelayMs = { p99: round(loop.percentile(99) / 1e6, 1), p999: round(loop.percentile(99.9) / 1e6, 1), max: round(loop.max / 1e6, 1) }
      return { latencies, events: sent, l0, snapshots: snapshotsTaken, stallsMs, uploadedBytes, committedPerSec: (latencies.count - committedAtGo) / elapsed, loopDelayMs, cpuSeconds }
    }

    // A first snapshot, untimed: the loaded segments' snapshots are then incremental, as a running job's are.
    {
      const first = new PartitionProcessor({ job: 'latency', log, topic: TOPIC, partition: 0, path, states: [kv, count], handler: () => undefined, snapshots: { store: snapshotStore } })
      await first.start()
      await first.snapshot()
      await first.close()
    }

    // 1. The maximum rate. A flood's drain rate is an upper bound only: the processor then reads the log in large batches, and the producer's backlog hides the compactions it leaves behind. The rate the loads are taken of is the highest fixed rate, stepping down from 90 % of the flood's, that a segment of --probe-seconds keeps up with (KEPT_UP_P99_MS).
    await segment(0, opts['max-seconds'], false)
    const floodRate = Math.round((await segment(0, opts['max-seconds'], false)).committedPerSec)
    const probes: Array<{ rate: number; p99: number }> = []
    let maxRate = 0
    // Ten steps reach 21 % of the flood's rate. Six (down to 40 %) were not always enough: a run after a
    // long bench:all had p99 348 ms at 74k/s, 330 at 63k and 710 at 53k events/s, where earlier runs kept
    // up at 60k; the probes are not monotonic, so the bench goes on stepping down rather than giving up.
    for (let rate = Math.round(floodRate * 0.9); probes.length < 10; rate = Math.round(rate * 0.85)) {
      const p99 = (await segment(rate, opts['probe-seconds'], false)).latencies.percentile(99)
      probes.push({ rate, p99 })
      process.stderr.write(`latency: probe at ${rate} events/s: p99 ${round(p99, 1)} ms\n`)
      if (p99 <= KEPT_UP_P99_MS) {
        maxRate = rate
        break
      }
    }
    if (maxRate === 0) throw new Error(`no probed rate was kept up with (flood ${floodRate} events/s; probes ${JSON.stringify(probes)})`)
    process.stderr.write(`latency: maximum rate ${maxRate} events/s (flood ${floodRate})\n`)

    // 2. The loads, in interleaved rounds.
    const result: Record<string, unknown> = { bench: 'latency', mb: opts.mb, valueBytes: opts['value-bytes'], intervalMs: opts['interval-ms'], seconds: opts.seconds, rounds: opts.rounds, s3Nice: opts['s3-nice'], s3Threads, maxRate, floodRate, probes }
    for (const load of LOADS) {
      const rate = Math.round(maxRate * load)
      const sides = { off: [] as Segment[], on: [] as Segment[] }
      for (let r = 0; r < opts.rounds; r++) {
        for (const side of r % 2 === 0 ? (['off', 'on'] as const) : (['on', 'off'] as const)) {
          const s = await segment(rate, opts.seconds, side === 'on')
          sides[side].push(s)
          process.stderr.write(`latency: ${load * 100} % round ${r} snapshots ${side}: ${s.events} events, p99.9 ${round(s.latencies.percentile(99.9), 1)} ms, max ${round(s.latencies.max, 1)} ms, level-0 max ${Math.max(0, ...s.l0)}, ${s.snapshots} snapshots (stalls ${s.stallsMs.join(', ')} ms, ${round(s.uploadedBytes / 1e6, 1)} MB), event loop delay p99.9 ${s.loopDelayMs.p999} / max ${s.loopDelayMs.max} ms, CPU s ${JSON.stringify(s.cpuSeconds)}\n`)
        }
      }
      const suffix = load === 0.5 ? '' : String(load * 100)
      const figures = (segments: Segment[]): { p999: number } & Record<string, number> => {
        const all = segments.reduce((h, s) => h.merge(s.latencies), new Histogram())
        const l0 = segments.flatMap((s) => s.l0)
        return {
          p50: all.percentile(50), p99: all.percentile(99), p999: all.percentile(99.9), max: round(all.max, 2),
          l0Max: Math.max(0, ...l0), l0SlowdownMs: l0.filter((n) => n >= 8).length * 100, l0StopMs: l0.filter((n) => n >= 12).length * 100,
          events: all.count, snapshots: segments.reduce((sum, s) => sum + s.snapshots, 0),
          stallMsMax: Math.max(0, ...segments.flatMap((s) => s.stallsMs)), uploadedMB: round(segments.reduce((sum, s) => sum + s.uploadedBytes, 0) / 1e6, 1),
          loopDelayMsP999Max: Math.max(...segments.map((s) => s.loopDelayMs.p999)), loopDelayMsMax: Math.max(...segments.map((s) => s.loopDelayMs.max)),
          processorCpuSeconds: round(segments.reduce((sum, s) => sum + s.cpuSeconds.processor, 0), 1),
          producerCpuSeconds: round(segments.reduce((sum, s) => sum + s.cpuSeconds.producer, 0), 1),
          s3ServerCpuSeconds: round(segments.reduce((sum, s) => sum + s.cpuSeconds.s3, 0), 1),
        }
      }
      const on = figures(sides.on)
      const off = figures(sides.off)
      Object.assign(result, {
        [`rate${suffix || '50'}`]: rate,
        [`p999Ratio${suffix}`]: round(on.p999 / off.p999, 3),
        [`latencyMs${suffix || '50'}`]: on,
        [`baselineLatencyMs${suffix || '50'}`]: off,
      })
    }

    // 3. Nothing lost, nothing doubled: the counter the handler kept against the events appended.
    const check = new PartitionProcessor({ job: 'latency', log, topic: TOPIC, partition: 0, path, states: [kv, count], handler: () => undefined })
    await check.start()
    const counted = check.store.transaction().value(count).getSync('n') ?? 0
    await check.close()
    Object.assign(result, {
      eventsAppended: appended,
      eventsLost: Math.max(0, appended - counted) + skipped,
      eventsDoubled: Math.max(0, counted - appended) + doubled,
      peakRssMB: peakRssMB(),
      loadAvgAtStart,
      loadAvgAtEnd: loadAvg(),
    })
    emit(result)
    saveFigures('latency', args, result)
  } finally {
    await log.close()
    await s3.close()
    dir.cleanup()
  }
}
