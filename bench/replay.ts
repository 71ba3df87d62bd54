/**
 * Replay speed: events replayed through the partition processor (decode,
 * handler, commit of state + position per batch) onto a store restored from
 * a snapshot, against two baselines in the same run, each in its own
 * --rounds interleaved pairs:
 *
 * - applyRatio, the target: what a user would rebuild with instead, the
 *   same entries read (readBatches) and parsed, the same running totals put
 *   into a classic-level database (JSON values) in batches of the replay's
 *   batch size, from the totals the snapshot holds (written before the clock).
 * - ratio, for information: a plain read + JSON.parse that applies nothing.
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
import { ClassicLevel } from 'classic-level'
import { join } from 'node:path'
import { FsSnapshotStore, openFileLog, type PartitionProcessor } from '../src/index.js'
import { replayProcessor, type Sale } from './_replay-owner.js'
import { saveFigures } from './_figures.js'
import { measureInChild } from './_rss-child.js'
import { benchDir, emit, interleaved, intFlags, loadAvg, median, pairedRatio, prefixed, round } from './_util.js'

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
    const make = (name: string): PartitionProcessor<Sale> => replayProcessor(log, snapshots, join(dir.path, name), opts)
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

    // What a user rebuilds with instead: the same entries read and parsed,
    // the same running totals applied as puts into a classic-level database
    // (JSON values, as the state's codec writes them) in batches of the
    // replay's batch size, starting from the totals the snapshot holds.
    const prefixTotals = new Map<string, number>()
    for await (const entries of log.readBatches(0n, { end: BigInt(opts.prefix) })) {
      for (const entry of entries) {
        const sale = JSON.parse(Buffer.from(entry.data.buffer, entry.data.byteOffset, entry.data.byteLength).toString('utf8')) as Sale
        prefixTotals.set(sale.key, (prefixTotals.get(sale.key) ?? 0) + sale.amount)
      }
    }
    const rebuild = async (round: number): Promise<number> => {
      const path = join(dir.path, `plain-${round}`)
      const db = new ClassicLevel<string, number>(path, { valueEncoding: 'json' })
      await db.open()
      await db.batch([...prefixTotals].map(([key, value]) => ({ type: 'put' as const, key, value })))
      const t0 = performance.now()
      let applied = 0
      let batch = new Map<string, number>()
      const flush = async (): Promise<void> => {
        await db.batch([...batch].map(([key, value]) => ({ type: 'put' as const, key, value })))
        batch = new Map()
      }
      let inBatch = 0
      for await (const entries of log.readBatches(BigInt(opts.prefix))) {
        for (const entry of entries) {
          const sale = JSON.parse(Buffer.from(entry.data.buffer, entry.data.byteOffset, entry.data.byteLength).toString('utf8')) as Sale
          batch.set(sale.key, (batch.get(sale.key) ?? db.getSync(sale.key) ?? 0) + sale.amount)
          applied++
          if (++inBatch === opts.replayBatch) {
            await flush()
            inBatch = 0
          }
        }
      }
      if (inBatch > 0) await flush()
      const seconds = (performance.now() - t0) / 1000
      await db.close()
      await rm(path, { recursive: true, force: true })
      if (applied !== opts.events) throw new Error(`rebuilt from ${applied} events, expected ${opts.events}`)
      return seconds
    }
    const applying = await interleaved(opts.rounds, rebuild, replay, (rebuildSeconds, replaySeconds) => rebuildSeconds / replaySeconds)
    // The memory target: the same replay alone in a fresh process (bench/_rss-child.ts
    // says why this process, which wrote the log first, cannot tell it).
    const replayRss = await measureInChild({ kind: 'replay', log: join(dir.path, 'log'), snapshots: join(dir.path, 'snapshots'), path: join(dir.path, 'rss-replay'), batch: opts.batch, replayBatch: opts.replayBatch })
    if (replayRss.events !== opts.events) throw new Error(`the measured replay applied ${replayRss.events} events, expected ${opts.events}`)
    await log.close()
    const result = {
      bench: 'replay',
      events: replayed,
      keys: opts.keys,
      batch: opts.batch,
      replayBatchSize: opts.replayBatch,
      eventsPerSec: Math.round(replayed / median(pairs.measured)),
      ...prefixed('applyRatio', applying),
      applyPerSec: Math.round(replayed / median(applying.measured)),
      applyRaw: `a plain rebuild: the same entries read (readBatches) and parsed, the same totals put into classic-level (valueEncoding json) in batches of ${opts.replayBatch}`,
      applyRawPerSec: Math.round(opts.events / median(applying.raw)),
      baseline: 'a plain read of the same entries, + JSON.parse: the faster of read() and readBatches() in each round',
      loadAvg: loadAtStart,
      rawReadPerSec: Math.round(opts.events / median(pairs.raw)),
      rawEntryReadPerSec: Math.round(opts.events / median(entrySeconds)),
      rawBatchReadPerSec: Math.round(opts.events / median(batchSeconds)),
      ...pairedRatio(pairs.ratios),
      logMB: round(bytes / 1024 / 1024, 1),
      // A process that only restores the snapshot and replays the events.
      peakRssMB: replayRss.peakRssMB,
      // This process, which wrote the log and ran every round, for information.
      processPeakRssMB: Math.round(process.resourceUsage().maxRSS / 1024),
    }
    emit(result)
    saveFigures('replay', args, result)
  } finally {
    dir.cleanup()
  }
}
