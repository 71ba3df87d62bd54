// A budget's write slots (StoreBudget.writes, src/util/slots.ts): at most a
// fixed number of LevelDB writes of a budget's stores in flight, so that
// libuv's threadpool queue stays short for everything else that uses it.
import { join } from 'node:path'
import { expect, it } from 'vitest'
import { PartitionStore, StoreBudget, valueState } from '../../src/index.js'
import { Slots } from '../../src/util/index.js'
import { tempDir } from '../helpers/tmp.js'

it('a run that fails gives its slot back', async () => {
  const slots = new Slots(1)
  await expect(slots.run(() => Promise.reject(new Error('disk full')))).rejects.toThrow('disk full')
  expect([slots.active, slots.waiting]).toEqual([0, 0])
  expect(await slots.run(() => Promise.resolve('next'))).toBe('next')
})

it('a run with `ahead` waits before the runs without it, and in its own order among them', async () => {
  const slots = new Slots(1)
  const release = await slots.acquire()
  const order: string[] = []
  const runs = ['behind 1', 'ahead 1', 'behind 2', 'ahead 2'].map((name) => slots.run(async () => { order.push(name) }, name.startsWith('ahead')))
  expect(slots.waiting).toBe(4)
  release()
  await Promise.all(runs)
  expect(order).toEqual(['ahead 1', 'ahead 2', 'behind 1', 'behind 2'])
  expect([slots.active, slots.waiting]).toEqual([0, 0])
})

it('the stores of a budget write in its slots: beyond the limit, commits wait', async () => {
  const budget = new StoreBudget()
  const counts = valueState<number>('counts')
  const dir = tempDir()
  const stores = await Promise.all([0, 1, 2].map((p) => PartitionStore.open({ path: join(dir, `p${p}`), states: [counts], budget })))
  try {
    // Every slot taken by others: the three commits wait, and none is written.
    const taken = await Promise.all(Array.from({ length: budget.writes.limit }, () => budget.writes.acquire()))
    const done: number[] = []
    const commits = stores.map(async (store, p) => {
      const tx = store.transaction()
      tx.value(counts).put('k', p)
      await tx.commit({ topic: 'events', partition: p, offset: 0n })
      done.push(p)
    })
    while (budget.writes.waiting < 3) await new Promise(setImmediate)
    expect(done).toEqual([])
    expect(await stores[0]!.transaction().value(counts).get('k')).toBeUndefined()
    // One slot given back: one commit at a time.
    taken.pop()!()
    await new Promise(setImmediate)
    while (done.length < 3) await new Promise(setImmediate)
    expect(budget.writes.active).toBe(budget.writes.limit - 1)
    for (const release of taken) release()
    await Promise.all(commits)
    expect([budget.writes.active, budget.writes.waiting]).toEqual([0, 0])
    for (const [p, store] of stores.entries()) expect(await store.transaction().value(counts).get('k')).toBe(p)
  } finally {
    await Promise.all(stores.map((s) => s.close()))
  }
})
