// The commit's batch: what a transaction counts of its writes (pendingBytes),
// and the one LevelDB batch a store reuses for its commits
// (src/store/reused-batch.ts).
import { ClassicLevel } from 'classic-level'
import { afterEach, describe, expect, it } from 'vitest'
import { PartitionStore, rawCodec, valueState } from '../../src/index.js'
import { interceptNextBatchWrite } from '../helpers/faults.js'
import { tempDir } from '../helpers/tmp.js'

const notes = valueState<string>('notes')
const counts = valueState<number>('counts')
const blobs = valueState('blobs', { codec: rawCodec() })
const T = 'events'

const open: PartitionStore[] = []
async function openStore(writeBufferSize?: number): Promise<PartitionStore> {
  const store = await PartitionStore.open({ path: tempDir(), states: [notes, counts, blobs], ...(writeBufferSize === undefined ? {} : { writeBufferSize }) })
  open.push(store)
  return store
}
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()))
})

/** Counts the chained batches made by every database until the returned function is called. */
function countBatchesMade(): { made(): number; restore(): void } {
  const original = ClassicLevel.prototype.batch
  let made = 0
  ClassicLevel.prototype.batch = function (this: ClassicLevel, ...args: unknown[]) {
    if (args.length === 0) made++
    return (original as (...a: unknown[]) => unknown).apply(this, args)
  } as typeof original
  return { made: () => made, restore: () => { ClassicLevel.prototype.batch = original } }
}

describe('Transaction.pendingBytes', () => {
  it('counts each key once with its latest value, whatever the codec', async () => {
    const store = await openStore()
    const tx = store.transaction()
    expect(tx.pendingBytes).toBe(0)
    tx.value(notes).put('a', 'x'.repeat(100))
    const one = tx.pendingBytes
    // The id (state prefix and key) and the JSON text of the string.
    expect(one).toBeGreaterThanOrEqual(102)
    expect(one).toBeLessThan(102 + 32)
    tx.value(notes).put('a', 'x'.repeat(10))
    expect(tx.pendingBytes).toBe(one - 90)
    tx.value(notes).put('a', { long: 'y'.repeat(200) } as never)
    expect(tx.pendingBytes).toBe(one - 102 + JSON.stringify({ long: 'y'.repeat(200) }).length)
    tx.value(notes).delete('a')
    expect(tx.pendingBytes).toBe(one - 102)
    tx.value(blobs).put('b', Buffer.alloc(1000))
    expect(tx.pendingBytes).toBeGreaterThanOrEqual(one - 102 + 1000)
    tx.abort()
    const next = store.transaction()
    next.value(counts).put('c', 1)
    // A number is written as text at commit: counted as 8 bytes.
    expect(next.pendingBytes).toBeGreaterThan(8)
    await next.commit({ topic: T, partition: 0, offset: 0n })
  })

  it('starts again from 0 after a commit or an abort', async () => {
    const store = await openStore()
    const tx = store.transaction()
    tx.value(notes).put('a', 'abc')
    await tx.commit({ topic: T, partition: 0, offset: 0n })
    expect(tx.pendingBytes).toBe(0)
  })
})

describe('the batch a store reuses', () => {
  it('never carries a refused commit\'s writes into a later commit', async () => {
    const store = await openStore()
    const refused = store.transaction()
    refused.value(notes).put('lost', 'never written')
    const restore = interceptNextBatchWrite(() => Promise.reject(new Error('injected: disk full')))
    try {
      await expect(refused.commit({ topic: T, partition: 0, offset: 0n })).rejects.toMatchObject({ code: 'TIDEMARK_COMMIT_FAILED' })
    } finally {
      restore()
    }
    refused.abort()
    const next = store.transaction()
    next.value(notes).put('kept', 'written')
    await next.commit({ topic: T, partition: 0, offset: 1n })
    const read = store.transaction()
    expect(await read.value(notes).get('kept')).toBe('written')
    expect(await read.value(notes).get('lost')).toBeUndefined()
    expect(store.position(T, 0)).toBe(1n)
  })

  it('is made once per open LevelDB, and again after a commit larger than twice the memtable', async () => {
    const store = await openStore(64 * 1024)
    const batches = countBatchesMade()
    try {
      for (let i = 0; i < 5; i++) {
        const tx = store.transaction()
        tx.value(notes).put(`k${i}`, 'v'.repeat(1000))
        await tx.commit({ topic: T, partition: 0, offset: BigInt(i) })
      }
      expect(batches.made()).toBe(1)
      // 200 KB, above 2 x 64 KiB: written, then left for V8 to collect.
      const large = store.transaction()
      for (let i = 0; i < 100; i++) large.value(notes).put(`big${i}`, 'w'.repeat(2000))
      await large.commit({ topic: T, partition: 0, offset: 5n })
      const after = store.transaction()
      after.value(notes).put('small', 's')
      await after.commit({ topic: T, partition: 0, offset: 6n })
      expect(batches.made()).toBe(2)
      expect(await store.transaction().value(notes).get('big99')).toBe('w'.repeat(2000))
    } finally {
      batches.restore()
    }
  })
})
