// transformState into a new job: the new job, started on the transformed
// snapshot, resumes exactly at the source's positions, so that its state over
// the rest of the log is what an independent fold of the transformed state
// plus the rest gives. Real LevelDB directories, a file:// snapshot store and
// the embedded file log.
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import {
  FsSnapshotStore, PartitionProcessor, openFileLog, readClaim, transformState,
  type FileLog, type SnapshotStore, type StateEntry, type TransformProgress,
} from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import {
  NEW_STATES, OLD_STATES, TOPIC, foldRest, newHandler, oldHandler, oldTotals, readNewState, saleAt, toNewProgram, transformed, type Sale,
} from './fixtures/jobs.js'

async function filledLog(dir: string, events: number): Promise<FileLog> {
  const log = await openFileLog(dir, { sync: false })
  for (let i = 0; i < events; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
  onTestFinished(() => log.close())
  return log
}

function snapshotStore(dir: string): SnapshotStore {
  const store = new FsSnapshotStore({ root: join(dir, 'snapshots') })
  onTestFinished(() => store.close())
  return store
}

function oldJob(path: string, log: FileLog, store: SnapshotStore): PartitionProcessor<Sale> {
  return new PartitionProcessor<Sale>({
    job: 'sales', topic: TOPIC, partition: 0, log, path, states: OLD_STATES, handler: oldHandler,
    batchSize: 50, snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
  })
}

function newJob(job: string, path: string, log: FileLog, store: SnapshotStore): PartitionProcessor<Sale> {
  return new PartitionProcessor<Sale>({
    job, topic: TOPIC, partition: 0, log, path, states: NEW_STATES, handler: newHandler,
    batchSize: 50, snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
  })
}

async function manifests(store: SnapshotStore, prefix: string): Promise<string[]> {
  const keys: string[] = []
  for await (const info of store.list(`${prefix}manifests/`)) keys.push(info.key)
  return keys.sort()
}

describe('transformState into a new job', () => {
  it('the new job resumes from the transformed snapshot over the rest of the log and holds the independent fold of the transformed state plus the rest', async () => {
    const dir = tempDir('tidemark-transform-')
    const log = await filledLog(join(dir, 'log'), 300)
    const store = snapshotStore(dir)
    const old = oldJob(join(dir, 'old'), log, store)
    await old.start()
    await old.catchUp({ end: 120n })
    const source = (await old.snapshot())!
    await old.catchUp()
    await old.snapshot()
    await old.close()
    const sourceManifests = await manifests(store, 'sales/0/')

    const progress: TransformProgress['phase'][] = []
    const result = await transformState({
      snapshotStore: store,
      from: { job: 'sales', partition: 0, states: OLD_STATES },
      to: { job: 'sales-by-bucket' },
      states: NEW_STATES,
      transform: toNewProgram,
      batchSize: 40,
      workDir: join(dir, 'work'),
      onProgress: (p) => progress.push(p.phase),
    })
    // The newest snapshot of the source is the one after the whole log.
    const newest = (await manifests(store, 'sales/0/')).at(-1)!
    expect(newest).not.toBe(source.key)
    expect(result).toMatchObject({
      job: 'sales-by-bucket', partition: '0',
      positions: [{ topic: TOPIC, partition: 0, offset: 299n }],
      source: { job: 'sales', partition: '0', offset: null, replayed: 0 },
      snapshot: { epoch: 1 },
    })
    expect(result.lineage).toMatch(/^[0-9a-f]{16}$/)
    const expected = transformed(oldTotals(299n))
    expect(result.states).toEqual({ 'by-bucket': expected.byBucket.size, 'per-key': expected.perKey.size })
    expect(result.read).toBe(oldTotals(299n).size * 2) // totals and legacy
    expect(progress).toEqual(expect.arrayContaining(['claimed', 'restore', 'transform', 'snapshot']))
    // The source is only read; the target's claim is released, naming the snapshot.
    expect(await manifests(store, 'sales/0/')).toEqual(sourceManifests)
    expect((await readClaim(store, 'sales-by-bucket', 0))?.record).toMatchObject({ epoch: 1, leaseUntil: 0, lastSnapshot: result.snapshot.key })

    // More events arrive; the new job starts on the transformed snapshot.
    for (let i = 300; i < 420; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
    const next = newJob('sales-by-bucket', join(dir, 'new'), log, store)
    expect(await next.start()).toMatchObject({ source: 'snapshot', snapshot: result.snapshot.id, offset: 299n, epoch: 2 })
    expect(await next.catchUp()).toBe(120)
    expect(await readNewState(next.store.transaction())).toEqual(foldRest(expected, 300n, 419n))
    await next.close()
  })

  it('from an offset: the newest snapshot at or before it, then the log replayed through the old handler; the new job resumes right after that offset', async () => {
    const dir = tempDir('tidemark-transform-')
    const log = await filledLog(join(dir, 'log'), 400)
    const store = snapshotStore(dir)
    const old = oldJob(join(dir, 'old'), log, store)
    await old.start()
    await old.catchUp({ end: 100n })
    const at99 = (await old.snapshot())!
    await old.catchUp({ end: 300n })
    await old.snapshot()
    await old.close()

    const result = await transformState({
      snapshotStore: store,
      from: { job: 'sales', partition: 0, states: OLD_STATES, offset: 180n, replay: { log, topic: TOPIC, handler: oldHandler } },
      to: { job: 'sales-at-180', partition: 0 },
      states: NEW_STATES,
      transform: toNewProgram,
      workDir: join(dir, 'work'),
    })
    expect(result).toMatchObject({
      positions: [{ topic: TOPIC, partition: 0, offset: 180n }],
      source: { job: 'sales', snapshot: at99.id, offset: 180n, replayed: 81 },
    })
    const next = newJob('sales-at-180', join(dir, 'new'), log, store)
    expect(await next.start()).toMatchObject({ source: 'snapshot', snapshot: result.snapshot.id, offset: 180n })
    await next.catchUp()
    expect(await readNewState(next.store.transaction())).toEqual(foldRest(transformed(oldTotals(180n)), 181n, 399n))
    await next.close()
  })

  it('per state: the function gets each source state with its entries, and what it does not put is dropped', async () => {
    const dir = tempDir('tidemark-transform-')
    const log = await filledLog(join(dir, 'log'), 150)
    const store = snapshotStore(dir)
    const old = oldJob(join(dir, 'old'), log, store)
    await old.start()
    await old.catchUp()
    await old.snapshot()
    await old.close()

    const seen: string[] = []
    const result = await transformState({
      snapshotStore: store,
      from: { job: 'sales', partition: 0, states: OLD_STATES },
      to: { job: 'sales-per-state' },
      states: NEW_STATES,
      perState: async (state, target) => {
        seen.push(`${state.name}:${state.kind}`)
        if (state.name !== 'totals') return
        // The whole state at once: a merge that needs no reads of the target.
        const sums = new Map<string, number>()
        const entries: StateEntry[] = []
        for await (const entry of state.entries()) entries.push(entry)
        for (const entry of entries) {
          const key = entry.key as string
          const bucket = `b${Number(key.slice(1)) % 7}`
          sums.set(bucket, (sums.get(bucket) ?? 0) + (entry.value as number))
          await target.put({ state: 'per-key', key: bucket, subKey: key, value: entry.value })
        }
        for (const [bucket, sum] of sums) await target.put({ state: 'by-bucket', key: bucket, value: sum })
      },
      workDir: join(dir, 'work'),
    })
    expect(seen).toEqual(['legacy:value', 'totals:value'])
    expect(result.positions).toEqual([{ topic: TOPIC, partition: 0, offset: 149n }])
    const next = newJob('sales-per-state', join(dir, 'new'), log, store)
    await next.start()
    expect(await readNewState(next.store.transaction())).toEqual(transformed(oldTotals(149n)))
    await next.close()
  })
})
