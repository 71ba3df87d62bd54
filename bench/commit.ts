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
 * side goes first; ratio is the median of the per-pair ratios. Each round
 * also runs the raw loop on the keys the store writes, the state's prefix in
 * front of each (`sameKeysRatio`, for information: the rest of the gap is the
 * store's own work).
 *
 * Versioned states (docs/state-evolution.md), in the same run: each round
 * also runs the store loop on a versioned state (version 2), whose values
 * are all current since the loop writes them (`versionedRatio`: unversioned
 * time / versioned time, sides rotated); and reads every key of a store
 * filled at version 1 through a version 2 definition, which upgrades each
 * value on read, against the same reads through the version 1 definition
 * with the upgrade called by hand (`upgradeRatio`: by hand / on read, the two
 * loops alternating which goes first).
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
import { PartitionMetrics, PartitionStore, valueState, type ValueState } from '../src/index.js'
import { saveFigures } from './_figures.js'
import { benchDir, emit, interleaved, intFlags, loadAvg, median, pairedRatio, prefixed, rng } from './_util.js'

interface Counter { n: number; pad: string }
const PAD = 'x'.repeat(84) // {"n":12345,"pad":"…"} ≈ 100 bytes
interface CounterV2 { n: number; pad: string; seen: boolean }
const upgradeCounter = (v: Counter): CounterV2 => ({ n: v.n, pad: v.pad, seen: false })
const COUNTS = valueState<Counter>('counts')
const COUNTS_V1 = valueState<Counter>('counts', { version: 1 })
const COUNTS_V2 = valueState<CounterV2>('counts', { version: 2, upgrade: { 1: upgradeCounter } })

function makeEvents(events: number, keys: number): string[] {
  const next = rng(42)
  return Array.from({ length: events }, () => `key-${Math.floor(next() * keys).toString().padStart(6, '0')}`)
}

async function viaStore(path: string, events: string[], batch: number, asyncReads: boolean, metrics?: PartitionMetrics, counts: ValueState<Counter> = COUNTS): Promise<number> {
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

/** Every key of the store read once through `def` (no writes, so values keep their version); `upgrade` is called on each value by hand. */
async function readAll<V>(path: string, keys: readonly string[], def: ValueState<V>, upgrade?: (v: V) => unknown): Promise<number> {
  const store = await PartitionStore.open({ path, states: [def] })
  const view = store.transaction().value(def)
  let sink = 0
  const t0 = performance.now()
  for (const key of keys) {
    const v = view.getSync(key)
    const out = (upgrade === undefined || v === undefined ? v : upgrade(v)) as { n: number } | undefined
    sink += out?.n ?? 0
  }
  const ms = performance.now() - t0
  await store.close()
  if (sink < 0) throw new Error('unreachable')
  return ms
}

/** The upgrade rounds: a store filled at version 1, read through version 2 (upgrade on read) and through version 1 with the upgrade by hand. */
async function upgradeRounds(keys: number, batch: number, rounds: number): Promise<{ onRead: number[]; byHand: number[] }> {
  const names = Array.from({ length: keys }, (_, i) => `key-${i.toString().padStart(6, '0')}`)
  const onRead: number[] = []
  const byHand: number[] = []
  for (let r = 0; r < rounds; r++) {
    const dir = benchDir('commit')
    try {
      await viaStore(dir.path, names, batch, false, undefined, COUNTS_V1)
      // One untimed pass first: the first open after the fill replays the
      // log into a level-0 table and its compactions ran into whichever
      // side came first (its ratios alternated 0.71-0.97 / 1.00-1.15).
      await readAll(dir.path, names, COUNTS_V1)
      const a = () => readAll(dir.path, names, COUNTS_V2).then((ms) => onRead.push(ms))
      const b = () => readAll(dir.path, names, COUNTS_V1, upgradeCounter).then((ms) => byHand.push(ms))
      if (r % 2 === 0) await a().then(b)
      else await b().then(a)
    } finally {
      dir.cleanup()
    }
  }
  return { onRead, byHand }
}

/** `prefix`: put in front of every key, as the store writes it (the state's prefix, one string per event as a sublevel builds it). */
async function viaRaw(path: string, events: string[], batch: number, prefix = ''): Promise<number> {
  const db = new ClassicLevel<string, string>(path, { keyEncoding: 'utf8', valueEncoding: 'utf8' })
  await db.open()
  const t0 = performance.now()
  for (let start = 0; start < events.length; start += batch) {
    // The same read-your-writes a transaction gives, so both sides compute the same counts.
    const pending = new Map<string, string>()
    const end = Math.min(start + batch, events.length)
    for (let i = start; i < end; i++) {
      const key = prefix === '' ? events[i]! : prefix + events[i]!
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

/** Runs `main` and `beside` in the round's order (main first in even rounds), keeps beside's time in `besideMs`, returns main's. */
async function withBeside(round: number, besideMs: number[], main: () => Promise<number>, beside: () => Promise<number>): Promise<number> {
  if (round % 2 === 0) {
    const ms = await main()
    besideMs.push(await beside())
    return ms
  }
  besideMs.push(await beside())
  return main()
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
  // Each round: raw, raw with the store's keys, unversioned and versioned (each pair rotates which goes first).
  const versionedMs: number[] = []
  const sameKeysMs: number[] = []
  const statePrefix = COUNTS.prefix.toString('latin1')
  const pairs = await interleaved(
    opts.rounds,
    (round) => withBeside(round, sameKeysMs,
      () => inFreshDir((path) => viaRaw(path, events, opts.batch)),
      () => inFreshDir((path) => viaRaw(path, events, opts.batch, statePrefix))),
    (round) => withBeside(round, versionedMs,
      () => inFreshDir((path) => viaStore(path, events, opts.batch, asyncReads)),
      () => inFreshDir((path) => viaStore(path, events, opts.batch, asyncReads, undefined, COUNTS_V2 as unknown as ValueState<Counter>))),
    (rawMs, storeMs) => rawMs / storeMs,
  )
  const upgrade = await upgradeRounds(opts.keys, opts.batch, opts.rounds)
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
    versionedPerSec: Math.round(opts.events / (median(versionedMs) / 1000)),
    // Unversioned time / versioned time within each round: 1 is no cost.
    ...prefixed('versionedRatio', pairedRatio(pairs.measured.map((ms, i) => ms / versionedMs[i]!))),
    // For information: the raw loop on the store's LevelDB keys (the state's
    // prefix, 9 bytes, in front of each key: part of the on-disk format) /
    // the store, within each round. What the store costs beyond its key format.
    sameKeysPerSec: Math.round(opts.events / (median(sameKeysMs) / 1000)),
    ...prefixed('sameKeysRatio', pairedRatio(pairs.measured.map((ms, i) => sameKeysMs[i]! / ms))),
    upgradeReadsPerSec: Math.round(opts.keys / (median(upgrade.onRead) / 1000)),
    byHandReadsPerSec: Math.round(opts.keys / (median(upgrade.byHand) / 1000)),
    // Plain read + upgrade by hand / read one version behind (upgraded on read), within each round.
    ...prefixed('upgradeRatio', pairedRatio(upgrade.byHand.map((ms, i) => ms / upgrade.onRead[i]!))),
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
