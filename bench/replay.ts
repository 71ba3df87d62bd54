/**
 * Replay speed: events replayed through the partition processor (decode,
 * handler, commit of state + position per batch) onto a store restored from
 * a snapshot, against a plain read of the same log entries in the same run.
 *
 * The plain read decodes each entry as JSON (a reader that uses the events
 * must): rawReadPerSec is read + JSON.parse, the faster of read() and
 * readBatches() in each round. --rounds pairs (raw read, replay) run
 * interleaved; ratio is the median of the per-pair ratios.
 * Defaults: running totals over 1000 users (--keys), live batches of 1000
 * events (--batch) and replay batches of 10000 (--replayBatch, the
 * processor's replayBatchSize).
 */
import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import { FsSnapshotStore, PartitionProcessor, openFileLog, valueState, type EventHandler } from '../src/index.js'
import { saveFigures } from './_figures.js'
import { benchDir, emit, interleaved, intFlags, loadAvg, median, pairedRatio, round } from './_util.js'

interface Sale { key: string; amount: number }
const totals = valueState<number>('totals')
// Synchronous, as handlers can be: the processor holds the store open while
// a handler runs, so getSync() needs no await.
const addSale: EventHandler<Sale> = (tx, sale) => {
  const view = tx.value(totals)
  view.put(sale.key, (view.getSync(sale.key) ?? 0) + sale.amount)
}

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { events: 1_000_000, prefix: 100_000, keys: 1000, batch: 1000, replayBatch: 10_000, rounds: 5 })
  const loadAtStart = loadAvg()
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
    // processor uses); each round's raw side is the faster of the two.
    let bytes = 0
    let sum = 0
    const parse = (data: Uint8Array): void => {
      bytes += data.byteLength
      sum += (JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8')) as Sale).amount
    }
    const entrySeconds: number[] = []
    const batchSeconds: number[] = []
    const rawRead = async (): Promise<number> => {
      let t = performance.now()
      bytes = 0
      for await (const entry of log.read(BigInt(opts.prefix))) parse(entry.data)
      entrySeconds.push((performance.now() - t) / 1000)
      t = performance.now()
      bytes = 0
      for await (const entries of log.readBatches(BigInt(opts.prefix))) for (const entry of entries) parse(entry.data)
      batchSeconds.push((performance.now() - t) / 1000)
      if (sum < 0) throw new Error('unreachable: keeps the decode from being optimized away')
      return Math.min(entrySeconds.at(-1)!, batchSeconds.at(-1)!)
    }
    // A new owner (in a fresh directory each round) restores the snapshot and
    // replays the rest; only the replay is timed.
    let replayed = 0
    const replay = async (round: number): Promise<number> => {
      const owner = make(`second-${round}`)
      const started = await owner.start()
      if (started.source !== 'snapshot') throw new Error(`expected a restore from the snapshot, got ${started.source}`)
      const t0 = performance.now()
      replayed = await owner.catchUp()
      const seconds = (performance.now() - t0) / 1000
      await owner.close()
      await rm(join(dir.path, `second-${round}`), { recursive: true, force: true })
      if (replayed !== opts.events) throw new Error(`replayed ${replayed} events, expected ${opts.events}`)
      return seconds
    }
    const pairs = await interleaved(opts.rounds, rawRead, replay, (rawSeconds, replaySeconds) => rawSeconds / replaySeconds)
    await log.close()
    const result = {
      bench: 'replay',
      events: replayed,
      keys: opts.keys,
      batch: opts.batch,
      replayBatchSize: opts.replayBatch,
      eventsPerSec: Math.round(replayed / median(pairs.measured)),
      baseline: 'a plain read of the same entries, + JSON.parse: the faster of read() and readBatches() in each round',
      loadAvg: loadAtStart,
      rawReadPerSec: Math.round(opts.events / median(pairs.raw)),
      rawEntryReadPerSec: Math.round(opts.events / median(entrySeconds)),
      rawBatchReadPerSec: Math.round(opts.events / median(batchSeconds)),
      ...pairedRatio(pairs.ratios),
      logMB: round(bytes / 1024 / 1024, 1),
      peakRssMB: Math.round(process.resourceUsage().maxRSS / 1024),
    }
    emit(result)
    saveFigures('replay', args, result)
  } finally {
    dir.cleanup()
  }
}
