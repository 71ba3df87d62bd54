/**
 * Replay speed: events replayed through the partition processor (decode,
 * handler, commit of state + position per batch) onto a store restored from
 * a snapshot, against a plain read of the same log entries in the same run.
 *
 * The plain read decodes each entry as JSON (a reader that uses the events
 * must): rawReadPerSec is read + JSON.parse, the best of --rawRuns reads
 * through read() and through readBatches().
 * Defaults: running totals over 1000 users (--keys), live batches of 1000
 * events (--batch) and replay batches of 10000 (--replayBatch, the
 * processor's replayBatchSize).
 */
import { join } from 'node:path'
import { FsSnapshotStore, PartitionProcessor, openFileLog, valueState, type EventHandler } from '../src/index.js'
import { benchDir, emit, intFlags, round } from './_util.js'

interface Sale { key: string; amount: number }
const totals = valueState<number>('totals')
// Synchronous, as handlers can be: the processor holds the store open while
// a handler runs, so getSync() needs no await.
const addSale: EventHandler<Sale> = (tx, sale) => {
  const view = tx.value(totals)
  view.put(sale.key, (view.getSync(sale.key) ?? 0) + sale.amount)
}

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { events: 1_000_000, prefix: 100_000, keys: 1000, batch: 1000, replayBatch: 10_000, rawRuns: 2 })
  const dir = benchDir('replay')
  try {
    const log = await openFileLog(join(dir.path, 'log'), { sync: false })
    const all = opts.prefix + opts.events
    for (let i = 0; i < all; i += 10_000) {
      const n = Math.min(10_000, all - i)
      await Promise.all(Array.from({ length: n }, (_, j) => {
        const k = i + j
        return log.append(Buffer.from(JSON.stringify({ key: `user-${(Math.imul(k, 2654435761) >>> 0) % opts.keys}`, amount: k % 100 })))
      }))
    }
    const snapshots = new FsSnapshotStore({ root: join(dir.path, 'snapshots') })
    const make = (name: string): PartitionProcessor<Sale> => new PartitionProcessor<Sale>({
      job: 'bench', topic: 'sales', partition: 0, log, path: join(dir.path, name), states: [totals], handler: addSale,
      batchSize: opts.batch, replayBatchSize: opts.replayBatch, snapshots: { store: snapshots, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    })
    // A first owner processes the prefix and snapshots it.
    const first = make('first')
    await first.start()
    await first.catchUp({ end: BigInt(opts.prefix) })
    await first.snapshot()
    await first.close()

    // Plain reads (+ JSON.parse) of the entries the replay will apply: entry
    // by entry (read) and in the log's own batches (readBatches, which the
    // processor uses). The ratio is taken against the faster of the two.
    let bytes = 0
    let sum = 0
    const parse = (data: Uint8Array): void => {
      bytes += data.byteLength
      sum += (JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8')) as Sale).amount
    }
    let entrySeconds = Infinity
    let batchSeconds = Infinity
    for (let run = 0; run < opts.rawRuns; run++) {
      let t = performance.now()
      bytes = 0
      for await (const entry of log.read(BigInt(opts.prefix))) parse(entry.data)
      entrySeconds = Math.min(entrySeconds, (performance.now() - t) / 1000)
      t = performance.now()
      bytes = 0
      for await (const entries of log.readBatches(BigInt(opts.prefix))) for (const entry of entries) parse(entry.data)
      batchSeconds = Math.min(batchSeconds, (performance.now() - t) / 1000)
    }
    if (sum < 0) throw new Error('unreachable: keeps the decode from being optimized away')
    const rawSeconds = Math.min(entrySeconds, batchSeconds)

    // A new owner restores the snapshot and replays the rest; as many owners
    // (each in a fresh directory) as there were plain reads, and the best
    // counts, as for the reads.
    let replaySeconds = Infinity
    let replayed = 0
    for (let run = 0; run < opts.rawRuns; run++) {
      const owner = make(`second-${run}`)
      const started = await owner.start()
      if (started.source !== 'snapshot') throw new Error(`expected a restore from the snapshot, got ${started.source}`)
      const t0 = performance.now()
      replayed = await owner.catchUp()
      replaySeconds = Math.min(replaySeconds, (performance.now() - t0) / 1000)
      await owner.close()
      if (replayed !== opts.events) throw new Error(`replayed ${replayed} events, expected ${opts.events}`)
    }
    await log.close()
    emit({
      bench: 'replay',
      events: replayed,
      keys: opts.keys,
      batch: opts.batch,
      replayBatchSize: opts.replayBatch,
      eventsPerSec: Math.round(replayed / replaySeconds),
      rawRead: 'best of read() and readBatches(), + JSON.parse',
      rawReadPerSec: Math.round(opts.events / rawSeconds),
      rawEntryReadPerSec: Math.round(opts.events / entrySeconds),
      rawBatchReadPerSec: Math.round(opts.events / batchSeconds),
      ratio: round(rawSeconds / replaySeconds),
      logMB: round(bytes / 1024 / 1024, 1),
      peakRssMB: Math.round(process.resourceUsage().maxRSS / 1024),
    })
  } finally {
    dir.cleanup()
  }
}
