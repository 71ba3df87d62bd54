import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  FsSnapshotStore, PartitionProcessor, PartitionStore, openFileLog, restoreToPoint, valueState, type FileLog, type Progress,
} from '../../src/index.js'
import { interceptBatchWrites } from '../helpers/faults.js'
import { tempDir } from '../helpers/tmp.js'
import { addSale, fold, readTotals, saleAt, TOPIC, totals, type Sale } from './fixtures/totals.js'

async function filledLog(dir: string, events: number): Promise<FileLog> {
  const log = await openFileLog(dir, { sync: false })
  for (let i = 0; i < events; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
  return log
}

function processor(root: string, log: FileLog, store: FsSnapshotStore, overrides: Partial<ConstructorParameters<typeof PartitionProcessor<Sale>>[0]> = {}): PartitionProcessor<Sale> {
  return new PartitionProcessor<Sale>({
    job: 'sales-job', topic: TOPIC, partition: 0, log, path: join(root, 'store'), states: [totals], handler: addSale,
    batchSize: 100, snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    ...overrides,
  })
}

describe('PartitionProcessor', () => {
  it('processes, snapshots, and a new owner restores the snapshot and replays the rest', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 3000)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const first = processor(join(dir, 'a'), log, snapshots)
    expect((await first.start()).source).toBe('empty')
    expect(await first.catchUp({ end: 2000n })).toBe(2000)
    const snap = await first.snapshot()
    expect(snap?.positions).toEqual([{ topic: TOPIC, partition: 0, offset: 1999n }])
    expect(await first.catchUp()).toBe(1000) // processed past the snapshot, then "crashes"
    await first.close()

    const second = processor(join(dir, 'b'), log, snapshots)
    const progress: Progress[] = []
    second.on('progress', (p) => progress.push(p))
    const started = await second.start()
    // The first owner's claim had epoch 1; the next claim's is above it.
    expect(started).toMatchObject({ source: 'snapshot', snapshot: snap!.id, offset: 1999n, epoch: 2 })
    expect(started.bytesDownloaded).toBeGreaterThan(0)
    expect(await second.catchUp()).toBe(1000)
    expect(await readTotals(second.store)).toEqual(fold(2999))
    const restoreDone = progress.find((p) => p.phase === 'restore' && p.final)
    expect(restoreDone).toMatchObject({ unit: 'bytes', etaMs: 0 })
    expect(restoreDone!.done).toBe(restoreDone!.total)
    expect(progress.find((p) => p.phase === 'replay' && p.final)).toMatchObject({ unit: 'events', done: 1000, total: 1000 })
    await second.close()
    await log.close()
  })

  it('uses the intact local store and downloads nothing when it is not behind the newest snapshot', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 500)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const first = processor(dir, log, snapshots)
    await first.start()
    await first.catchUp({ end: 200n })
    await first.snapshot()
    await first.catchUp()
    await first.close()
    const again = processor(dir, log, snapshots)
    expect(await again.start()).toMatchObject({ source: 'local', bytesDownloaded: 0, offset: 499n })
    expect(await again.catchUp()).toBe(0)
    expect(await readTotals(again.store)).toEqual(fold(499))
    await again.close()
    await log.close()
  })

  it('a handler that throws stops the partition naming topic, partition and offset; nothing of the batch is committed; a restart resumes there', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 1000)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const failing = processor(dir, log, snapshots, {
      handler: async (tx, sale, ctx) => {
        if (ctx.offset === 657n) throw new Error('bad sale')
        await addSale(tx, sale, ctx)
      },
    })
    await failing.start()
    const err = await failing.catchUp().catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'TIDEMARK_HANDLER_FAILED', details: { topic: TOPIC, partition: 0, offset: 657n } })
    expect((err as Error).message).toContain('sales/0@657')
    expect((err as Error).cause).toMatchObject({ message: 'bad sale' })
    await expect(failing.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_PROCESSOR_CLOSED' })

    const store = await PartitionStore.open({ path: join(dir, 'store'), states: [totals] })
    expect(store.position(TOPIC, 0)).toBe(599n) // batches of 100: 600..699 was not committed
    expect(await readTotals(store)).toEqual(fold(599))
    await store.close()

    const applied: bigint[] = []
    const fixed = processor(dir, log, snapshots, { handler: async (tx, sale, ctx) => { applied.push(ctx.offset); await addSale(tx, sale, ctx) } })
    await fixed.start()
    await fixed.catchUp()
    expect(applied[0]).toBe(600n)
    expect(applied.filter((o) => o === 657n)).toHaveLength(1)
    expect(await readTotals(fixed.store)).toEqual(fold(999))
    await fixed.close()
    await log.close()
  })

  it('an event that does not decode stops the partition with TIDEMARK_DECODE_FAILED and its offset', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 10)
    await log.append(Buffer.from('{not json'))
    const p = processor(dir, log, new FsSnapshotStore({ root: join(dir, 'snapshots') }))
    await p.start()
    await expect(p.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_DECODE_FAILED', details: { offset: 10n } })
    await log.close()
  })

  it('validates its options at construction', () => {
    const base = { job: 'j', topic: 't', partition: 0, log: {} as FileLog, path: '/tmp/x', states: [], handler: () => {} }
    expect(() => new PartitionProcessor({ ...base, job: '' })).toThrow(/options\.job/)
    expect(() => new PartitionProcessor({ ...base, partition: -1 })).toThrow(RangeError)
    expect(() => new PartitionProcessor({ ...base })).toThrow(/options\.log/)
    expect(() => new PartitionProcessor({ ...base, log: { read() {} } as unknown as FileLog, batchSize: 0 })).toThrow(/batchSize/)
  })
})

describe('point-in-time restore', () => {
  it('equals the fold of the events up to random targets, from snapshots at or before them', async () => {
    const dir = tempDir()
    const events = 2500
    const log = await filledLog(join(dir, 'log'), events)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const live = processor(join(dir, 'live'), log, snapshots, { snapshots: { store: snapshots, retain: 10, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } } })
    await live.start()
    for (const end of [500n, 1200n, 2000n]) {
      await live.catchUp({ end })
      await live.snapshot()
    }
    await live.catchUp()
    const liveBefore = await readTotals(live.store)

    // A property test over random targets, plus the edges.
    const targets = [0, 499, 500, events - 1, ...Array.from({ length: 8 }, () => Math.floor(Math.random() * events))]
    for (const target of targets) {
      const path = join(dir, `pit-${target}-${Math.random().toString(36).slice(2)}`)
      const result = await restoreToPoint<Sale>({ job: 'sales-job', topic: TOPIC, partition: 0, log, states: [totals], handler: addSale, snapshotStore: snapshots, target: { offset: BigInt(target) }, path })
      expect(result.offset).toBe(BigInt(target))
      if (target >= 499) expect(result.snapshot).toBeDefined()
      else expect(result.snapshot).toBeUndefined()
      const store = await PartitionStore.open({ path, states: [totals] })
      expect(await readTotals(store), `target ${target}`).toEqual(fold(target))
      await store.close()
    }
    // The live store was not touched.
    expect(await readTotals(live.store)).toEqual(liveBefore)

    // As of a time: every event up to the last one at or before it.
    const path = join(dir, 'pit-time')
    const at = saleAt(1733).at + 5
    const byTime = await restoreToPoint<Sale>({ job: 'sales-job', topic: TOPIC, partition: 0, log, states: [totals], handler: addSale, snapshotStore: snapshots, target: { timestamp: at, timestampOf: (s) => s.at }, path })
    expect(byTime.offset).toBe(1733n)

    await expect(restoreToPoint<Sale>({ job: 'sales-job', topic: TOPIC, partition: 0, log, states: [totals], handler: addSale, target: { offset: BigInt(events) }, path: join(dir, 'beyond') }))
      .rejects.toMatchObject({ code: 'TIDEMARK_POINT_NOT_REACHABLE' })
    await expect(restoreToPoint<Sale>({ job: 'sales-job', topic: TOPIC, partition: 0, log, states: [totals], handler: addSale, target: { offset: 1n }, path }))
      .rejects.toThrow(/must not exist or be empty/)
    await live.close()
    await log.close()
  })
})

describe('PartitionProcessor batches', () => {
  it('a commit that fails while the next batch is processed stops the partition; that batch and the next are not written', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 1000)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const p = processor(dir, log, snapshots)
    await p.start()
    // Fault injection: the third commit's LevelDB batch (events 200..299) fails.
    const restore = interceptBatchWrites((n, real) => (n === 3 ? Promise.reject(new Error('injected: disk full')) : real()))
    const commits: bigint[] = []
    p.on('commit', ({ offset }) => commits.push(offset))
    try {
      await expect(p.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_COMMIT_FAILED' })
    } finally {
      restore()
    }
    expect(commits).toEqual([99n, 199n])
    const store = await PartitionStore.open({ path: join(dir, 'store'), states: [totals] })
    expect(store.position(TOPIC, 0)).toBe(199n)
    expect(await readTotals(store)).toEqual(fold(199))
    await store.close()

    const again = processor(dir, log, snapshots)
    await again.start()
    expect(await again.catchUp()).toBe(800)
    expect(await readTotals(again.store)).toEqual(fold(999))
    await again.close()
    await log.close()
  })

  it('the replay (first catchUp after start) commits every replayBatchSize events, later ones every batchSize', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 1000)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const p = processor(dir, log, snapshots, { batchSize: 100, replayBatchSize: 300 })
    expect(p.options).toMatchObject({ batchSize: 100, replayBatchSize: 300 })
    const sizes: number[] = []
    p.on('commit', ({ events }) => sizes.push(events))
    await p.start()
    expect(await p.catchUp({ end: 800n })).toBe(800)
    expect(sizes).toEqual([300, 300, 200])
    sizes.length = 0
    expect(await p.catchUp()).toBe(200)
    expect(sizes).toEqual([100, 100])
    expect(await readTotals(p.store)).toEqual(fold(999))
    await p.close()
    await log.close()
    expect(new PartitionProcessor({ job: 'j', topic: 't', partition: 0, log, path: dir, states: [], handler: () => undefined, batchSize: 50 }).options.replayBatchSize).toBe(50)
    expect(new PartitionProcessor({ job: 'j', topic: 't', partition: 0, log, path: dir, states: [], handler: () => undefined }).options.replayBatchSize).toBe(10_000)
    expect(() => new PartitionProcessor({ job: 'j', topic: 't', partition: 0, log, path: dir, states: [], handler: () => undefined, replayBatchSize: 0 })).toThrow(/replayBatchSize/)
  })

  it('a batch also closes at the store\'s memtable size (batchBytes), so a replay of large writes commits in pieces', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 300)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const notes = valueState<string>('notes')
    // Each event writes a 2,000-character string (2,002 bytes of JSON) under a key of about 25 bytes.
    const p = processor(dir, log, snapshots, {
      states: [totals, notes], replayBatchSize: 10_000, store: { writeBufferSize: 64 * 1024 },
      handler: (tx, sale) => { tx.value(notes).put(`n${sale.at}`, 'x'.repeat(2000)) },
    })
    const sizes: number[] = []
    p.on('commit', ({ events }) => sizes.push(events))
    await p.start()
    expect(p.store.batchBytes).toBe(64 * 1024)
    expect(await p.catchUp()).toBe(300)
    // A batch closes with the event that takes it to 65,536 bytes or more: the 33rd.
    expect(sizes).toEqual([...Array<number>(9).fill(33), 3])
    let stored = 0
    for await (const _ of p.store.transaction().value(notes).entries()) stored++
    expect(stored).toBe(300)
    await p.close()
    await log.close()
  })

  it('a synchronous handler is applied without an await per event', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 500)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const seen: bigint[] = []
    const p = processor(dir, log, snapshots, { handler: (tx, sale, ctx) => { seen.push(ctx.offset); tx.value(totals).put(`last-${sale.key}`, sale.amount) } })
    await p.start()
    expect(await p.catchUp()).toBe(500)
    expect(seen).toHaveLength(500)
    expect(p.offset).toBe(499n)
    await p.close()
    await log.close()
  })

  it('a checkpoint asked for while handlers run waits for the end of their batch; getSync() in between is served', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 1000)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const taken: bigint[] = []
    let asked!: () => void
    const quiesceAsked = new Promise<void>((resolve) => { asked = resolve })
    let snapshot: Promise<unknown> | undefined
    const p: PartitionProcessor<Sale> = processor(dir, log, snapshots, {
      batchSize: 50,
      handler: async (tx, sale, ctx) => {
        // Wait until the checkpoint has asked the store to quiesce: from here
        // to the end of the batch the quiesce waits for the processor.
        if (ctx.offset === 250n) snapshot = p.snapshot()
        if (ctx.offset === 251n) await quiesceAsked
        const view = tx.value(totals)
        view.put(sale.key, (view.getSync(sale.key) ?? 0) + sale.amount)
      },
    })
    p.on('snapshot', (r) => taken.push(r.positions[0]!.offset))
    await p.start()
    // Fault-injection style wrap of one call: learn when the quiesce is asked for.
    const quiesce = p.store.quiesce.bind(p.store)
    p.store.quiesce = (fn) => {
      asked()
      return quiesce(fn)
    }
    expect(await p.catchUp()).toBe(1000)
    await snapshot
    // The checkpoint ran when the processor let go of the store after event
    // 299, before that batch's commit, which queued behind it: it holds the
    // state committed at 249, exactly.
    expect(taken[0]).toBe(249n)
    expect(await readTotals(p.store)).toEqual(fold(999))
    await p.close()
    await log.close()
  })
})
