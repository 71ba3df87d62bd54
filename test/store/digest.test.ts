import { join } from 'node:path'
import { expect, it } from 'vitest'
import { mapState, PartitionStore, valueState } from '../../src/index.js'
import { stateDigest } from '../../src/store/digest.js'
import { tempDir } from '../helpers/tmp.js'

const totals = valueState<number>('totals')
const orders = mapState<{ amount: number }>('orders')

async function build(path: string, fill: (put: { total(k: string, v: number): void; order(k: string, s: string, v: number): void }) => void, offset: bigint): Promise<PartitionStore> {
  const store = await PartitionStore.open({ path, states: [totals, orders] })
  const tx = store.transaction()
  fill({ total: (k, v) => tx.value(totals).put(k, v), order: (k, s, v) => tx.map(orders).put(k, s, { amount: v }) })
  await tx.commit({ topic: 'sales', partition: 0, offset })
  return store
}

it('stateDigest: equal contents hash alike whatever the order of writes, states and positions; any change of a key, value or state shows', async () => {
  const root = tempDir()
  const a = await build(join(root, 'a'), (p) => { p.total('alice', 5); p.total('bob', 7); p.order('alice', 'o1', 5) }, 10n)
  const b = await build(join(root, 'b'), (p) => { p.order('alice', 'o1', 5); p.total('bob', 7); p.total('alice', 5) }, 99n)
  try {
    const digest = await stateDigest(a, [totals, orders])
    expect(digest).toMatch(/^[0-9a-f]{64}$/)
    expect(await stateDigest(b, [orders, totals])).toBe(digest)
    // Only the states listed count.
    expect(await stateDigest(a, [totals])).not.toBe(digest)
    const tx = b.transaction()
    tx.value(totals).put('bob', 8)
    await tx.commit({ topic: 'sales', partition: 0, offset: 100n })
    expect(await stateDigest(b, [totals, orders])).not.toBe(digest)
    // A key moved from one state's end to the next state's start is another content.
    const c = await build(join(root, 'c'), (p) => { p.total('alice', 5); p.total('bob', 7); p.order('alice', 'o1', 5); p.order('bob', 'o2', 1) }, 1n)
    const d = await build(join(root, 'd'), (p) => { p.total('alice', 5); p.total('bob', 7); p.order('alice', 'o1', 5) }, 1n)
    try {
      expect(await stateDigest(c, [totals, orders])).not.toBe(await stateDigest(d, [totals, orders]))
      expect(await stateDigest(d, [totals, orders])).toBe(digest)
    } finally {
      await c.close()
      await d.close()
    }
    await expect(stateDigest(a, [valueState('unknown')])).rejects.toMatchObject({ code: 'TIDEMARK_UNKNOWN_STATE' })
    await expect(stateDigest({} as PartitionStore, [totals])).rejects.toThrow(TypeError)
  } finally {
    await a.close()
    await b.close()
  }
})
