import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { restoreSnapshot, Snapshotter, type SnapshotResult } from '../../src/index.js'
import { planCompaction } from '../../src/snapshot/policy.js'
import { tempDir } from '../helpers/tmp.js'
import { fixture, levelDigest, storeDigest, type Fixture } from './helpers.js'

const fixtures: Fixture[] = []
afterEach(async () => {
  await Promise.all(fixtures.splice(0).map((f) => f.close()))
})

async function setup(options: Parameters<typeof fixture>[2]): Promise<Fixture> {
  const f = await fixture(tempDir('tidemark-gc-'), 5000, options)
  fixtures.push(f)
  return f
}

async function dataObjects(f: Fixture): Promise<string[]> {
  const keys: string[] = []
  for await (const info of f.dfs.list('job/0/data/')) keys.push(info.key)
  return keys.sort()
}

describe('retention and garbage collection', () => {
  it('keep the newest snapshots and delete only unreferenced objects older than the grace period', async () => {
    const f = await setup({ retain: 2, gcAfterSnapshot: false, graceMs: 60_000 })
    const taken: SnapshotResult[] = []
    for (let i = 0; i < 4; i++) {
      await f.write(i * 100, i * 100 + 100, 2 + i)
      taken.push(await f.snapshotter.takeSnapshot({ full: true }))
    }
    const digest = await storeDigest(f.store)
    const [s0, s1, s2, s3] = taken as [SnapshotResult, SnapshotResult, SnapshotResult, SnapshotResult]

    const young = await f.snapshotter.gc()
    expect(young.retained).toEqual([s3.id, s2.id])
    expect(young.deletedManifests).toEqual([s1.key, s0.key])
    expect(young.deletedObjects).toEqual([])
    expect(young.youngObjects).toBe(s0.objects.length + s1.objects.length)

    const old = await f.snapshotter.gc({ now: Date.now() + 61_000 })
    expect(old.deletedManifests).toEqual([])
    expect(old.deletedObjects.sort()).toEqual([...s0.objects, ...s1.objects].sort())
    expect(await dataObjects(f)).toEqual([...s2.objects, ...s3.objects].sort())

    const target = join(f.dir, 'restored')
    await restoreSnapshot({ snapshotStore: f.dfs, job: 'job', partition: 0, target })
    expect(await levelDigest(target)).toEqual(digest)
  })

  it('run after each snapshot with gcEverySnapshots: 1, keeping objects that kept snapshots still reference', async () => {
    const f = await setup({ retain: 3, graceMs: 0, gcEverySnapshots: 1 })
    const taken: SnapshotResult[] = []
    for (let i = 0; i < 6; i++) {
      await f.write(i * 50, i * 50 + 50, 2 + i)
      taken.push(await f.snapshotter.takeSnapshot())
    }
    expect(taken.at(-1)!.gc?.retained).toHaveLength(3)
    expect((await f.snapshotter.listSnapshots()).map((s) => s.id)).toEqual(taken.slice(-3).map((t) => t.id).reverse())
    const referenced = new Set(taken.slice(-3).flatMap((t) => t.files.map((file) => `job/0/${file.object}`)))
    expect(await dataObjects(f)).toEqual([...referenced].sort())
    for (const snap of taken.slice(-3)) {
      const target = join(f.dir, `restored-${snap.id}`)
      const result = await restoreSnapshot({ snapshotStore: f.dfs, job: 'job', partition: 0, target, snapshot: snap.id })
      expect(result.positions).toEqual(snap.positions)
    }
  })

  it('wait for the next snapshot after one taken with gc: false (a hand-off), which leaves the GC due, and take the option\'s type as checked', async () => {
    const f = await setup({ retain: 1, graceMs: 0, gcEverySnapshots: 1 })
    await f.write(0, 50, 2)
    const first = await f.snapshotter.takeSnapshot({ gc: false })
    expect(first.gc).toBeUndefined()
    await f.write(50, 100, 3)
    const second = await f.snapshotter.takeSnapshot({ gc: false })
    expect(second.gc).toBeUndefined()
    // Both manifests are still there: nothing was collected.
    expect((await f.snapshotter.listSnapshots()).map((s) => s.id)).toEqual([second.id, first.id])
    await f.write(100, 150, 4)
    const third = await f.snapshotter.takeSnapshot()
    expect(third.gc?.retained).toEqual([third.id])
    expect(third.gc?.deletedManifests.sort()).toEqual([first.key, second.key].sort())
    await expect(f.snapshotter.takeSnapshot({ gc: 'no' as never })).rejects.toThrow(TypeError)
  })

  it('trust a garbled newest manifest with nothing: it is reported, does not count, and its objects wait as pending', async () => {
    const f = await setup({ retain: 2, gcAfterSnapshot: false, graceMs: 0 })
    const taken: SnapshotResult[] = []
    for (let i = 0; i < 3; i++) {
      await f.write(0, 10, 2 + i)
      taken.push(await f.snapshotter.takeSnapshot({ full: true }))
    }
    const [s0, s1, s2] = taken as [SnapshotResult, SnapshotResult, SnapshotResult]
    await writeFile(join(f.dir, 'dfs', ...s2.key.split('/')), 'garbage')
    const before = await dataObjects(f)
    // Another process: this one has the manifests it wrote in its cache.
    const gc = await new Snapshotter({ snapshotStore: f.dfs, partitionStore: f.store, job: 'job', partition: 0, retain: 2, graceMs: 0 }).gc()
    expect(gc.retained).toEqual([s1.id, s0.id])
    expect(gc.unverified).toEqual([expect.objectContaining({ id: s2.id, reason: 'manifest-unreadable', message: expect.stringMatching(/not JSON/) })])
    expect(gc.objectsSkipped).toBeUndefined()
    // Its objects are newer than every manifest that parses: an upload in flight, as far as GC can tell.
    expect(gc.pendingObjects).toBe(s2.objects.length)
    expect(gc.deletedObjects).toEqual([])
    expect(await dataObjects(f)).toEqual(before)
  })
})

describe('compact points', () => {
  it('follow the documented policy', () => {
    const base = { forceFull: false, hasParent: true, stateBytes: 1000, newBytes: 100, maxAmplification: 2, maxChainLength: 4 }
    const ref = (snapshot: number, size = 100): { key: string; size: number } => ({ key: `data/0000000000-${String(snapshot).padStart(12, '0')}-abcd1234-0.tar`, size })
    expect(planCompaction({ ...base, referenced: [ref(1, 900)] })).toMatchObject({ full: false, chainLength: 2, amplification: 1 })
    expect(planCompaction({ ...base, hasParent: false, referenced: [] })).toMatchObject({ full: true, reason: 'first' })
    expect(planCompaction({ ...base, forceFull: true, referenced: [ref(1)] })).toMatchObject({ full: true, reason: 'requested' })
    expect(planCompaction({ ...base, referenced: [ref(1, 1500), ref(2, 500)] })).toMatchObject({ full: true, reason: 'amplification', amplification: 2.1 })
    expect(planCompaction({ ...base, referenced: [ref(1), ref(2), ref(3), ref(3), ref(4)] })).toMatchObject({ full: true, reason: 'chain-length', chainLength: 5 })
  })

  it('a long chain or a high amplification makes the next snapshot a full one', async () => {
    const chained = await setup({ maxChainLength: 2, gcAfterSnapshot: false })
    const reasons: Array<string | undefined> = []
    for (let i = 0; i < 4; i++) {
      await chained.write(i, i + 1, 2 + i)
      const r = await chained.snapshotter.takeSnapshot()
      reasons.push(r.full ? r.fullReason : undefined)
    }
    expect(reasons[0]).toBe('first')
    expect(reasons).toContain('chain-length')

    const amplified = await setup({ maxAmplification: 1, gcAfterSnapshot: false })
    await amplified.snapshotter.takeSnapshot()
    await amplified.write(0, 10, 9)
    expect(await amplified.snapshotter.takeSnapshot()).toMatchObject({ full: true, fullReason: 'amplification' })
  })
})
