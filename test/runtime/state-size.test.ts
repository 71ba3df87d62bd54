import { once } from 'node:events'
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import {
  FsSnapshotStore, METRICS_CHANNELS, PartitionProcessor, PartitionStore, StoreBudget, openFileLog, type FileLog, type Logger, type StateSizeExceeded, type StateSizeMessage,
} from '../../src/index.js'
import { StateSizeWatch } from '../../src/runtime/state-size.js'
import { PartitionLifecycle } from '../../src/runtime/partition-lifecycle.js'
import { PartitionOutputs } from '../../src/outputs/partition-outputs.js'
import { tempDir } from '../helpers/tmp.js'
import { addSale, saleAt, TOPIC, totals, type Sale } from './fixtures/totals.js'

/** A logger that keeps its warn lines. */
function warnings(): { logger: Logger; lines: Array<{ fields: Record<string, unknown>; message: string }> } {
  const lines: Array<{ fields: Record<string, unknown>; message: string }> = []
  const logger = {
    debug: () => undefined, info: () => undefined, error: () => undefined,
    warn: (fields: object, message: string) => { lines.push({ fields: fields as Record<string, unknown>, message }) },
  } as unknown as Logger
  return { logger, lines }
}

/** The state-size messages of one job, as they are published. */
function stateSizeMessages(job: string): StateSizeMessage[] {
  const messages: StateSizeMessage[] = []
  const handler = (m: unknown): void => { if ((m as StateSizeMessage).job === job) messages.push(m as StateSizeMessage) }
  subscribe(METRICS_CHANNELS.stateSize, handler)
  onTestFinished(() => { unsubscribe(METRICS_CHANNELS.stateSize, handler) })
  return messages
}

async function sales(dir: string, from: number, to: number, log?: FileLog): Promise<FileLog> {
  log ??= await openFileLog(dir, { sync: false })
  for (let i = from; i < to; i++) await log.append(Buffer.from(JSON.stringify({ ...saleAt(i), key: `key-${i}`, pad: 'x'.repeat(200) })))
  return log
}

async function fill(store: PartitionStore, from: number, to: number): Promise<void> {
  const tx = store.transaction()
  for (let i = from; i < to; i++) tx.value(totals).put(`key-${i}`, i)
  await tx.commit({ topic: TOPIC, partition: 0, offset: BigInt(to - 1) })
}

describe('a partition\'s state size', () => {
  it('is measured from the store\'s files: it grows as state is written, at most once per interval after commits, and an idle-closed store stays closed', async () => {
    let now = 0
    const budget = new StoreBudget({ idleCloseMs: 1000, clock: () => now })
    const path = tempDir()
    const store = await PartitionStore.open({ path, states: [totals], budget })
    onTestFinished(() => store.close())
    const sizes: number[] = []
    const watch = new StateSizeWatch({
      path, job: 'size', topic: TOPIC, partition: 0, logger: warnings().logger,
      stateSize: { everyMs: 1000, clock: () => now },
      events: { stateSize: (bytes) => sizes.push(bytes) },
    })
    await watch.measure()
    expect(sizes).toHaveLength(1)
    const empty = sizes[0]!
    expect(empty).toBeGreaterThan(0)

    await fill(store, 0, 500)
    // Within the interval a commit measures nothing.
    now += 999
    expect(watch.committed()).toBeUndefined()
    expect(sizes).toHaveLength(1)
    now += 1
    await watch.committed()
    expect(sizes).toHaveLength(2)
    expect(sizes[1]!).toBeGreaterThan(empty + 500 * 10)

    await fill(store, 500, 1500)
    now += 1000
    await watch.committed()
    expect(sizes[2]!).toBeGreaterThan(sizes[1]! + 1000 * 10)

    // Idle-closed, the store's files are measured as they are, and it is not opened for that.
    now += 1000
    await budget.closeIdle()
    now += 1000
    expect(await budget.closeIdle()).toBe(1)
    expect(store.idle).toBe(true)
    now += 1000
    await watch.committed()
    expect(sizes).toHaveLength(4)
    expect(sizes[3]!).toBeGreaterThan(empty)
    expect(store.idle).toBe(true)
  })

  it('a partition\'s lifecycle measures it at its start and after a commit once its clock says the interval has passed, and reports the crossing once', async () => {
    let now = 0
    const path = tempDir()
    const { logger, lines } = warnings()
    const sizes: number[] = []
    let measured: () => void = () => undefined
    const exceeded: StateSizeExceeded[] = []
    const none = (): void => undefined
    const life = new PartitionLifecycle({
      job: 'size-life', key: 0, topic: TOPIC, partition: 0, path, states: [totals], allowEmpty: true, logger,
      outputs: new PartitionOutputs({ job: 'size-life', topic: TOPIC, partition: 0, outputs: undefined, dedupe: 'off' }),
      stateSize: { limit: 8 * 1024, everyMs: 1000, clock: () => now },
      events: {
        restore: none, snapshot: none, snapshotFailed: none, snapshotter: none, ownership: none,
        stateSize: (bytes) => { sizes.push(bytes); measured() },
        stateSizeExceeded: (e) => exceeded.push(e),
      },
    })
    onTestFinished(() => life.shutdown())
    await life.start()
    expect(sizes).toHaveLength(1)
    const commit = async (from: number, to: number): Promise<void> => {
      await fill(life.store!, from, to)
      life.committed(to - from, 0, BigInt(to - 1))
    }
    await commit(0, 1000)
    now += 999
    await commit(1000, 1001)
    expect(sizes).toHaveLength(1)
    now += 1
    const next = new Promise<void>((resolve) => { measured = resolve })
    await commit(1001, 1002)
    await next
    expect(sizes).toHaveLength(2)
    expect(sizes[1]!).toBeGreaterThan(8 * 1024)
    expect(exceeded).toEqual([{ bytes: sizes[1], limit: 8 * 1024 }])
    expect(lines.filter((l) => l.message.includes('soft limit'))).toHaveLength(1)
  })

  it('a processor publishes it (tidemark:state-size) at its start and at each snapshot, and its soft limit reports the crossing once with a warn line and an event', async () => {
    const dir = tempDir()
    const log = await sales(join(dir, 'log'), 0, 1000)
    onTestFinished(() => log.close())
    const { logger, lines } = warnings()
    const messages = stateSizeMessages('size-limit')
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const make = (path: string, stateSizeLimit: number) => new PartitionProcessor<Sale>({
      job: 'size-limit', topic: TOPIC, partition: 0, log, path, states: [totals], handler: addSale, logger, stateSizeLimit,
      snapshots: { store: snapshots, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    })
    // A new store is a few hundred bytes (CURRENT, MANIFEST, a short log); 1,000 keys are tens of KB.
    const p = make(join(dir, 'a'), 8 * 1024)
    const exceeded: StateSizeExceeded[] = []
    p.on('state-size-exceeded', (e) => exceeded.push(e))
    await p.start()
    expect(messages).toHaveLength(1)
    expect(messages[0]).toMatchObject({ job: 'size-limit', topic: TOPIC, partition: 0, limit: 8 * 1024 })
    expect(messages[0]!.bytes).toBeLessThan(8 * 1024)
    expect(exceeded).toHaveLength(0)

    expect(await p.catchUp()).toBe(1000)
    // The snapshot's files are its measure, reported before its result.
    const snap = await p.snapshot()
    expect(messages).toHaveLength(2)
    expect(messages[1]!.bytes).toBe(snap!.bytesTotal)
    expect(snap!.bytesTotal).toBeGreaterThan(8 * 1024)
    expect(exceeded).toEqual([{ bytes: snap!.bytesTotal, limit: 8 * 1024 }])
    const warned = lines.filter((l) => l.message.includes('soft limit'))
    expect(warned).toHaveLength(1)
    expect(warned[0]!.fields).toEqual({ job: 'size-limit', topic: TOPIC, partition: 0, bytes: snap!.bytesTotal, limit: 8 * 1024 })
    expect(warned[0]!.message).toMatch(/add partitions/)

    // Still above: measured again, not reported again. Nothing was refused.
    await sales(join(dir, 'log'), 1000, 1100, log)
    expect(await p.catchUp()).toBe(100)
    const again = await p.snapshot()
    expect(messages).toHaveLength(3)
    expect(messages[2]!.bytes).toBe(again!.bytesTotal)
    expect(exceeded).toHaveLength(1)
    expect(lines.filter((l) => l.message.includes('soft limit'))).toHaveLength(1)
    await p.close()

    // A partition restarted above its limit says so at its start.
    const q = make(join(dir, 'a'), 1024)
    const atStart = once(q, 'state-size-exceeded')
    await q.start()
    const [e] = await atStart as [StateSizeExceeded]
    expect(e.limit).toBe(1024)
    expect(e.bytes).toBeGreaterThan(8 * 1024)
    await q.close()

    // A partition restored from a snapshot measures its state by the snapshot's files, like a snapshot does.
    const before = messages.length
    const r = make(join(dir, 'b'), 1024)
    const started = await r.start()
    expect(started).toMatchObject({ source: 'snapshot', snapshot: again!.id })
    expect(messages.slice(before)).toEqual([expect.objectContaining({ bytes: again!.bytesTotal, limit: 1024 })])
    await r.close()
  })

  it('the soft limit is a positive safe integer of bytes: anything else is refused with the option and the value named', () => {
    const base = { job: 'j', topic: TOPIC, partition: 0, path: tempDir(), states: [totals], handler: addSale, log: { read: () => undefined } as never }
    for (const bad of [0, -1, 1.5, Number.NaN, Infinity, 2 ** 53]) {
      expect(() => new PartitionProcessor({ ...base, stateSizeLimit: bad }), String(bad)).toThrow(new RangeError(`options.stateSizeLimit must be a positive safe integer (bytes), got ${bad}`))
    }
    expect(() => new PartitionProcessor({ ...base, stateSizeLimit: '1GB' as never })).toThrow(new TypeError("options.stateSizeLimit must be a number of bytes, got '1GB'"))
    expect(() => new PartitionProcessor({ ...base, stateSizeLimit: 1 })).not.toThrow()
  })
})
