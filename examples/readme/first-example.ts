// The README's PartitionStore example, a complete program: compiled under
// strict and run against the packed package by test/package/pack.package.ts.
// The part between the region markers is the README's code block, character
// for character, and nothing but comments lies outside it
// (test/package/readme-examples.test.ts).

// #region readme
import { PartitionStore, valueState, mapState } from 'tidemark'

interface Order { offset: bigint; user: string; id: string; amount: number }

// Stands in for your consumer: the orders from offset `from` on, in two batches.
function* batchesFrom(from: bigint): Generator<Order[]> {
  const all = Array.from({ length: 150 }, (_, i): Order => ({ offset: BigInt(i), user: i % 3 === 0 ? 'alice' : 'bob', id: `o-${String(i).padStart(3, '0')}`, amount: i }))
  const rest = all.filter((o) => o.offset >= from)
  yield rest.slice(0, 100)
  yield rest.slice(100)
}

const totals = valueState<number>('totals')                // key -> value
const orders = mapState<{ amount: number }>('orders')      // key -> sub-key -> value

const store = await PartitionStore.open({ path: './state/orders-0', states: [totals, orders] })

// Resume after the last committed event of this source partition.
const from = (store.position('orders', 0) ?? -1n) + 1n

for (const batch of batchesFrom(from)) {
  const last = batch.at(-1)
  if (last === undefined) continue                          // an empty poll
  const tx = store.transaction()
  for (const event of batch) {
    const sum = (await tx.value(totals).get(event.user)) ?? 0   // reads see the tx's own writes
    tx.value(totals).put(event.user, sum + event.amount)
    tx.map(orders).put(event.user, event.id, { amount: event.amount })
  }
  // State changes and the new position in one LevelDB batch: all or nothing.
  await tx.commit({ topic: 'orders', partition: 0, offset: last.offset })
}

for await (const [id, order] of store.transaction().map(orders).entries('alice', { gte: 'o-100', limit: 10 })) {
  console.log(id, order.amount)
}
await store.close()
// #endregion readme
