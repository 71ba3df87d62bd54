import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  FsSnapshotStore, PartitionProcessor, TidemarkError, openFileLog, restoreSnapshot, valueState, type EventHandler, type FileLog,
} from '../../src/index.js'
import { listManifests, readManifest } from '../../src/snapshot/catalog.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { tempDir } from '../helpers/tmp.js'
import { saleAt, TOPIC, type Sale } from './fixtures/totals.js'

// Version 2: a number. Version 3: { sum, n }.
const totals2 = valueState<number>('totals', { version: 2, upgrade: { 1: (v: number) => v } })
const totals3 = valueState<{ sum: number; n: number }>('totals', { version: 3, upgrade: { 1: (v: number) => v, 2: (v: number) => ({ sum: v, n: 0 }) } })
const add2: EventHandler<Sale> = async (tx, sale) => {
  const view = tx.value(totals2)
  view.put(sale.key, ((await view.get(sale.key)) ?? 0) + sale.amount)
}
const add3: EventHandler<Sale> = async (tx, sale) => {
  const view = tx.value(totals3)
  const old = (await view.get(sale.key)) ?? { sum: 0, n: 0 }
  view.put(sale.key, { sum: old.sum + sale.amount, n: old.n + 1 })
}

async function filledLog(dir: string, events: number): Promise<FileLog> {
  const log = await openFileLog(dir, { sync: false })
  for (let i = 0; i < events; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
  return log
}

const JOB = 'versions-job'
function processor(path: string, log: FileLog, store: FsSnapshotStore, version: 2 | 3): PartitionProcessor<Sale> {
  return new PartitionProcessor<Sale>({
    job: JOB, topic: TOPIC, partition: 0, log, path, batchSize: 50,
    ...(version === 2 ? { states: [totals2], handler: add2 } : { states: [totals3], handler: add3 }),
    snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
  })
}

describe('state versions across snapshots', () => {
  it('a manifest records each state\'s kind and version; code at version 2 refuses the snapshot and the store at version 3 before any commit', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 300)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const layout = new SnapshotLayout(JOB, 0)

    const v3 = processor(join(dir, 'a'), log, snapshots, 3)
    await v3.start()
    await v3.catchUp({ end: 200n })
    const snap = (await v3.snapshot())!
    await v3.close()
    const [ref] = await listManifests(snapshots, layout)
    const manifest = await readManifest(snapshots, layout, ref!)
    expect(manifest.id).toBe(snap.id)
    const user = manifest.states!.find((s) => s.name === 'totals')
    expect(user).toEqual({ name: 'totals', kind: 'value', version: 3 })
    // The outputs' own states are listed too, unversioned.
    expect(manifest.states!.every((s) => s.name === 'totals' || s.version === undefined)).toBe(true)
    const manifestsBefore = (await listManifests(snapshots, layout)).map((r) => r.key)

    // From the snapshot, into a fresh directory: refused before anything is downloaded.
    const fresh = join(dir, 'b')
    const v2 = processor(fresh, log, snapshots, 2)
    const err = await v2.start().catch((e: unknown) => e)
    expect(err).toBeInstanceOf(TidemarkError)
    expect(err).toMatchObject({ code: 'TIDEMARK_STATE_VERSION_AHEAD', details: { state: 'totals', storedVersion: 3, declaredVersion: 2 } })
    expect((err as Error).message).toContain(`snapshot ${snap.id}`)
    await v2.close().catch(() => undefined)
    expect(await readdir(fresh).catch(() => [])).toEqual([])
    await expect(restoreSnapshot({ snapshotStore: snapshots, job: JOB, partition: 0, target: join(dir, 'c'), states: [totals2] })).rejects.toMatchObject({ code: 'TIDEMARK_STATE_VERSION_AHEAD' })
    expect(await readdir(join(dir, 'c')).catch(() => [])).toEqual([])

    // The store the version 3 program left: refused too, nothing processed, no snapshot committed.
    const local = processor(join(dir, 'a'), log, snapshots, 2)
    await expect(local.start()).rejects.toMatchObject({ code: 'TIDEMARK_STATE_VERSION_AHEAD' })
    await local.close().catch(() => undefined)
    expect((await listManifests(snapshots, layout)).map((r) => r.key)).toEqual(manifestsBefore)

    // Without snapshots the store alone refuses it as well.
    const bare = new PartitionProcessor<Sale>({ job: JOB, topic: TOPIC, partition: 0, log, path: join(dir, 'a'), states: [totals2], handler: add2 })
    await expect(bare.start()).rejects.toMatchObject({ code: 'TIDEMARK_STATE_VERSION_AHEAD' })
    await bare.close().catch(() => undefined)

    // Version 3 again resumes where it was.
    const again = processor(join(dir, 'a'), log, snapshots, 3)
    await again.start()
    expect(await again.catchUp()).toBe(100)
    await again.close()
    await log.close()
  })
})
