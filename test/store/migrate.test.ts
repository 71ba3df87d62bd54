import { ClassicLevel } from 'classic-level'
import { describe, expect, it } from 'vitest'
import { mapState, migrateState, valueState, type MigrateProgress, type StateDefinition } from '../../src/index.js'
import { interceptBatchWrites } from '../helpers/faults.js'
import { openStores } from '../helpers/open-stores.js'
import { tempDir } from '../helpers/tmp.js'

type V3 = { count: number; tags: string[] }
const up = { 1: (v: { n: number }) => ({ count: v.n }), 2: (v: { count: number }) => ({ count: v.count, tags: [] }) }
const upgrade3 = (n: number): V3 => ({ count: n, tags: [] })
const plain = valueState<{ n: number }>('totals')
const v2 = valueState<{ count: number }>('totals', { version: 2, upgrade: { 1: up[1] } })
const v3 = valueState<V3>('totals', { version: 3, upgrade: up })
const cartsPlain = mapState<{ n: number }, 'bytes'>('carts', { keyType: 'bytes' })
const carts3 = mapState<V3, 'bytes'>('carts', { keyType: 'bytes', version: 3, upgrade: up })

const stores = openStores()
const openStore = stores.open
const close = stores.close

/** 250 keys unversioned, then every third one rewritten at version 2; 40 map entries. */
async function fill(path: string): Promise<void> {
  let store = await openStore(path, [plain, cartsPlain])
  let tx = store.transaction()
  for (let i = 0; i < 250; i++) tx.value(plain).put(`k${String(i).padStart(3, '0')}`, { n: i })
  for (let i = 0; i < 40; i++) tx.map(cartsPlain).put(Buffer.of(i % 3, 0xff), `s${i}`, { n: 1000 + i })
  await tx.commit({ topic: 't', partition: 0, offset: 1n })
  await close(store)
  store = await openStore(path, [v2])
  tx = store.transaction()
  for (let i = 0; i < 250; i += 3) tx.value(v2).put(`k${String(i).padStart(3, '0')}`, { count: i })
  await tx.commit({ topic: 't', partition: 0, offset: 2n })
  await close(store)
}

/** Every stored value of the states (of `state` only, when given), as text: the versions on disk. */
async function storedTexts(path: string, state?: StateDefinition): Promise<string[]> {
  const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer' })
  const out: string[] = []
  try {
    for await (const [k, v] of db.iterator()) if (k[0] === 0x01 && (state === undefined || k.subarray(0, state.prefix.length).equals(state.prefix))) out.push(v.toString('latin1'))
  } finally {
    await db.close()
  }
  return out
}

describe('migrateState', () => {
  it('rewrites every value at the current version in batches, with progress, and leaves no progress record', async () => {
    const path = tempDir()
    await fill(path)
    const store = await openStore(path, [v3, carts3])
    const progress: MigrateProgress[] = []
    let batches = 0
    const restore = interceptBatchWrites((_n, real) => { batches++; return real() })
    try {
      const result = await migrateState(store, v3, { batchSize: 100, onProgress: (p) => progress.push(p) })
      expect(result).toEqual({ state: 'totals', version: 3, scanned: 250, rewritten: 250, done: true, resumed: false })
      await migrateState(store, carts3, { batchSize: 7 })
    } finally {
      restore()
    }
    expect(progress.map((p) => [p.scanned, p.done])).toEqual([[100, false], [200, false], [250, true]])
    expect(batches).toBe(3 + 6)
    expect(await store.getMetadata('tidemark.migrate.totals')).toBeUndefined()
    expect(store.recordedStates()).toEqual([{ name: 'carts', kind: 'map', version: 3 }, { name: 'totals', kind: 'value', version: 3 }])
    const tx = store.transaction()
    for (let i = 0; i < 250; i++) expect(tx.value(v3).getSync(`k${String(i).padStart(3, '0')}`)).toEqual(upgrade3(i))
    await close(store)
    const texts = await storedTexts(path)
    expect(texts.length).toBe(290)
    expect(texts.every((t) => t.startsWith('\u00013:'))).toBe(true)
    // A second run finds nothing to rewrite.
    const again = await openStore(path, [v3, carts3])
    expect(await migrateState(again, v3)).toMatchObject({ scanned: 250, rewritten: 0 })
  })

  it('resumes after a failed batch from the progress it recorded, and ends as an uninterrupted run', async () => {
    const path = tempDir()
    await fill(path)
    let store = await openStore(path, [v3])
    // The third batch's write fails, as a kill would stop it: two batches are in.
    const restore = interceptBatchWrites((n, real) => (n === 3 ? Promise.reject(new Error('killed')) : real()))
    try {
      await expect(migrateState(store, v3, { batchSize: 60 })).rejects.toThrow(/killed/)
    } finally {
      restore()
    }
    await close(store)
    store = await openStore(path, [v3])
    expect(await store.getMetadata('tidemark.migrate.totals')).toMatchObject({ version: 3, scanned: 120 })
    const result = await migrateState(store, v3, { batchSize: 60 })
    expect(result).toMatchObject({ scanned: 250, rewritten: 250, done: true, resumed: true })
    const tx = store.transaction()
    for await (const [k, v] of tx.value(v3).entries()) expect(v).toEqual(upgrade3(Number(k.slice(1))))
    await close(store)
    const texts = await storedTexts(path, v3)
    expect(texts.length).toBe(250)
    expect(texts.every((t) => t.startsWith('\u00013:'))).toBe(true)
  })

  it('refuses an unversioned state and checks its options', async () => {
    const store = await openStore(tempDir(), [plain])
    await expect(migrateState(store, plain)).rejects.toThrow(TypeError)
    const s3 = await openStore(tempDir(), [v3])
    await expect(migrateState(s3, v3, { batchSize: 0 })).rejects.toThrow(/batchSize must be an integer from 1 to 100000, got 0/)
  })
})
