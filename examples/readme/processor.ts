// The README's PartitionProcessor example, a complete program: compiled under
// strict and run against the packed package by test/package/pack.package.ts
// (which appends 1000 sales to data/sales-log first, and stops it with
// SIGTERM). The part between the region markers is the README's code block,
// character for character, and nothing but comments lies outside it
// (test/package/readme-examples.test.ts).

// #region readme
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { PartitionProcessor, isTidemarkError, openFileLog, openSnapshotStore, valueState } from 'tidemark'

const totals = valueState<number>('totals')
const log = await openFileLog(resolve('data/sales-log'))       // or openKafkaLog() from 'tidemark/kafka'
const processor = new PartitionProcessor<{ key: string; amount: number }>({
  job: 'sales-totals',
  log,
  topic: 'sales', partition: 0,
  path: resolve('data/state/sales-0'),                         // the local partition store
  states: [totals],
  handler: (tx, sale) => {                                     // runs inside the batch's transaction
    const view = tx.value(totals)
    view.put(sale.key, (view.getSync(sale.key) ?? 0) + sale.amount)   // no await needed in a handler
  },
  snapshots: {
    // or s3://bucket/prefix?endpoint=…&region=… (npm install @aws-sdk/client-s3)
    store: await openSnapshotStore(pathToFileURL(resolve('data/snapshots')).href),
    schedule: { intervalMs: 60_000, everyEvents: 100_000 },
    onClose: true,                                             // close() takes a last snapshot for the next owner
  },
})
processor.on('progress', (p) => {                              // the restore (bytes) and the replay (events)
  if (p.phase !== 'process') console.log(p.phase, p.done, '/', p.total, p.unit, p.final ? 'done' : `eta ${Math.round(p.etaMs ?? 0)} ms`)
})
processor.on('snapshot-failed', (error) => console.error('snapshot failed:', error.code, error.message))   // processing goes on

const stop = new AbortController()
process.once('SIGTERM', () => stop.abort())                    // an orchestrator stops the process
process.once('SIGINT', () => stop.abort())                     // Ctrl-C
try {
  await processor.start()          // local store if intact and not behind, else newest usable snapshot, else empty
} catch (error) {                  // TIDEMARK_OWNERSHIP_CONFLICT: another live process holds the partition
  console.error(isTidemarkError(error) ? `${error.code}: ${error.message}` : error)
  process.exit(1)
}
try {
  await processor.run(stop.signal) // replay, then live processing; snapshots on the schedule
} finally {
  await processor.close()          // the last snapshot, the store closed, the claim released
  await log.close()
}
// #endregion readme
