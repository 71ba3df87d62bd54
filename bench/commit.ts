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
 */
import { ClassicLevel } from 'classic-level'
import { PartitionStore, valueState } from '../src/index.js'
import { benchDir, emit, interleaved, intFlags, loadAvg, median, pairedRatio, rng } from './_util.js'

interface Counter { n: number; pad: string }
const PAD = 'x'.repeat(84) // {"n":12345,"pad":"…"} ≈ 100 bytes

function makeEvents(events: number, keys: number): string[] {
  const next = rng(42)
  return Array.from({ length: events }, () => `key-${Math.floor(next() * keys).toString().padStart(6, '0')}`)
}

async function viaStore(path: string, events: string[], batch: number, asyncReads: boolean): Promise<number> {
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
    await tx.commit({ topic: 'events', partition: 0, offset: BigInt(end - 1) })
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
  const opts = intFlags(args.filter((a) => a !== '--async'), { events: 300_000, keys: 100_000, batch: 500, rounds: 7 })
  const loadAtStart = loadAvg()
  const events = makeEvents(opts.events, opts.keys)
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
  emit({
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
  })
}
