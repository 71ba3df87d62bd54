/**
 * Read-modify-write of counters (100k distinct keys, ~100-byte values),
 * committed with the source position in batches, through the partition store
 * and directly on classic-level with the same reads and the same puts in one
 * db.batch per batch (plus the position key, as the store writes it).
 * Both sides read synchronously: the raw side with db.getSync, the store
 * with view.getSync (what a handler in the processor uses). --async reads
 * through view.get() with an await per event instead.
 *
 * --rounds pairs (raw, store), each in fresh directories, alternating which
 * side goes first; ratio is the median of the per-pair ratios.
 *
 * --metrics: the cost of the metrics (docs/metrics.md). Per round, the store
 * side runs three times: without metrics calls, with the calls a
 * PartitionProcessor makes per commit (PartitionMetrics: the latency clock,
 * the commit and lag messages) and nobody subscribed, and with the same
 * calls and the Prometheus adapter subscribed; with raw, four sides whose
 * order rotates each round. Ratios are taken within each round.
 */
import { ClassicLevel } from 'classic-level'
import { createPrometheusMetrics } from '../connectors/prometheus/index.js'
import { PartitionMetrics, PartitionStore, valueState } from '../src/index.js'
import { saveFigures } from './_figures.js'
import { benchDir, emit, interleaved, intFlags, loadAvg, median, pairedRatio, prefixed, rng } from './_util.js'

interface Counter { n: number; pad: string }
const PAD = 'x'.repeat(84) // {"n":12345,"pad":"…"} ≈ 100 bytes

function makeEvents(events: number, keys: number): string[] {
  const next = rng(42)
  return Array.from({ length: events }, () => `key-${Math.floor(next() * keys).toString().padStart(6, '0')}`)
}

async function viaStore(path: string, events: string[], batch: number, asyncReads: boolean, metrics?: PartitionMetrics): Promise<number> {
  const counts = valueState<Counter>('counts')
  const store = await PartitionStore.open({ path, states: [counts] })
  const t0 = performance.now()
  for (let start = 0; start < events.length; start += batch) {
    const tx = store.transaction()
    const view = tx.value(counts)
    const end = Math.min(start + batch, events.length)
    for (let i = start; i < end; i++) {
      const key = events[i]!
      const prev = asyncReads ? await view.get(key) : view.getSync(key)
      view.put(key, { n: (prev?.n ?? 0) + 1, pad: PAD })
    }
    if (metrics === undefined) {
      await tx.commit({ topic: 'events', partition: 0, offset: BigInt(end - 1) })
    } else {
      const started = metrics.commitStarted()
      await tx.commit({ topic: 'events', partition: 0, offset: BigInt(end - 1) })
      metrics.committed(end - start, 0, BigInt(end - 1), started, BigInt(events.length))
    }
  }
  const ms = performance.now() - t0
  await store.close()
  return ms
}

async function viaRaw(path: string, events: string[], batch: number): Promise<number> {
  const db = new ClassicLevel<string, string>(path, { keyEncoding: 'utf8', valueEncoding: 'utf8' })
  await db.open()
  const t0 = performance.now()
  for (let start = 0; start < events.length; start += batch) {
    // The same read-your-writes a transaction gives, so both sides compute the same counts.
    const pending = new Map<string, string>()
    const end = Math.min(start + batch, events.length)
    for (let i = start; i < end; i++) {
      const key = events[i]!
      const text = pending.get(key) ?? db.getSync(key)
      const prev = text === undefined ? undefined : (JSON.parse(text) as Counter)
      pending.set(key, JSON.stringify({ n: (prev?.n ?? 0) + 1, pad: PAD }))
    }
    const ops = [...pending].map(([key, value]) => ({ type: 'put' as const, key, value }))
    ops.push({ type: 'put', key: '\u0000position', value: String(end - 1) })
    await db.batch(ops)
  }
  const ms = performance.now() - t0
  await db.close()
  return ms
}

export async function run(args: string[]): Promise<void> {
  const asyncReads = args.includes('--async')
  const withMetrics = args.includes('--metrics')
  const opts = intFlags(args.filter((a) => a !== '--async' && a !== '--metrics'), { events: 300_000, keys: 100_000, batch: 500, rounds: 7 })
  const loadAtStart = loadAvg()
  const events = makeEvents(opts.events, opts.keys)
  if (withMetrics) return runMetrics(events, opts, asyncReads, loadAtStart)
  const inFreshDir = async (side: (path: string) => Promise<number>): Promise<number> => {
    const dir = benchDir('commit')
    try {
      return await side(dir.path)
    } finally {
      dir.cleanup()
    }
  }
  const pairs = await interleaved(
    opts.rounds,
    () => inFreshDir((path) => viaRaw(path, events, opts.batch)),
    () => inFreshDir((path) => viaStore(path, events, opts.batch, asyncReads)),
    (rawMs, storeMs) => rawMs / storeMs,
  )
  const result = {
    bench: 'commit',
    baseline: 'classic-level: the same getSync reads and one db.batch of the same puts + the position key per batch',
    loadAvg: loadAtStart,
    events: opts.events,
    batch: opts.batch,
    keys: opts.keys,
    reads: asyncReads ? 'get (await)' : 'getSync',
    eventsPerSec: Math.round(opts.events / (median(pairs.measured) / 1000)),
    rawPerSec: Math.round(opts.events / (median(pairs.raw) / 1000)),
    ...pairedRatio(pairs.ratios),
  }
  emit(result)
  // The figure of docs/benchmarks.md (scripts that regenerate it read bench/results); the --metrics mode is a diagnosis, not saved.
  saveFigures('commit', args, result)
}

/** --metrics: raw, store, store + metrics calls with nobody subscribed, and with the Prometheus adapter subscribed. */
async function runMetrics(events: string[], opts: { events: number; keys: number; batch: number; rounds: number }, asyncReads: boolean, loadAtStart: number[]): Promise<void> {
  const metrics = new PartitionMetrics({ job: 'bench', topic: 'events', partition: 0 })
  const sides = ['raw', 'store', 'unlistened', 'listened'] as const
  const ms: Record<(typeof sides)[number], number[]> = { raw: [], store: [], unlistened: [], listened: [] }
  for (let r = 0; r < opts.rounds; r++) {
    for (let i = 0; i < sides.length; i++) {
      const side = sides[(i + r) % sides.length]!
      const dir = benchDir('commit')
      const prometheus = side === 'listened' ? createPrometheusMetrics() : undefined
      try {
        if (side === 'raw') ms.raw.push(await viaRaw(dir.path, events, opts.batch))
        else ms[side].push(await viaStore(dir.path, events, opts.batch, asyncReads, side === 'store' ? undefined : metrics))
      } finally {
        prometheus?.close()
        dir.cleanup()
      }
    }
  }
  const perSec = (side: (typeof sides)[number]): number => Math.round(opts.events / (median(ms[side]) / 1000))
  // Rates within one round: a time ratio inverted.
  const within = (a: number[], b: number[]) => pairedRatio(a.map((x, i) => b[i]! / x))
  emit({
    bench: 'commit',
    mode: 'metrics',
    baseline: 'the same store loop without metrics calls; and classic-level as in the plain bench',
    loadAvg: loadAtStart,
    events: opts.events,
    batch: opts.batch,
    keys: opts.keys,
    reads: asyncReads ? 'get (await)' : 'getSync',
    eventsPerSec: perSec('store'),
    unlistenedPerSec: perSec('unlistened'),
    listenedPerSec: perSec('listened'),
    rawPerSec: perSec('raw'),
    // Compiled in, nobody subscribed, vs no metrics calls: the figure of issue 11.
    ...prefixed('metricsRatio', within(ms.unlistened, ms.store)),
    ...prefixed('listenedRatio', within(ms.listened, ms.store)),
    ...prefixed('unlistenedVsRaw', within(ms.unlistened, ms.raw)),
    ...prefixed('storeVsRaw', within(ms.store, ms.raw)),
  })
}
