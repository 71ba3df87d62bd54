// The README's partition-processor example, run against the packed package
// by test/package/pack.package.ts (it stops on SIGTERM); the part between the
// region markers is the README's code block, character for character
// (test/package/readme-examples.test.ts).
import { resolve as absolute } from 'node:path'
import { openFileLog as openLogToFill } from 'tidemark'

// Stands in for the producer: 1000 sales in the log, once.
const seed = await openLogToFill(absolute('data/sales-log'))
if (await seed.tail() === 0n) {
  for (let i = 0; i < 1000; i++) await seed.append(Buffer.from(JSON.stringify({ key: `shop-${i % 7}`, amount: i % 100 })))
}
await seed.close()

// #region readme
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { PartitionProcessor, openFileLog, openSnapshotStore, valueState } from 'tidemark'

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
await processor.start()            // local store if intact and not behind, else newest usable snapshot, else empty
try {
  await processor.run(stop.signal) // replay, then live processing; snapshots on the schedule
} finally {
  await processor.close()          // the last snapshot, the store closed, the claim released
  await log.close()
}
// #endregion readme
