/**
 * The demo's worker: keeps a running total per key in a partition store,
 * committing each batch together with the offset of its last event, and
 * resumes after the stored offset when restarted. Prints one JSON progress
 * line per commit.
 */
import { PartitionStore, valueState } from '../../src/index.js'
import { demoEvent } from './events.js'

const [path, totalArg, batchArg] = process.argv.slice(2)
const total = Number(totalArg)
const batch = Number(batchArg ?? 500)
const totals = valueState<number>('totals')
const store = await PartitionStore.open({ path: path!, states: [totals] })
const resumedAt = Number((store.position('demo', 0) ?? -1n) + 1n)
process.stdout.write(`${JSON.stringify({ type: 'start', resumedAt })}\n`)
for (let next = resumedAt; next < total; ) {
  const tx = store.transaction()
  const view = tx.value(totals)
  const end = Math.min(next + batch, total)
  for (; next < end; next++) {
    const { key, amount } = demoEvent(next)
    view.put(key, ((await view.get(key)) ?? 0) + amount)
  }
  await tx.commit({ topic: 'demo', partition: 0, offset: BigInt(end - 1) })
  process.stdout.write(`${JSON.stringify({ type: 'commit', offset: end - 1 })}\n`)
}
await store.close()
process.stdout.write(`${JSON.stringify({ type: 'done' })}\n`)
