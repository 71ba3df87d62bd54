// The processor against what others may do to its snapshot store, snapshots
// asked for while one uploads, and a disk that fills up.
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { ClassicLevel } from 'classic-level'
import { describe, expect, it } from 'vitest'
import {
  FsSnapshotStore, PartitionProcessor, openFileLog, type FileLog, type RestoreEvent, type SnapshotResult,
} from '../../src/index.js'
import { interceptNextBatchWrite } from '../helpers/faults.js'
import { tempDir } from '../helpers/tmp.js'
import { addSale, fold, readTotals, saleAt, TOPIC, totals, type Sale } from './fixtures/totals.js'

type Options = ConstructorParameters<typeof PartitionProcessor<Sale>>[0]

async function filledLog(dir: string, events: number): Promise<FileLog> {
  const log = await openFileLog(dir, { sync: false })
  for (let i = 0; i < events; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
  return log
}

function processor(path: string, log: FileLog, store: FsSnapshotStore, overrides: Partial<Options> = {}): PartitionProcessor<Sale> {
  return new PartitionProcessor<Sale>({
    job: 'sales-job', topic: TOPIC, partition: 0, log, path, states: [totals], handler: addSale,
    batchSize: 100, snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    ...overrides,
  })
}

async function readText(store: FsSnapshotStore, key: string): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of (await store.get(key)) as Readable) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8')
}

/** A write error as a full disk raises it. */
function enospc(): Error {
  return Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28, syscall: 'write' })
}

/** Fault injection on one call: the next LevelDB open (a store's reopen after a checkpoint) fails as on a full disk. */
function failNextOpen(): () => void {
  const proto = ClassicLevel.prototype as unknown as { _open(options: unknown): Promise<void> }
  const original = proto._open
  proto._open = async function (this: unknown) {
    proto._open = original
    throw enospc()
  }
  return () => { proto._open = original }
}

/** The snapshot store's next put waits until released (an upload in flight); later ones are left alone. */
function holdNextPut(store: FsSnapshotStore): { started: Promise<void>; release: () => void } {
  const put = store.put.bind(store)
  let started!: () => void
  let release!: () => void
  const startedP = new Promise<void>((resolve) => { started = resolve })
  const released = new Promise<void>((resolve) => { release = resolve })
  store.put = async (key, body, options) => {
    store.put = put
    started()
    await released
    return put(key, body, options)
  }
  return { started: startedP, release }
}

const manifests = 'sales-job/0/manifests/'

describe('PartitionProcessor start: manifests that do not verify', () => {
  it('junk named with the largest epoch or sequence neither stops a new owner nor numbers it: the epoch comes from manifests that verify, and the junk is reported', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 1000)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const first = processor(join(dir, 'a'), log, snapshots)
    await first.start()
    await first.catchUp({ end: 500n })
    const snap = await first.snapshot()
    await first.close()
    await snapshots.put(`${manifests}9999999999-000000000000.json`, Buffer.from('junk'))
    await snapshots.put(`${manifests}0000000000-999999999999.json`, Buffer.from('{}'))

    const second = processor(join(dir, 'b'), log, snapshots)
    const events: RestoreEvent[] = []
    second.on('restore', (e) => events.push(e))
    const started = await second.start()
    // Each owner's epoch is its claim's: the first owner's 1, this one's 2.
    expect(started).toMatchObject({ source: 'snapshot', snapshot: snap!.id, epoch: 2, offset: 499n })
    const junk = [`${manifests}9999999999-000000000000.json`, `${manifests}0000000000-999999999999.json`]
    expect(started.skipped.map((s) => s.key)).toEqual(junk)
    expect(started.skipped.every((s) => s.reason === 'manifest-unreadable')).toBe(true)
    const reported = events.flatMap((e) => (e.type === 'snapshot-skipped' ? [e.skipped.key] : []))
    expect(reported.sort()).toEqual([...junk].sort())
    await second.catchUp()
    expect(await second.snapshot()).toMatchObject({ epoch: 2, sequence: 1 })
    expect(await readTotals(second.store)).toEqual(fold(999))
    await second.close()
    await log.close()
  })

  it('junk older than the snapshot restored, which the restore never reads, is reported by start() too', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 600)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const first = processor(join(dir, 'a'), log, snapshots)
    await first.start()
    await first.catchUp({ end: 300n })
    await first.snapshot()
    await first.close()
    const second = processor(join(dir, 'b'), log, snapshots)
    expect((await second.start()).epoch).toBe(2)
    await second.catchUp()
    const newest = await second.snapshot()
    await second.close()
    const junk = `${manifests}0000000000-000000000005.json`
    await snapshots.put(junk, Buffer.from('junk'))

    const third = processor(join(dir, 'c'), log, snapshots)
    const events: RestoreEvent[] = []
    third.on('restore', (e) => events.push(e))
    const started = await third.start()
    expect(started).toMatchObject({ source: 'snapshot', snapshot: newest!.id, epoch: 3, offset: 599n })
    expect(started.skipped).toMatchObject([{ key: junk, id: '0000000000-000000000005', reason: 'manifest-unreadable' }])
    expect(events.filter((e) => e.type === 'snapshot-skipped')).toMatchObject([{ skipped: { key: junk } }])
    await third.close()
    await log.close()
  })

  it('a manifest that verifies at the largest epoch fails start() with TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED, not a RangeError', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 200)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const first = processor(join(dir, 'a'), log, snapshots)
    await first.start()
    await first.catchUp()
    const snap = (await first.snapshot())!
    await first.close()
    const doc = JSON.parse(await readText(snapshots, snap.key)) as Record<string, unknown>
    const epoch = 9_999_999_999
    await snapshots.put(`${manifests}${epoch}-000000000001.json`, Buffer.from(`${JSON.stringify({ ...doc, epoch, sequence: 1, id: `${epoch}-000000000001` })}\n`))
    const second = processor(join(dir, 'b'), log, snapshots)
    await expect(second.start()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED', retriable: false, details: { epoch } })
    await log.close()
  })
})

describe('PartitionProcessor explicit snapshots', () => {
  it('snapshot() while an upload is in flight waits for it and takes one at the position of the call; so does close() with onClose', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 4000)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const p = processor(join(dir, 'a'), log, snapshots, { snapshots: { store: snapshots, onClose: true, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } } })
    const taken: SnapshotResult[] = []
    p.on('snapshot', (r) => taken.push(r))
    await p.start()
    await p.catchUp({ end: 2000n })

    const slow = holdNextPut(snapshots)
    const inFlight = p.snapshot()
    await slow.started // its checkpoint is taken: it holds 0..1999
    await p.catchUp({ end: 3000n })
    const asked = p.snapshot()
    slow.release()
    expect((await inFlight)?.positions).toEqual([{ topic: TOPIC, partition: 0, offset: 1999n }])
    expect((await asked)?.positions).toEqual([{ topic: TOPIC, partition: 0, offset: 2999n }])

    const slowAgain = holdNextPut(snapshots)
    const another = p.snapshot()
    await slowAgain.started
    await p.catchUp()
    const closed = p.close()
    slowAgain.release()
    await closed
    expect((await another)?.positions[0]!.offset).toBe(2999n)
    expect(taken.map((r) => r.positions[0]!.offset)).toEqual([1999n, 2999n, 2999n, 3999n])

    // The next owner replays nothing.
    const next = processor(join(dir, 'b'), log, snapshots)
    expect(await next.start()).toMatchObject({ source: 'snapshot', offset: 3999n })
    expect(await next.catchUp()).toBe(0)
    await next.close()
    await log.close()
  })
})

describe('PartitionProcessor on a full disk', () => {
  // These are about the store's reopen after a checkpoint, which only the
  // 'close' checkpoint does ('open', the default, keeps LevelDB open).
  const closing = (store: FsSnapshotStore): Partial<Options> => ({ snapshots: { store, checkpoint: 'close', schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } } })
  it('a commit that fails with ENOSPC stops the partition with TIDEMARK_COMMIT_FAILED; the snapshot in flight, whose reopen fails too, adds no second error', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 1000)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const p = processor(join(dir, 'a'), log, snapshots, closing(snapshots))
    const failed: unknown[] = []
    p.on('snapshot-failed', (e) => failed.push(e))
    await p.start()
    await p.catchUp({ end: 300n })

    let snapshot: Promise<SnapshotResult | undefined> | undefined
    let restoreOpen = (): void => undefined
    // The disk fills up during the commit of events 300..399, while a
    // snapshot is asked for: its checkpoint queues behind that commit, and
    // the store's reopen after it fails as well.
    const restoreWrite = interceptNextBatchWrite(async () => {
      snapshot = p.snapshot()
      restoreOpen = failNextOpen()
      throw enospc()
    })
    const err = await p.catchUp().catch((e: unknown) => e).finally(() => {
      restoreWrite()
      restoreOpen()
    })
    expect(err).toMatchObject({ code: 'TIDEMARK_COMMIT_FAILED', cause: { code: 'ENOSPC' } })
    expect(await snapshot).toBeUndefined()
    expect(failed).toEqual([])
    await expect(p.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_PROCESSOR_CLOSED', cause: err })

    // Space is back: a restart resumes after the last commit that was written.
    const again = processor(join(dir, 'a'), log, snapshots)
    expect(await again.start()).toMatchObject({ offset: 299n })
    expect(await again.catchUp()).toBe(700)
    expect(await readTotals(again.store)).toEqual(fold(999))
    await again.close()
    await log.close()
  })

  it('a reopen after a checkpoint that fails with ENOSPC stops the partition with the store\'s error: no snapshot-failed, no TIDEMARK_HANDLER_FAILED', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 1000)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const p = processor(join(dir, 'a'), log, snapshots, closing(snapshots))
    const failed: unknown[] = []
    p.on('snapshot-failed', (e) => failed.push(e))
    await p.start()
    await p.catchUp({ end: 300n })

    const restoreOpen = failNextOpen()
    try {
      expect(await p.snapshot()).toBeUndefined()
    } finally {
      restoreOpen()
    }
    const err = await p.catchUp().catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'TIDEMARK_STORE_OPEN_FAILED' })
    expect(failed).toEqual([])
    await expect(p.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_PROCESSOR_CLOSED' })
    await log.close()
  })

  it('a checkpoint asked for while handlers run, whose reopen fails with ENOSPC, stops the partition with the store\'s error, not TIDEMARK_HANDLER_FAILED', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 1000)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    let asked: Promise<SnapshotResult | undefined> | undefined
    let quiesceAsked!: () => void
    const quiesced = new Promise<void>((resolve) => { quiesceAsked = resolve })
    const p: PartitionProcessor<Sale> = processor(join(dir, 'a'), log, snapshots, {
      ...closing(snapshots),
      handler: async (tx, sale, ctx) => {
        // A checkpoint is asked for while handlers run: it runs when this
        // batch lets go of the store, before the batch's commit.
        if (ctx.offset === 350n) asked = p.snapshot()
        if (ctx.offset === 351n) await quiesced
        await addSale(tx, sale, ctx)
      },
    })
    const failed: unknown[] = []
    p.on('snapshot-failed', (e) => failed.push(e))
    await p.start()
    await p.catchUp({ end: 300n })
    // Fault-injection style wrap of one call: learn when the quiesce is asked for.
    const quiesce = p.store.quiesce.bind(p.store)
    p.store.quiesce = (fn, options) => {
      quiesceAsked()
      return quiesce(fn, options)
    }
    const restoreOpen = failNextOpen()
    const err = await p.catchUp().catch((e: unknown) => e)
    expect(await asked).toBeUndefined()
    restoreOpen()
    expect(err).toMatchObject({ code: 'TIDEMARK_STORE_OPEN_FAILED' })
    expect(failed).toEqual([])
    await log.close()
  })
})

describe('PartitionProcessor: calls that overlap', () => {
  it('catchUp() while another catch-up runs (two calls, or run() and a call) waits for it: every event applied once, both resolve', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 3000)
    const p = processor(join(dir, 'state'), log, new FsSnapshotStore({ root: join(dir, 'snapshots') }))
    await p.start()
    // They used to read from the same position: the second commit was refused (not after the stored
    // position) and both calls failed with the partition stopped.
    const [first, second] = await Promise.all([p.catchUp(), p.catchUp()])
    expect([first, second]).toEqual([3000, 0])
    for (let i = 3000; i < 3500; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
    const stop = new AbortController()
    const running = p.run(stop.signal)
    expect(await p.catchUp()).toBeGreaterThanOrEqual(0)
    expect(p.offset).toBe(3499n)
    stop.abort()
    await running
    expect(await readTotals(p.store)).toEqual(fold(3499))
    await p.close()
    await log.close()
  })

  it('close() during a catch-up: the catch-up rejects with TIDEMARK_PROCESSOR_CLOSED (not the store\'s error), the committed batches stay', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 3000)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const p = processor(join(dir, 'state'), log, snapshots)
    await p.start()
    const catching = p.catchUp().catch((e: unknown) => e)
    await new Promise((resolve) => p.once('commit', resolve))
    await p.close()
    const err = await catching
    expect(err).toMatchObject({ code: 'TIDEMARK_PROCESSOR_CLOSED', message: expect.stringMatching(/closed during the catch-up/) })
    // The next owner finds what was committed and applies the rest once.
    const next = processor(join(dir, 'state'), log, snapshots)
    await next.start()
    await next.catchUp()
    expect(await readTotals(next.store)).toEqual(fold(2999))
    await next.close()
    await log.close()
  })
})
