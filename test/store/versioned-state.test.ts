import { ClassicLevel } from 'classic-level'
import { describe, expect, it } from 'vitest'
import {
  PartitionStore, TidemarkError, customCodec, mapState, rawCodec, valueState, type StateDefinition,
} from '../../src/index.js'
import { interceptNextBatchWrite } from '../helpers/faults.js'
import { openStores } from '../helpers/open-stores.js'
import { tempDir } from '../helpers/tmp.js'

const T = 'events'

// Version 1: { n }. Version 2: { count }. Version 3: { count, last }.
type V1 = { n: number }
type V2 = { count: number }
type V3 = { count: number; last: string | null }
const up = {
  1: (v: V1): V2 => ({ count: v.n }),
  2: (v: V2): V3 => ({ count: v.count, last: null }),
}
const upgrade3 = (v: V1): V3 => up[2](up[1](v))

/** A codec that is not JSON: JSON text with its bytes reversed. */
const packed = customCodec<{ n?: number; count?: number; last?: string | null }>({
  name: 'packed',
  encode: (v) => Buffer.from(JSON.stringify(v)).reverse(),
  decode: (b) => JSON.parse(Buffer.from(b).reverse().toString('utf8')) as { n: number },
})

function defs(version: 1 | 2 | 3 | undefined) {
  const opts = version === undefined ? {} : version === 1 ? { version } : version === 2 ? { version, upgrade: { 1: up[1] } } : { version, upgrade: up }
  return {
    totals: valueState<V3>('totals', opts),
    blobs: valueState<V3, 'bytes'>('blobs', { ...opts, keyType: 'bytes' }),
    carts: mapState<V3>('carts', opts),
    binCarts: mapState<V3, 'bytes', 'bytes'>('binCarts', { ...opts, keyType: 'bytes', subKeyType: 'bytes' }),
    packed: valueState<V3>('packed', { ...opts, codec: packed as never }),
  }
}
function list(d: ReturnType<typeof defs>, withPacked = true): StateDefinition[] {
  return [d.totals, d.blobs, d.carts, d.binCarts, ...(withPacked ? [d.packed] : [])] as StateDefinition[]
}

const stores = openStores()
const openStore = stores.open
const close = stores.close

/** Every LevelDB entry of a closed store, hex, so that a test can see nothing changed. */
async function rawEntries(path: string): Promise<string[]> {
  const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer' })
  const out: string[] = []
  try {
    for await (const [k, v] of db.iterator()) out.push(`${k.toString('hex')}=${v.toString('hex')}`)
  } finally {
    await db.close()
  }
  return out
}

async function all<X>(it: AsyncIterable<X>): Promise<X[]> {
  const out: X[] = []
  for await (const x of it) out.push(x)
  return out
}

const KEYS = ['alice', 'bob', 'zoë']
const BYTE_KEYS = [Buffer.of(0x00, 0xff), Buffer.of(0x01), Buffer.from('text', 'utf8')]

/** Writes every key of every state at version 1; `version` undefined writes them unversioned (as before states had versions). */
async function writeV1(path: string, version: 1 | undefined, withPacked: boolean): Promise<void> {
  const d = defs(version)
  const store = await openStore(path, list(d, withPacked))
  const tx = store.transaction()
  KEYS.forEach((k, i) => {
    tx.value(d.totals).put(k, { n: i } as never)
    tx.map(d.carts).put(k, 'item', { n: 10 + i } as never)
    if (withPacked) tx.value(d.packed).put(k, { n: 20 + i } as never)
  })
  BYTE_KEYS.forEach((k, i) => {
    tx.value(d.blobs).put(k, { n: 30 + i } as never)
    tx.map(d.binCarts).put(k, k, { n: 40 + i } as never)
  })
  await tx.commit({ topic: T, partition: 0, offset: 1n })
  await close(store)
}

describe('versioned states', () => {
  for (const written of [undefined, 1] as const) {
    it(`reads values written ${written === undefined ? 'unversioned' : 'at version 1'} at version 3, upgraded step by step (value and map states, string and bytes keys)`, async () => {
      const path = tempDir()
      // A non-JSON codec holds headers only: it takes part when the values were written with a version.
      const withPacked = written === 1
      await writeV1(path, written, withPacked)
      const d = defs(3)
      const store = await openStore(path, list(d, withPacked))
      const tx = store.transaction()
      for (const [i, k] of KEYS.entries()) {
        expect(await tx.value(d.totals).get(k)).toEqual(upgrade3({ n: i }))
        expect(tx.value(d.totals).getSync(k)).toEqual(upgrade3({ n: i }))
        expect(await tx.map(d.carts).get(k, 'item')).toEqual(upgrade3({ n: 10 + i }))
        expect(tx.map(d.carts).getSync(k, 'item')).toEqual(upgrade3({ n: 10 + i }))
        expect(await all(tx.map(d.carts).entries(k))).toEqual([['item', upgrade3({ n: 10 + i })]])
        if (withPacked) expect(await tx.value(d.packed).get(k)).toEqual(upgrade3({ n: 20 + i }))
      }
      for (const [i, k] of BYTE_KEYS.entries()) {
        expect(await tx.value(d.blobs).get(k)).toEqual(upgrade3({ n: 30 + i }))
        expect(await tx.map(d.binCarts).get(k, k)).toEqual(upgrade3({ n: 40 + i }))
        expect(await all(tx.map(d.binCarts).entries(k))).toEqual([[new Uint8Array(k), upgrade3({ n: 40 + i })]])
      }
      const sorted = [...KEYS].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))
      expect(await all(tx.value(d.totals).entries())).toEqual(sorted.map((k) => [k, upgrade3({ n: KEYS.indexOf(k) })]))
      expect((await all(tx.value(d.blobs).entries())).map(([, v]) => v)).toEqual([0, 1, 2].map((i) => upgrade3({ n: 30 + i })))
    })
  }

  it('writes at the current version: header, then the codec bytes, and a later read needs no upgrade', async () => {
    const path = tempDir()
    await writeV1(path, undefined, false)
    const d = defs(3)
    const store = await openStore(path, list(d, false))
    const tx = store.transaction()
    const v = (await tx.value(d.totals).get('alice'))!
    tx.value(d.totals).put('alice', { ...v, last: 'x' })
    // A read of the pending write, and a scan that lays it over the store.
    expect(await tx.value(d.totals).get('alice')).toEqual({ count: 0, last: 'x' })
    expect((await all(tx.value(d.totals).entries()))[0]).toEqual(['alice', { count: 0, last: 'x' }])
    await tx.commit({ topic: T, partition: 0, offset: 2n })
    await close(store)
    const entries = await rawEntries(path)
    const alice = entries.find((e) => e.startsWith(Buffer.concat([Buffer.of(1, 0, 6), Buffer.from('totals'), Buffer.from('alice')]).toString('hex')))!
    expect(Buffer.from(alice.split('=')[1]!, 'hex').toString('latin1')).toBe('\u00013:{"count":0,"last":"x"}')
    // bob stays as written (unversioned JSON: read as version 1).
    const bob = entries.find((e) => e.startsWith(Buffer.concat([Buffer.of(1, 0, 6), Buffer.from('totals'), Buffer.from('bob')]).toString('hex')))!
    expect(Buffer.from(bob.split('=')[1]!, 'hex').toString('latin1')).toBe('{"n":1}')
    const again = await openStore(path, list(defs(3), false))
    expect(await again.transaction().value(defs(3).totals).get('alice')).toEqual({ count: 0, last: 'x' })
  })

  it('an upgraded primitive is what the value cache keeps', async () => {
    const path = tempDir()
    const plain = valueState<number>('n')
    let store = await openStore(path, [plain])
    let tx = store.transaction()
    tx.value(plain).put('k', 4)
    await tx.commit({ topic: T, partition: 0, offset: 1n })
    await close(store)
    let calls = 0
    const v2 = valueState<number>('n', { version: 2, upgrade: { 1: (x: number) => { calls++; return x * 10 } } })
    store = await openStore(path, [v2])
    tx = store.transaction()
    expect(tx.value(v2).getSync('k')).toBe(40)
    expect(store.transaction().value(v2).getSync('k')).toBe(40)
    expect(calls).toBe(1)
    tx = store.transaction()
    tx.value(v2).put('k', 41)
    await tx.commit({ topic: T, partition: 0, offset: 2n })
    expect(store.transaction().value(v2).getSync('k')).toBe(41)
  })

  it('refuses a store holding a state at a higher version with TIDEMARK_STATE_VERSION_AHEAD, before writing anything', async () => {
    const path = tempDir()
    const d3 = defs(3)
    let store = await openStore(path, list(d3))
    const tx = store.transaction()
    tx.map(d3.carts).put('k', 's', { count: 1, last: 'a' })
    await tx.commit({ topic: T, partition: 0, offset: 1n })
    await close(store)
    const before = await rawEntries(path)

    for (const version of [2, undefined] as const) {
      // A new state beside it would be registered by an open that went on.
      const err = await PartitionStore.open({ path, states: [...list(defs(version)), valueState('added')] }).catch((e: unknown) => e)
      expect(err).toBeInstanceOf(TidemarkError)
      expect((err as TidemarkError).code).toBe('TIDEMARK_STATE_VERSION_AHEAD')
      expect((err as TidemarkError).message).toContain('"carts"')
      expect((err as TidemarkError).message).toContain('version 3')
      expect((err as TidemarkError).message).toContain(version === undefined ? 'no version' : 'version 2')
      expect((err as TidemarkError).details).toEqual({ state: 'carts', storedVersion: 3, declaredVersion: version ?? null })
    }
    expect(await rawEntries(path)).toEqual(before)
    // The states that were only declared at version 3 (nothing written) do not hold the store back.
    store = await openStore(path, [...list(defs(3)).filter((d) => d.name !== 'carts'), mapState('carts', { version: 3, upgrade: up })])
    expect(store.recordedStates().find((s) => s.name === 'totals')).toEqual({ name: 'totals', kind: 'value' })
    expect(store.recordedStates().find((s) => s.name === 'carts')).toEqual({ name: 'carts', kind: 'map', version: 3 })
  })

  it('records the new version in the batch of the first write at it: a failed commit records nothing', async () => {
    const path = tempDir()
    const d2 = defs(2)
    let store = await openStore(path, list(d2))
    const restore = interceptNextBatchWrite(() => Promise.reject(new Error('disk full')))
    try {
      const tx = store.transaction()
      tx.value(d2.totals).put('a', { count: 1 } as never)
      await expect(tx.commit({ topic: T, partition: 0, offset: 1n })).rejects.toMatchObject({ code: 'TIDEMARK_COMMIT_FAILED' })
      // The refused transaction is kept: its retry writes the record with the value.
      expect(store.recordedStates().find((s) => s.name === 'totals')!.version).toBeUndefined()
      await close(store)
    } finally {
      restore()
    }
    // Nothing at version 2 was written: code at version 1 still opens it.
    store = await openStore(path, list(defs(1)))
    await close(store)
    store = await openStore(path, list(d2))
    const tx = store.transaction()
    tx.value(d2.totals).put('a', { count: 1 } as never)
    await tx.commit({ topic: T, partition: 0, offset: 1n })
    await close(store)
    await expect(PartitionStore.open({ path, states: list(defs(1)) })).rejects.toMatchObject({ code: 'TIDEMARK_STATE_VERSION_AHEAD' })
  })

  it('keeps the unversioned layout of states without a version byte for byte', async () => {
    const path = tempDir()
    const counts = valueState<number>('counts')
    const blobs = valueState('blobs', { codec: rawCodec(), keyType: 'bytes' })
    const store = await openStore(path, [counts, blobs])
    const tx = store.transaction()
    tx.value(counts).put('a', 7)
    tx.value(blobs).put(Buffer.of(1), Buffer.of(0x01, 0x33, 0x3a))
    await tx.commit({ topic: T, partition: 0, offset: 1n })
    await close(store)
    const entries = await rawEntries(path)
    expect(entries).toContain(`${Buffer.concat([Buffer.of(1, 0, 6), Buffer.from('countsa')]).toString('hex')}=${Buffer.from('7').toString('hex')}`)
    expect(entries).toContain(`${Buffer.concat([Buffer.of(1, 0, 5), Buffer.from('blobs'), Buffer.of(1)]).toString('hex')}=01333a`)
    expect(entries.filter((e) => e.startsWith('0073'))).toEqual([
      `${Buffer.from('\u0000sblobs').toString('hex')}=${Buffer.from('{"kind":"value"}').toString('hex')}`,
      `${Buffer.from('\u0000scounts').toString('hex')}=${Buffer.from('{"kind":"value"}').toString('hex')}`,
    ])
  })

  it('refuses a version for a non-JSON state that holds unversioned values, and allows it on an empty one', async () => {
    const path = tempDir()
    const plain = valueState<Uint8Array>('raw', { codec: rawCodec() })
    const empty = valueState<Uint8Array>('rawEmpty', { codec: rawCodec() })
    let store = await openStore(path, [plain, empty])
    const tx = store.transaction()
    tx.value(plain).put('k', Buffer.of(1, 0x32, 0x3a, 9))
    await tx.commit({ topic: T, partition: 0, offset: 1n })
    await close(store)
    const err = await PartitionStore.open({ path, states: [valueState('raw', { codec: rawCodec(), version: 2, upgrade: { 1: (v: Uint8Array) => v } })] }).catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'TIDEMARK_STATE_CONFLICT' })
    expect((err as Error).message).toContain('"raw"')
    store = await openStore(path, [valueState('rawEmpty', { codec: rawCodec(), version: 2, upgrade: { 1: (v: Uint8Array) => v } })])
    await close(store)
  })

  it('fails a read whose upgrade throws with TIDEMARK_STATE_UPGRADE_FAILED, naming the state, key and step', async () => {
    const path = tempDir()
    await writeV1(path, undefined, false)
    const bad = valueState('totals', { version: 2, upgrade: { 1: () => { throw new Error('no') } } })
    const store = await openStore(path, [bad])
    const err = await store.transaction().value(bad).get('bob').catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'TIDEMARK_STATE_UPGRADE_FAILED', details: { state: 'totals', fromVersion: 1 } })
    expect((err as Error).message).toContain('"bob"')
    expect((err as Error).message).toContain('1 -> 2')
  })

  it('refuses a definition of the same state at another version than the store was opened with', async () => {
    const store = await openStore(tempDir(), list(defs(3)))
    expect(() => store.transaction().value(defs(2).totals)).toThrow(/state "totals" was opened with version 3; this definition has version 2/)
    expect(() => store.transaction().map(mapState('carts'))).toThrow(expect.objectContaining({ code: 'TIDEMARK_STATE_CONFLICT' }) as Error)
  })

  it('checks version and upgrade once, naming the option', () => {
    expect(() => valueState('s', { version: 0 })).toThrow(/options.version must be an integer from 1 to 65535, got 0/)
    expect(() => valueState('s', { version: 1.5 })).toThrow(RangeError)
    expect(() => mapState('s', { version: 3, upgrade: { 1: (v: unknown) => v } })).toThrow(/options.upgrade\[2\] must be a function/)
    expect(() => valueState('s', { version: 2, upgrade: { 1: (v: unknown) => v, 2: (v: unknown) => v } })).toThrow(/function for version "2"/)
    expect(() => valueState('s', { upgrade: { 1: (v: unknown) => v } })).toThrow(/options.upgrade needs options.version/)
    expect(valueState('s', { version: 1 }).version).toBe(1)
    expect(valueState('s').version).toBeUndefined()
  })
})
