import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { ClassicLevel } from 'classic-level'
import { afterEach, describe, expect, it } from 'vitest'
import {
  PartitionStore, TidemarkError, customCodec, mapState, rawCodec, valueState, type PartitionStoreOptions,
} from '../../src/index.js'
import { uncachedState } from '../../src/store/state.js'
import { interceptNextBatchWrite } from '../helpers/faults.js'
import { tempDir } from '../helpers/tmp.js'

const counts = valueState<number>('counts')
const blobs = valueState('blobs', { codec: rawCodec(), keyType: 'bytes' })
const orders = mapState<{ amount: number }>('orders')
const T = 'events'

const open: PartitionStore[] = []
async function openStore(options: Partial<PartitionStoreOptions> & { path: string }): Promise<PartitionStore> {
  const store = await PartitionStore.open({ states: [counts, blobs, orders], ...options })
  open.push(store)
  return store
}
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()))
})

/** The state entries (keys starting 0x01) of a closed store, as LevelDB holds them. */
async function storedStateEntries(path: string): Promise<Array<[Buffer, Buffer]>> {
  const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer' })
  const out: Array<[Buffer, Buffer]> = []
  try {
    for await (const [k, v] of db.iterator()) if (k[0] === 0x01) out.push([k, v])
  } finally {
    await db.close()
  }
  return out
}

async function all<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const x of it) out.push(x)
  return out
}

describe('transactions', () => {
  it('reads its own writes, hides them from others until commit, then shows them', async () => {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    expect(await tx.value(counts).get('a')).toBe(1)
    const other = store.transaction()
    expect(await other.value(counts).get('a')).toBeUndefined()
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    expect(await other.value(counts).get('a')).toBe(1)
    expect(store.position(T, 0)).toBe(0n)
  })

  it('an aborted or abandoned transaction leaves nothing visible', async () => {
    const path = tempDir()
    const store = await openStore({ path })
    const aborted = store.transaction()
    aborted.value(counts).put('a', 1)
    aborted.abort()
    const abandoned = store.transaction()
    abandoned.value(counts).put('b', 2)
    await store.close()
    const reopened = await openStore({ path })
    const tx = reopened.transaction()
    expect(await all(tx.value(counts).entries())).toEqual([])
    expect(reopened.positions()).toEqual([])
    expect(() => aborted.value(counts)).toThrow(expect.objectContaining({ code: 'TIDEMARK_TRANSACTION_CLOSED' }))
  })

  it('a commit that LevelDB refuses leaves nothing visible and the transaction retriable', async () => {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    // Fault injection: the next commit of any classic-level database fails once.
    const restore = interceptNextBatchWrite(() => Promise.reject(new Error('injected: disk full')))
    try {
      const err = await tx.commit({ topic: T, partition: 0, offset: 0n }).catch((e: unknown) => e)
      expect(err).toBeInstanceOf(TidemarkError)
      expect(err).toMatchObject({ code: 'TIDEMARK_COMMIT_FAILED', retriable: true })
      expect((err as Error).cause).toMatchObject({ message: 'injected: disk full' })
      expect(store.position(T, 0)).toBeUndefined()
      expect(await store.transaction().value(counts).get('a')).toBeUndefined()
      await tx.commit({ topic: T, partition: 0, offset: 0n })
    } finally {
      restore()
    }
    expect(await store.transaction().value(counts).get('a')).toBe(1)
    expect(store.position(T, 0)).toBe(0n)
  })

  it('beforeCommit() runs as each commit attempt begins, its writes commit with the batch, and an abort or a success drops it', async () => {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    let runs = 0
    let value = 1
    tx.beforeCommit(() => {
      runs++
      tx.value(counts).put('late', value)
    })
    const restore = interceptNextBatchWrite(() => Promise.reject(new Error('injected: disk full')))
    try {
      await expect(tx.commit({ topic: T, partition: 0, offset: 0n })).rejects.toMatchObject({ code: 'TIDEMARK_COMMIT_FAILED' })
    } finally {
      restore()
    }
    expect(runs).toBe(1)
    // The retry runs it again: what it puts is what holds as that attempt begins.
    value = 2
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    expect(runs).toBe(2)
    expect(await store.transaction().value(counts).get('late')).toBe(2)
    expect(() => tx.beforeCommit(() => undefined)).toThrow(expect.objectContaining({ code: 'TIDEMARK_TRANSACTION_CLOSED' }))
    const aborted = store.transaction()
    aborted.beforeCommit(() => { throw new Error('must not run') })
    aborted.abort()
    const next = store.transaction()
    next.value(counts).put('b', 1)
    await next.commit({ topic: T, partition: 0, offset: 1n })
    // A callback that throws refuses the commit and leaves the transaction open.
    const failing = store.transaction()
    failing.value(counts).put('c', 1)
    failing.beforeCommit(() => { throw new Error('not ready') })
    await expect(failing.commit({ topic: T, partition: 0, offset: 2n })).rejects.toThrow('not ready')
    expect(failing.isOpen).toBe(true)
    expect(await store.transaction().value(counts).get('c')).toBeUndefined()
    expect(store.position(T, 0)).toBe(1n)
  })

  it('deletes are visible in the transaction and committed', async () => {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    tx.value(counts).put('b', 2)
    await tx.commitWithoutPosition()
    const tx2 = store.transaction()
    tx2.value(counts).delete('a')
    expect(await tx2.value(counts).get('a')).toBeUndefined()
    expect(await all(tx2.value(counts).entries())).toEqual([['b', 2]])
    await tx2.commitWithoutPosition()
    expect(await store.transaction().value(counts).get('a')).toBeUndefined()
  })

  it('a commit with no writes and no position is a no-op; committed transactions refuse reuse', async () => {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    await tx.commitWithoutPosition()
    await expect(tx.commitWithoutPosition()).rejects.toMatchObject({ code: 'TIDEMARK_TRANSACTION_CLOSED' })
    expect(() => tx.value(counts).put('a', 1)).toThrow(expect.objectContaining({ code: 'TIDEMARK_TRANSACTION_CLOSED' }))
  })

  it('commit() without a position is a TypeError naming it, and writes nothing; commitWithoutPosition() says so explicitly', async () => {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    const commit = tx.commit as (position?: unknown) => Promise<void>
    for (const missing of [undefined, null, []]) {
      await expect(commit.call(tx, missing)).rejects.toThrow(TypeError)
      await expect(commit.call(tx, missing)).rejects.toThrow(/^position must be .*commitWithoutPosition\(\)/)
    }
    expect(tx.isOpen).toBe(true)
    expect(await store.transaction().value(counts).get('a')).toBeUndefined()
    await tx.commitWithoutPosition()
    expect(await store.transaction().value(counts).get('a')).toBe(1)
    expect(store.positions()).toEqual([])
  })
})

describe('positions', () => {
  it('are per source partition, 64-bit, and survive reopen', async () => {
    const path = tempDir()
    const store = await openStore({ path })
    const big = (1n << 62n) + 12345n
    const tx = store.transaction()
    tx.value(counts).put('x', 1)
    await tx.commit([{ topic: T, partition: 0, offset: big }, { topic: T, partition: 3, offset: 7n }, { topic: 'other', partition: 0, offset: 1n }])
    await store.close()
    const again = await openStore({ path })
    expect(again.position(T, 0)).toBe(big)
    expect(again.position(T, 3)).toBe(7n)
    expect(again.position('other', 0)).toBe(1n)
    expect(again.position(T, 1)).toBeUndefined()
    expect(again.positions()).toHaveLength(3)
  })

  it('a commit at or before the stored position is refused and changes nothing, unless a rewind is asked for', async () => {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    await tx.commit({ topic: T, partition: 0, offset: 10n })
    for (const offset of [10n, 9n, 0n]) {
      const replay = store.transaction()
      replay.value(counts).put('a', 99)
      const err = await replay.commit({ topic: T, partition: 0, offset }).catch((e: unknown) => e)
      expect(err).toMatchObject({ code: 'TIDEMARK_POSITION_NOT_ADVANCING', retriable: false, details: { offset, storedOffset: 10n } })
      expect((err as Error).message).toContain('events/0@10')
    }
    expect(await store.transaction().value(counts).get('a')).toBe(1)
    expect(store.position(T, 0)).toBe(10n)
    const rewind = store.transaction()
    rewind.value(counts).put('a', 5)
    await rewind.commit({ topic: T, partition: 0, offset: 3n }, { allowRewind: true })
    expect(store.position(T, 0)).toBe(3n)
    expect(await store.transaction().value(counts).get('a')).toBe(5)
  })

  it('rejects malformed positions with TypeError/RangeError naming the field', async () => {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    await expect(tx.commit({ topic: T, partition: 0, offset: 5 as unknown as bigint })).rejects.toThrow(/position\.offset must be a bigint/)
    await expect(tx.commit({ topic: T, partition: 0, offset: -1n })).rejects.toBeInstanceOf(RangeError)
    await expect(tx.commit({ topic: T, partition: 0, offset: 1n << 63n })).rejects.toBeInstanceOf(RangeError)
    await expect(tx.commit({ topic: '', partition: 0, offset: 1n })).rejects.toThrow(/position\.topic/)
    await expect(tx.commit({ topic: T, partition: 1.5, offset: 1n })).rejects.toThrow(/position\.partition/)
    await expect(tx.commit([{ topic: T, partition: 0, offset: 1n }, { topic: T, partition: 0, offset: 2n }])).rejects.toThrow(/twice/)
    await tx.commit({ topic: T, partition: 0, offset: 1n })
    expect(store.position(T, 0)).toBe(1n)
  })
})

describe('states, keys and codecs', () => {
  it('map state scans sub-keys in order with prefix, range, reverse and limit, over committed and pending writes', async () => {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    const m = tx.map(orders)
    for (const id of ['o3', 'o1', 'o5']) m.put('alice', id, { amount: Number(id.slice(1)) })
    m.put('bob', 'o1', { amount: 100 })
    m.put('alic', 'o9', { amount: 9 }) // a key that is a prefix of another key
    await tx.commitWithoutPosition()
    const tx2 = store.transaction()
    const m2 = tx2.map(orders)
    m2.put('alice', 'o2', { amount: 2 }) // pending, between committed entries
    m2.delete('alice', 'o3') // pending delete of a committed entry
    m2.put('alice', 'o5', { amount: 55 }) // pending overwrite
    const ids = async (opts = {}) => (await all(m2.entries('alice', opts))).map(([k, v]) => `${k}=${v.amount}`)
    expect(await ids()).toEqual(['o1=1', 'o2=2', 'o5=55'])
    expect(await ids({ reverse: true })).toEqual(['o5=55', 'o2=2', 'o1=1'])
    expect(await ids({ gt: 'o1', lte: 'o5' })).toEqual(['o2=2', 'o5=55'])
    expect(await ids({ gte: 'o2', lt: 'o5' })).toEqual(['o2=2'])
    expect(await ids({ limit: 2 })).toEqual(['o1=1', 'o2=2'])
    expect(await ids({ reverse: true, limit: 1 })).toEqual(['o5=55'])
    expect(await ids({ prefix: 'o' })).toHaveLength(3)
    expect(await ids({ gt: 'o9' })).toEqual([])
    expect(await all(m2.entries('alic'))).toEqual([['o9', { amount: 9 }]])
    await m2.clear('alice')
    expect(await ids()).toEqual([])
    expect(await m2.get('bob', 'o1')).toEqual({ amount: 100 })
    await tx2.commitWithoutPosition()
    expect(await all(store.transaction().map(orders).entries('alice'))).toEqual([])
  })

  it('value state scans keys in byte order with a prefix', async () => {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    for (const k of ['b2', 'a1', 'b1', 'c1', 'b10']) tx.value(counts).put(k, k.length)
    await tx.commitWithoutPosition()
    const view = store.transaction().value(counts)
    expect((await all(view.entries({ prefix: 'b' }))).map(([k]) => k)).toEqual(['b1', 'b10', 'b2'])
    expect((await all(view.entries({ gte: 'b10', lt: 'c' }))).map(([k]) => k)).toEqual(['b10', 'b2'])
  })

  it('no two states, and no state and the metadata, ever collide', async () => {
    const a = valueState<string>('a')
    const ab = valueState<string>('ab')
    const mA = mapState<string>('m')
    const mAB = mapState<string>('mm')
    const store = await openStore({ path: tempDir(), states: [a, ab, mA, mAB] })
    const tx = store.transaction()
    tx.value(a).put('bc', 'a/bc')
    tx.value(ab).put('c', 'ab/c')
    tx.map(mA).put('k', 'xy', 'm/k/xy')
    tx.map(mA).put('kx', 'y', 'm/kx/y')
    tx.map(mAB).put('k', 'xy', 'mm/k/xy')
    // A key made of the bytes of the store's own metadata namespace.
    tx.value(a).put('\u0000p', 'a/meta-like')
    await tx.commit({ topic: T, partition: 0, offset: 1n })
    const r = store.transaction()
    expect(await all(r.value(a).entries())).toEqual([['\u0000p', 'a/meta-like'], ['bc', 'a/bc']])
    expect(await all(r.value(ab).entries())).toEqual([['c', 'ab/c']])
    expect(await all(r.map(mA).entries('k'))).toEqual([['xy', 'm/k/xy']])
    expect(await all(r.map(mA).entries('kx'))).toEqual([['y', 'm/kx/y']])
    expect(await all(r.map(mAB).entries('k'))).toEqual([['xy', 'mm/k/xy']])
    expect(store.positions()).toEqual([{ topic: T, partition: 0, offset: 1n }])
  })

  it('raw and custom codecs round-trip; bytes keys scan as bytes', async () => {
    const upper = valueState<string>('upper', {
      codec: customCodec({ name: 'upper', encode: (s: string) => Buffer.from(s.toUpperCase()), decode: (b) => Buffer.from(b).toString().toLowerCase() }),
    })
    const store = await openStore({ path: tempDir(), states: [blobs, upper] })
    const tx = store.transaction()
    tx.value(blobs).put(Uint8Array.of(0, 255), Uint8Array.of(1, 2, 3))
    tx.value(blobs).put(Uint8Array.of(0, 1), Uint8Array.of(9))
    tx.value(upper).put('k', 'hello')
    await tx.commitWithoutPosition()
    const r = store.transaction()
    const entries = await all(r.value(blobs).entries())
    expect(entries.map(([k, v]) => [[...k], [...v]])).toEqual([[[0, 1], [9]], [[0, 255], [1, 2, 3]]])
    expect(await r.value(upper).get('k')).toBe('hello')
  })

  it('a custom codec that calls itself json is used, not taken for the built-in one', async () => {
    const tagged = valueState<{ n: number }>('tagged', {
      codec: customCodec({ name: 'json', encode: (v: { n: number }) => Buffer.from(`n=${v.n}`), decode: (b) => ({ n: Number(Buffer.from(b).toString().slice(2)) }) }),
    })
    const path = tempDir()
    const store = await openStore({ path, states: [tagged] })
    const tx = store.transaction()
    tx.value(tagged).put('a', { n: 7 })
    expect(await tx.value(tagged).get('a')).toEqual({ n: 7 })
    await tx.commitWithoutPosition()
    expect(await store.transaction().value(tagged).get('a')).toEqual({ n: 7 })
    await store.close()
    expect((await storedStateEntries(path)).map(([, v]) => v.toString())).toEqual(['n=7'])
  })

  it('JSON states store keys and values as UTF-8 bytes, ASCII or not, and read them back exactly', async () => {
    const notes = valueState<{ text: string } | string>('notes')
    const path = tempDir()
    const store = await openStore({ path, states: [notes] })
    const keys = ['plain', 'caf\u00e9', '\u{1f600}', 'nul\u0000in', '\u007f']
    const tx = store.transaction()
    for (const k of keys) tx.value(notes).put(k, { text: `v:${k}` })
    tx.value(notes).put('prim\u00e9', 'caf\u00e9')
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    const r = store.transaction().value(notes)
    for (const k of keys) expect(await r.get(k)).toEqual({ text: `v:${k}` })
    expect(await r.get('prim\u00e9')).toBe('caf\u00e9')
    const sorted = [...keys, 'prim\u00e9'].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))
    expect((await all(r.entries())).map(([k]) => k)).toEqual(sorted)
    await store.close()
    // The bytes LevelDB holds: the state prefix, the key's UTF-8, the value's UTF-8 JSON.
    const stored = new Map((await storedStateEntries(path)).map(([k, v]) => [k.subarray(3 + 'notes'.length).toString('hex'), v.toString('hex')]))
    for (const k of keys) expect(stored.get(Buffer.from(k).toString('hex'))).toBe(Buffer.from(JSON.stringify({ text: `v:${k}` })).toString('hex'))
    expect(stored.get(Buffer.from('prim\u00e9').toString('hex'))).toBe(Buffer.from('"caf\u00e9"').toString('hex'))
  })

  it('metadata documents survive reopen', async () => {
    const path = tempDir()
    const store = await openStore({ path })
    await store.setMetadata('owner', { epoch: 3 })
    await store.close()
    expect(await (await openStore({ path })).getMetadata('owner')).toEqual({ epoch: 3 })
  })
})

describe('bad input leaves the store usable and unchanged', () => {
  async function seeded(): Promise<PartitionStore> {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    return store
  }

  async function expectUnchanged(store: PartitionStore): Promise<void> {
    const tx = store.transaction()
    expect(await all(tx.value(counts).entries())).toEqual([['a', 1]])
    expect(store.position(T, 0)).toBe(0n)
    tx.value(counts).put('b', 2)
    await tx.commit({ topic: T, partition: 0, offset: 1n })
  }

  it('unserialisable values: TIDEMARK_ENCODE_FAILED at put, nothing buffered', async () => {
    const store = await seeded()
    const tx = store.transaction()
    const cyclic: Record<string, unknown> = {}
    cyclic.self = cyclic
    const view = tx.value(valueState<unknown>('counts'))
    expect(() => view.put('x', cyclic)).toThrow(expect.objectContaining({ code: 'TIDEMARK_ENCODE_FAILED' }))
    expect(() => view.put('x', 10n)).toThrow(/BigInt/)
    expect(() => view.put('x', undefined)).toThrow(expect.objectContaining({ code: 'TIDEMARK_ENCODE_FAILED' }))
    const badCodec = valueState<number>('bad', { codec: customCodec({ encode: () => 'nope' as unknown as Uint8Array, decode: () => 0 }) })
    const s2 = await openStore({ path: tempDir(), states: [badCodec] })
    expect(() => s2.transaction().value(badCodec).put('k', 1)).toThrow(/returned string/)
    expect(tx.size).toBe(0)
    tx.abort()
    await expectUnchanged(store)
  })

  it('empty and oversize keys: RangeError naming the state; wrong key types: TypeError', async () => {
    const store = await seeded()
    const tx = store.transaction()
    expect(() => tx.value(counts).put('', 1)).toThrow(RangeError)
    expect(() => tx.value(counts).put('', 1)).toThrow(/key of state counts must not be empty/)
    expect(() => tx.value(counts).put('k'.repeat(16385), 1)).toThrow(/16385 bytes; the limit is 16384/)
    expect(() => tx.map(orders).put('k', '', { amount: 1 })).toThrow(/sub-key of state orders must not be empty/)
    expect(() => tx.value(counts).put(42 as unknown as string, 1)).toThrow(TypeError)
    await expect(tx.value(counts).get('')).rejects.toThrow(RangeError)
    tx.value(counts).put('k'.repeat(16384), 1) // the limit itself is fine
    tx.abort()
    await expectUnchanged(store)
  })

  it('unknown states and kind mismatches are refused', async () => {
    const store = await seeded()
    const tx = store.transaction()
    expect(() => tx.value(valueState('nope'))).toThrow(expect.objectContaining({ code: 'TIDEMARK_UNKNOWN_STATE' }))
    const wrongKind = mapState('counts') as unknown as typeof counts
    expect(() => tx.value(wrongKind)).toThrow(expect.objectContaining({ code: 'TIDEMARK_STATE_CONFLICT' }))
    await expect(PartitionStore.open({ path: tempDir(), states: [counts, valueState('counts')] })).rejects.toMatchObject({ code: 'TIDEMARK_STATE_CONFLICT' })
    await expectUnchanged(store)
  })

  it('reopening a state with another kind is refused', async () => {
    const path = tempDir()
    const store = await openStore({ path })
    await store.close()
    await expect(PartitionStore.open({ path, states: [mapState('counts')] })).rejects.toMatchObject({ code: 'TIDEMARK_STATE_CONFLICT' })
    const again = await openStore({ path })
    expect(again.positions()).toEqual([])
  })

  it('undecodable stored bytes: TIDEMARK_DECODE_FAILED naming the state and key', async () => {
    const store = await seeded()
    const strict = valueState<number>('counts', { codec: customCodec({ encode: (n: number) => Buffer.from(String(n)), decode: () => { throw new Error('boom') } }) })
    const path = store.path
    await store.close()
    const other = await openStore({ path, states: [strict] })
    await expect(other.transaction().value(strict).get('a')).rejects.toMatchObject({ code: 'TIDEMARK_DECODE_FAILED', message: expect.stringContaining('state counts key "a"') })
  })

  it('stored bytes that are not JSON: TIDEMARK_DECODE_FAILED from a JSON state, and the store stays usable', async () => {
    const path = tempDir()
    const rawCounts = valueState('counts', { codec: rawCodec() })
    const writer = await openStore({ path, states: [rawCounts] })
    const tx = writer.transaction()
    tx.value(rawCounts).put('a', Buffer.from('{not json'))
    await tx.commitWithoutPosition()
    await writer.close()
    const reader = await openStore({ path })
    await expect(reader.transaction().value(counts).get('a')).rejects.toMatchObject({ code: 'TIDEMARK_DECODE_FAILED', message: expect.stringContaining('state counts key "a"') })
    expect(await reader.transaction().value(counts).get('b')).toBeUndefined()
  })

  it('stored JSON whose bytes are not UTF-8 fails with TIDEMARK_DECODE_FAILED instead of reading back altered; a stored U+FFFD reads back', async () => {
    const path = tempDir()
    const notes = valueState<string>('notes')
    const rawNotes = valueState('notes', { codec: rawCodec() })
    const writer = await openStore({ path, states: [rawNotes] })
    const tx = writer.transaction()
    tx.value(rawNotes).put('bad', Buffer.from([0x22, 0x61, 0xff, 0x62, 0x22])) // "a\xffb"
    tx.value(rawNotes).put('good', Buffer.from(JSON.stringify('a\ufffdb')))
    await tx.commitWithoutPosition()
    await writer.close()
    const reader = await openStore({ path, states: [notes] })
    await expect(reader.transaction().value(notes).get('bad')).rejects.toMatchObject({ code: 'TIDEMARK_DECODE_FAILED' })
    expect(() => reader.transaction().value(notes).getSync('bad')).toThrow(expect.objectContaining({ code: 'TIDEMARK_DECODE_FAILED' }))
    expect(await reader.transaction().value(notes).get('good')).toBe('a\ufffdb')
  })

  it('a closed store refuses every call with TIDEMARK_STORE_CLOSED', async () => {
    const store = await seeded()
    const tx = store.transaction()
    tx.value(counts).put('z', 1)
    await store.close()
    expect(() => store.transaction()).toThrow(expect.objectContaining({ code: 'TIDEMARK_STORE_CLOSED' }))
    await expect(tx.commit({ topic: T, partition: 0, offset: 5n })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_CLOSED' })
    expect(() => tx.value(counts)).toThrow(expect.objectContaining({ code: 'TIDEMARK_STORE_CLOSED' }))
    await store.close() // idempotent
  })

  it('options are validated at open', async () => {
    await expect(PartitionStore.open({ path: '' })).rejects.toThrow(/options\.path/)
    await expect(PartitionStore.open({ path: tempDir(), maxKeyBytes: 70000 })).rejects.toThrow(RangeError)
    await expect(PartitionStore.open({ path: tempDir(), states: [{} as never] })).rejects.toThrow(TypeError)
    await expect(PartitionStore.open({ path: tempDir(), cacheSize: 10 })).rejects.toThrow(/options\.cacheSize/)
    expect(() => valueState('')).toThrow(TypeError)
    expect(() => valueState('x', { keyType: 'int' as never })).toThrow(/keyType/)
  })
})

describe('opening', () => {
  it('a store open in this process cannot be opened again', async () => {
    const path = tempDir()
    await openStore({ path })
    await expect(PartitionStore.open({ path })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_LOCKED', retriable: true })
  })

  it('a store open in another process cannot be opened', async () => {
    const path = tempDir()
    const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'hold-open.ts'), path], { stdio: ['pipe', 'pipe', 'inherit'] })
    const exited = new Promise((resolve) => child.on('exit', resolve))
    await new Promise<void>((resolve, reject) => {
      child.stdout.once('data', () => resolve())
      child.once('exit', (code) => reject(new Error(`holder exited with ${code}`)))
    })
    try {
      await expect(PartitionStore.open({ path })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_LOCKED' })
    } finally {
      child.stdin.end()
      await exited
    }
    await openStore({ path }) // released once the other process closed it
  })

  it('a path that is not a directory fails with TIDEMARK_STORE_NOT_A_STORE', async () => {
    const file = join(tempDir(), 'file')
    writeFileSync(file, 'not a store')
    await expect(PartitionStore.open({ path: file })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE' })
  })

  it('quiesce closes the store for a moment; reads and commits issued meanwhile wait and succeed', async () => {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    let inside!: () => void
    const entered = new Promise<void>((r) => { inside = r })
    let finish!: () => void
    const quiesced = store.quiesce(async (path) => {
      // While quiesced nothing holds the LevelDB lock: another handle can open it.
      const probe = new ClassicLevel(path)
      await probe.open()
      await probe.close()
      inside()
      await new Promise<void>((r) => { finish = r })
      return 'done'
    })
    await entered
    const tx2 = store.transaction()
    tx2.value(counts).put('b', 2)
    const commit = tx2.commit({ topic: T, partition: 0, offset: 1n })
    const read = store.transaction().value(counts).get('a')
    finish()
    expect(await quiesced).toBe('done')
    await commit
    expect(await read).toBe(1)
    expect(await store.transaction().value(counts).get('b')).toBe(2)
  })
})

describe('a transaction that follows a committing one (TransactionOptions.after)', () => {
  it('reads the writes of the committing one and commits after it', async () => {
    const store = await openStore({ path: tempDir() })
    let release!: () => void
    const held = new Promise<void>((resolve) => { release = resolve })
    const restore = interceptNextBatchWrite(async (write) => { await held; await write() })
    try {
      const first = store.transaction()
      first.value(counts).put('a', 1)
      first.value(counts).put('gone', 9)
      const firstDone = first.commit({ topic: T, partition: 0, offset: 9n })
      const next = store.transaction({ after: first })
      expect(await next.value(counts).get('a')).toBe(1)
      next.value(counts).put('a', 2)
      next.value(counts).delete('gone')
      expect(await all(next.value(counts).entries())).toEqual([['a', 2]])
      const nextDone = next.commit({ topic: T, partition: 0, offset: 19n })
      await new Promise((resolve) => setTimeout(resolve, 20))
      // Neither is written while the first is held.
      expect(store.position(T, 0)).toBeUndefined()
      expect(await store.transaction().value(counts).get('a')).toBeUndefined()
      release()
      await Promise.all([firstDone, nextDone])
    } finally {
      restore()
    }
    expect(store.position(T, 0)).toBe(19n)
    expect(await store.transaction().value(counts).get('a')).toBe(2)
    expect(await store.transaction().value(counts).get('gone')).toBeUndefined()
  })

  it('fails and writes nothing when the commit it follows failed; both commit once that one is retried', async () => {
    const path = tempDir()
    const store = await openStore({ path })
    const restore = interceptNextBatchWrite(() => Promise.reject(new Error('injected: disk full')))
    let first: ReturnType<PartitionStore['transaction']>
    let next: ReturnType<PartitionStore['transaction']>
    try {
      first = store.transaction()
      first.value(counts).put('a', 1)
      const firstDone = first.commit({ topic: T, partition: 0, offset: 9n })
      next = store.transaction({ after: first })
      expect(await next.value(counts).get('a')).toBe(1)
      next.value(counts).put('b', 2)
      const nextErr = await next.commit({ topic: T, partition: 0, offset: 19n }).catch((e: unknown) => e)
      expect(await firstDone.catch((e: unknown) => e)).toMatchObject({ code: 'TIDEMARK_COMMIT_FAILED' })
      expect(nextErr).toBeInstanceOf(TidemarkError)
      expect(nextErr).toMatchObject({ code: 'TIDEMARK_COMMIT_FAILED', cause: { code: 'TIDEMARK_COMMIT_FAILED' } })
    } finally {
      restore()
    }
    // Nothing of either is visible, in this store (its value cache included) or after a reopen.
    expect(store.position(T, 0)).toBeUndefined()
    expect(await store.transaction().value(counts).get('a')).toBeUndefined()
    expect(await store.transaction().value(counts).get('b')).toBeUndefined()
    await store.close()
    const reopened = await openStore({ path })
    expect(await all(reopened.transaction().value(counts).entries())).toEqual([])
    expect(reopened.positions()).toEqual([])
  })

  it('commits after a retried commit of the one it follows', async () => {
    const store = await openStore({ path: tempDir() })
    const restore = interceptNextBatchWrite(() => Promise.reject(new Error('injected: disk full')))
    const first = store.transaction()
    const next = store.transaction({ after: (first.value(counts).put('a', 1), first.commitWithoutPosition(), first) })
    try {
      next.value(counts).put('b', 2)
      await expect(next.commitWithoutPosition()).rejects.toMatchObject({ code: 'TIDEMARK_COMMIT_FAILED' })
    } finally {
      restore()
    }
    await first.commit({ topic: T, partition: 0, offset: 0n })
    await next.commit({ topic: T, partition: 0, offset: 1n })
    expect(await store.transaction().value(counts).get('a')).toBe(1)
    expect(await store.transaction().value(counts).get('b')).toBe(2)
    expect(store.position(T, 0)).toBe(1n)
  })

  it('refuses to follow a transaction whose commit has not begun', async () => {
    const store = await openStore({ path: tempDir() })
    expect(() => store.transaction({ after: store.transaction() })).toThrow(TypeError)
  })
})

describe('value cache', () => {
  it('follows commits, deletes and objects, and serves only primitives', async () => {
    const store = await openStore({ path: tempDir() })
    const docs = valueState<{ n: number }>('docs')
    const withDocs = await openStore({ path: tempDir(), states: [counts, docs] })
    const put = store.transaction()
    put.value(counts).put('a', 1)
    await put.commitWithoutPosition()
    expect(await store.transaction().value(counts).get('a')).toBe(1) // from the cache
    const del = store.transaction()
    del.value(counts).delete('a')
    await del.commitWithoutPosition()
    expect(await store.transaction().value(counts).get('a')).toBeUndefined()
    const aborted = store.transaction()
    aborted.value(counts).put('a', 3)
    aborted.abort()
    expect(await store.transaction().value(counts).get('a')).toBeUndefined()
    const tx = withDocs.transaction()
    const doc = { n: 1 }
    tx.value(docs).put('x', doc)
    await tx.commitWithoutPosition()
    doc.n = 2 // a caller changing the object after the put changes nothing stored
    const read = await withDocs.transaction().value(docs).get('x')
    expect(read).toEqual({ n: 1 })
    read!.n = 5 // nor does a caller changing what it read
    expect(await withDocs.transaction().value(docs).get('x')).toEqual({ n: 1 })
  })

  it('is bounded by valueCacheBytes and can be turned off', async () => {
    for (const valueCacheBytes of [0, 1000]) {
      const store = await openStore({ path: tempDir(), valueCacheBytes })
      const tx = store.transaction()
      for (let i = 0; i < 100; i++) tx.value(counts).put(`k${i}`, i)
      await tx.commitWithoutPosition()
      const read = store.transaction()
      for (let i = 0; i < 100; i++) expect(await read.value(counts).get(`k${i}`)).toBe(i)
    }
    await expect(openStore({ path: tempDir(), valueCacheBytes: -1 })).rejects.toThrow(/valueCacheBytes/)
  })

  it('an uncachedState() never enters it: its writes and deletes leave the entries of other states in place', async () => {
    const once = uncachedState(valueState<number>('once'))
    // About 24 entries fit: 100 cached writes of `once` would push `a` out.
    const store = await openStore({ path: tempDir(), states: [counts, once], valueCacheBytes: 2000 })
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    await tx.commitWithoutPosition()
    expect(await store.transaction().value(counts).get('a')).toBe(1)
    for (const write of ['put', 'delete'] as const) {
      const churn = store.transaction()
      for (let i = 0; i < 100; i++) {
        if (write === 'put') churn.value(once).put(`k${i}`, i)
        else if (i % 2 === 0) churn.value(once).delete(`k${i}`)
      }
      await churn.commitWithoutPosition()
    }
    // LevelDB point reads, counted by wrapping the one call the store makes.
    const original = ClassicLevel.prototype.getSync
    let reads = 0
    ClassicLevel.prototype.getSync = function (this: ClassicLevel, ...args: Parameters<typeof original>) {
      reads++
      return original.apply(this, args)
    } as typeof original
    try {
      const r = store.transaction()
      expect(r.value(counts).getSync('a')).toBe(1)
      expect(reads).toBe(0)
      // Nor does a read of it enter the cache: each goes to LevelDB.
      for (let n = 1; n <= 2; n++) {
        const again = store.transaction()
        expect(again.value(once).getSync('k1')).toBe(1)
        expect(again.value(once).getSync('k2')).toBeUndefined()
        expect(reads).toBe(2 * n)
      }
    } finally {
      ClassicLevel.prototype.getSync = original
    }
  })

  it('non-ASCII and byte keys address the same entries as they did', async () => {
    const store = await openStore({ path: tempDir() })
    const tx = store.transaction()
    tx.value(counts).put('café', 1)
    tx.value(counts).put('ü', 2)
    await tx.commitWithoutPosition()
    const read = store.transaction()
    expect(await read.value(counts).get('café')).toBe(1)
    expect(await all(read.value(counts).entries())).toEqual([['café', 1], ['ü', 2]])
    const bytes = store.transaction()
    bytes.value(counts).put(Buffer.from('café', 'utf8') as unknown as string, 7)
    expect(await bytes.value(counts).get('café')).toBe(7)
    expect(bytes.size).toBe(1)
  })
})

describe('synchronous reads and holds', () => {
  it('getSync() reads pending writes, committed values and map entries without a promise', async () => {
    const store = await openStore({ path: tempDir(), valueCacheBytes: 0 })
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    tx.map(orders).put('alice', 'o1', { amount: 5 })
    expect(tx.value(counts).getSync('a')).toBe(1)
    expect(tx.value(counts).getSync('missing')).toBeUndefined()
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    const r = store.transaction()
    expect(r.value(counts).getSync('a')).toBe(1)
    expect(r.map(orders).getSync('alice', 'o1')).toEqual({ amount: 5 })
    expect(r.map(orders).getSync('alice', 'o2')).toBeUndefined()
  })

  it('while the store is closed for a checkpoint, getSync() of a stored value fails with TIDEMARK_STORE_QUIESCED; pending writes still answer, get() waits', async () => {
    const store = await openStore({ path: tempDir(), valueCacheBytes: 0 })
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    const r = store.transaction()
    r.value(counts).put('b', 2)
    let waited: Promise<number | undefined> | undefined
    await store.quiesce(async () => {
      expect(() => r.value(counts).getSync('a')).toThrow(expect.objectContaining({ code: 'TIDEMARK_STORE_QUIESCED', retriable: true }))
      expect(r.value(counts).getSync('b')).toBe(2)
      expect(store.tryHold()).toBeUndefined()
      waited = r.value(counts).get('a')
    })
    expect(await waited).toBe(1)
    expect(r.value(counts).getSync('a')).toBe(1)
  })

  it('a quiesce that begins while the store is held waits for the release; reads in the held section go on', async () => {
    const store = await openStore({ path: tempDir(), valueCacheBytes: 0 })
    const tx = store.transaction()
    tx.value(counts).put('a', 1)
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    const release = await store.hold()
    const order: string[] = []
    const quiesced = store.quiesce(async () => { order.push('quiesced') })
    const r = store.transaction().value(counts)
    // Before holds existed, an async read here waited for the quiesce, which
    // waited for this section: a deadlock.
    expect(await r.get('a')).toBe(1)
    expect(r.getSync('a')).toBe(1)
    order.push('read in the held section')
    release()
    release() // a second call does nothing
    await quiesced
    expect(order).toEqual(['read in the held section', 'quiesced'])
    // A new hold after the quiesce is served at once.
    const again = store.tryHold()
    expect(again).toBeTypeOf('function')
    again!()
  })
})


describe('leveldbProperty', () => {
  it("gives LevelDB's own figures of the store, refuses other names, and follows the store's life", async () => {
    const path = join(tempDir(), 's')
    const store = await openStore({ path })
    const level = (n: number): number => Number(store.leveldbProperty(`leveldb.num-files-at-level${n}`))
    expect([0, 1, 2, 3, 4, 5, 6].map(level)).toEqual([0, 0, 0, 0, 0, 0, 0])
    const tx = store.transaction()
    for (let i = 0; i < 100; i++) tx.value(counts).put(`k${i}`, i)
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    await store.flush()
    // The flushed memtable is one table file, at whatever level LevelDB put it.
    expect([0, 1, 2, 3, 4, 5, 6].map(level).reduce((a, b) => a + b)).toBe(1)
    expect(store.leveldbProperty('leveldb.stats')).toContain('Compactions')
    expect(Number(store.leveldbProperty('leveldb.approximate-memory-usage'))).toBeGreaterThan(0)
    for (const bad of ['leveldb.num-files-at-level7', 'rocksdb.stats', '', 42]) {
      expect(() => store.leveldbProperty(bad as string)).toThrow(RangeError)
    }
    await store.close()
    expect(() => store.leveldbProperty('leveldb.stats')).toThrow(expect.objectContaining({ code: 'TIDEMARK_STORE_CLOSED' }) as Error)
  })
})
