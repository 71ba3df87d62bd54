import { PartitionStore, valueState } from '../src/index.js'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
interface Counter { n: number; pad: string }
const PAD = 'x'.repeat(84)
let a = 42
const next = () => { a = (a + 0x6d2b79f5) >>> 0; let t = a; t = Math.imul(t ^ (t >>> 15), t | 1); t ^= t + Math.imul(t ^ (t >>> 7), t | 61); return ((t ^ (t >>> 14)) >>> 0) / 4294967296 }
const events = Array.from({ length: 300000 }, () => `key-${Math.floor(next() * 100000).toString().padStart(6, '0')}`)
for (let r = 0; r < 3; r++) {
const dir = mkdtempSync(join(tmpdir(), 'prof-'))
const counts = valueState<Counter>('counts')
const store = await PartitionStore.open({ path: dir, states: [counts] })
const t0 = performance.now()
for (let start = 0; start < events.length; start += 500) {
  const tx = store.transaction()
  const view = tx.value(counts)
  const end = Math.min(start + 500, events.length)
  for (let i = start; i < end; i++) { const key = events[i]!; const prev = view.getSync(key); view.put(key, { n: (prev?.n ?? 0) + 1, pad: PAD }) }
  await tx.commit({ topic: 'events', partition: 0, offset: BigInt(end - 1) })
}
console.log('ms', performance.now() - t0)
await store.close(); rmSync(dir, { recursive: true })
}
