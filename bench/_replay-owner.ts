/** The replay bench's job (bench/replay.ts), shared with the process that measures its memory (bench/_rss-child.ts). */
import { PartitionProcessor, valueState, type EventHandler, type RevisionedLog, type SnapshotStore } from '../src/index.js'

export interface Sale { key: string; amount: number }
const totals = valueState<number>('totals')
// Synchronous, as handlers can be: the processor holds the store open while
// a handler runs, so getSync() needs no await.
const addSale: EventHandler<Sale> = (tx, sale) => {
  const view = tx.value(totals)
  view.put(sale.key, (view.getSync(sale.key) ?? 0) + sale.amount)
}

/** The processor of the replay rounds (and of its memory's measure in bench/_rss-child.ts): a new owner in `path`. */
export function replayProcessor(log: RevisionedLog, snapshots: SnapshotStore, path: string, opts: { batch: number; replayBatch: number }): PartitionProcessor<Sale> {
  return new PartitionProcessor<Sale>({
    job: 'bench', topic: 'sales', partition: 0, log, path, states: [totals], handler: addSale,
    batchSize: opts.batch, replayBatchSize: opts.replayBatch, snapshots: { store: snapshots, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
  })
}
