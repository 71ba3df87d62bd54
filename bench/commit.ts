/**
 * Read-modify-write of counters (100k distinct keys, ~100-byte values),
 * committed with the source position in batches, through the partition store
 * and directly on classic-level with the same reads and the same puts in one
 * db.batch per batch (plus the position key, as the store writes it).
 * Both sides read synchronously: the raw side with db.getSync, the store
 * with view.getSync (what a handler in the processor uses). --async reads
 * through view.get() with an await per event instead.
 */
import { ClassicLevel } from 'classic-level'
import { PartitionStore, valueState } from '../src/index.js'
import { benchDir, emit, intFlags, rng, round } from './_util.js'

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
  const opts = intFlags(args.filter((a) => a !== '--async'), { events: 300_000, keys: 100_000, batch: 500, rounds: 5 })
  const events = makeEvents(opts.events, opts.keys)
  const store: number[] = []
  const raw: number[] = []
  // Alternate the two so that neither always runs on a warmer machine.
  for (let r = 0; r < opts.rounds; r++) {
    for (const side of r % 2 === 0 ? ['raw', 'store'] : ['store', 'raw']) {
      const dir = benchDir('commit')
      try {
        if (side === 'raw') raw.push(await viaRaw(dir.path, events, opts.batch))
        else store.push(await viaStore(dir.path, events, opts.batch, asyncReads))
      } finally {
        dir.cleanup()
      }
    }
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  const eventsPerSec = opts.events / (median(store) / 1000)
  const rawPerSec = opts.events / (median(raw) / 1000)
  emit({ bench: 'commit', events: opts.events, batch: opts.batch, keys: opts.keys, rounds: opts.rounds, reads: asyncReads ? 'get (await)' : 'getSync', eventsPerSec: Math.round(eventsPerSec), rawPerSec: Math.round(rawPerSec), ratio: round(eventsPerSec / rawPerSec) })
}
