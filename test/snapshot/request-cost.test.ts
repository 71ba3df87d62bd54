// What a snapshot costs in requests (issue 13), counted through a wrapper
// around the real store, and that the snapshotter's reduced listing stays
// safe: another owner's manifest, a deleted object and a GC by another
// process (the CLI's) are noticed where they matter, and a restore never
// gets an unrestorable snapshot.
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { S3SnapshotStore } from '../../connectors/s3/index.js'
import { CountingStore, diffCounts, getClass, putClass } from '../../bench/_counting-store.js'
import type { PartitionStore} from '../../src/index.js';
import { acquireClaim, FsSnapshotStore, openFileLog, PartitionProcessor, restoreSnapshot, Snapshotter, valueState, type SnapshotStore, type SnapshotStoreCapabilities } from '../../src/index.js'
import { listManifests, readValidManifests } from '../../src/snapshot/catalog.js'
import { acquireAsAssignee } from '../helpers/acquire-assigned.js'
import { collectGarbage } from '../../src/snapshot/gc.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { useTestBucket } from '../helpers/s3-bucket.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { levelDigest, openKvStore, range, storeDigest, writeKeys } from './helpers.js'

const bucket = useTestBucket('tm-cost')
const cleanups: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn()
})

interface Owner {
  dfs: CountingStore
  store: PartitionStore
  snapshotter: Snapshotter
  write(version: number): Promise<void>
}

/** An owner as the processor wires one: a claim, and a Snapshotter that checks it before each manifest. */
async function owner(kind: 'fs' | 's3', dir: string, options: { gcEverySnapshots?: number; graceMs?: number; root?: string; prefix?: string } = {}): Promise<Owner> {
  const inner: SnapshotStore = kind === 'fs'
    ? new FsSnapshotStore({ root: options.root ?? join(dir, 'dfs') })
    : new S3SnapshotStore(bucket.storeOptions(options.prefix ?? randomName('p')))
  const dfs = new CountingStore(inner)
  const claim = await acquireClaim({ store: dfs, job: 'job', partition: 0, takeover: 'force' })
  const store = await openKvStore(join(dir, 'store'))
  const snapshotter = new Snapshotter({
    snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0, epoch: claim.epoch,
    graceMs: options.graceMs ?? 0, gcEverySnapshots: options.gcEverySnapshots ?? 1000,
    beforeCommit: () => claim.check(),
  })
  let offset = 0n
  const o: Owner = {
    dfs, store, snapshotter,
    async write(version) {
      offset = (await writeKeys(store, range(version * 7, version * 7 + 40), version, offset, 1000)) + 1n
    },
  }
  cleanups.push(async () => {
    await snapshotter.close()
    await store.close()
    await dfs.close()
  })
  return o
}

describe.each(['fs', 's3'] as const)('request cost on %s', (kind) => {
  it('a steady-state snapshot costs 2 PUT-class (data object + manifest), 1 HEAD (the claim) and no LIST; GC runs on its cadence', async () => {
    const o = await owner(kind, tempDir('tidemark-cost-'), { gcEverySnapshots: 4 })
    await o.write(1)
    const first = await o.snapshotter.takeSnapshot()
    expect(first.gc).toBeDefined() // the first snapshot of a Snapshotter collects
    const per = []
    for (let v = 2; v < 10; v++) {
      await o.write(v)
      const before = o.dfs.snapshot()
      const result = await o.snapshotter.takeSnapshot()
      per.push({ counts: diffCounts(o.dfs.snapshot(), before), gc: result.gc !== undefined })
    }
    const steady = per.filter((p) => !p.gc)
    const collected = per.filter((p) => p.gc)
    expect(collected).toHaveLength(2) // snapshots 5 and 9: every 4th after the first
    for (const { counts } of steady) {
      expect(counts).toEqual({ put: 2, get: 0, head: 1, list: 0, delete: 0 })
      expect(putClass(counts)).toBeLessThanOrEqual(2)
      expect(getClass(counts)).toBeLessThanOrEqual(1)
    }
    // A GC run adds its two listings (manifests, data) and at most a batched delete.
    for (const { counts } of collected) expect(counts.list).toBe(2)
    const digest = await storeDigest(o.store)
    const target = join(tempDir('tidemark-cost-restore-'), 'r')
    const restored = await restoreSnapshot({ snapshotStore: o.dfs.inner, job: 'job', partition: 0, target })
    expect(restored.snapshot?.sequence).toBe(8)
    expect(await levelDigest(target)).toEqual(digest)
  })
})

describe('the reduced listing is still safe', () => {
  it('a manifest written behind the snapshotter\'s back by another owner is noticed at the ownership check: no manifest, TIDEMARK_OWNERSHIP_LOST', async () => {
    const dir = tempDir('tidemark-cost-owner-')
    const a = await owner('fs', join(dir, 'a'), { root: join(dir, 'dfs') })
    await a.write(1)
    await a.snapshotter.takeSnapshot()
    await a.write(2)
    await a.snapshotter.takeSnapshot()
    // B takes the partition over (force) and commits a snapshot of its own.
    const b = await owner('fs', join(dir, 'b'), { root: join(dir, 'dfs') })
    await b.write(5)
    const theirs = await b.snapshotter.takeSnapshot()
    await a.write(3)
    const before = a.dfs.snapshot()
    await expect(a.snapshotter.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_OWNERSHIP_LOST' })
    expect(diffCounts(a.dfs.snapshot(), before).list).toBe(0)
    const layout = new SnapshotLayout('job', 0)
    const keys: string[] = []
    for await (const info of a.dfs.inner.list(layout.manifestPrefix)) keys.push(info.key)
    expect(keys.filter((k) => k.startsWith(`${layout.manifestPrefix}${String(theirs.epoch - 1).padStart(10, '0')}`))).toHaveLength(2)
    const target = join(dir, 'restored')
    const restored = await restoreSnapshot({ snapshotStore: a.dfs.inner, job: 'job', partition: 0, target })
    expect(restored.snapshot?.id).toBe(theirs.id)
    expect(await levelDigest(target)).toEqual(await storeDigest(b.store))
  })

  it('a data object deleted behind its back: the restore skips what references it, and the next full listing (a GC run) makes the next snapshot restorable', async () => {
    const dir = tempDir('tidemark-cost-deleted-')
    const a = await owner('fs', dir)
    await a.write(1)
    await a.snapshotter.takeSnapshot()
    await a.write(2)
    const s1 = await a.snapshotter.takeSnapshot()
    const s1Digest = await storeDigest(a.store)
    await a.write(3)
    const s2 = await a.snapshotter.takeSnapshot()
    // Outside every GC rule: an operator, a lifecycle rule.
    await a.dfs.inner.deleteMany(s2.objects)
    await a.write(4)
    const s3 = await a.snapshotter.takeSnapshot()
    const s3Digest = await storeDigest(a.store)
    // Not yet noticed (no listing since): s3 may reuse files of the deleted object.
    const s3Broken = s3.files.some((f) => s2.objects.includes(`job/0/${f.object}`))

    // Whatever references the object is skipped: the newest snapshot a restore gets is whole.
    const target = join(dir, 'restored')
    const restored = await restoreSnapshot({ snapshotStore: a.dfs.inner, job: 'job', partition: 0, target })
    expect(restored.snapshot?.id).toBe(s3Broken ? s1.id : s3.id)
    if (s3Broken) expect(restored.skipped.map((s) => [s.id, s.reason])).toEqual([[s3.id, 'object-missing'], [s2.id, 'object-missing']])
    expect(await levelDigest(target)).toEqual(s3Broken ? s1Digest : s3Digest)

    // The next full listing finds it (GC reports the snapshots that lack it)...
    const gc = await a.snapshotter.gc()
    expect(gc.unverified.map((u) => u.id)).toContain(s2.id)
    expect(gc.retained).toContain(s1.id)
    // ... and the snapshot after it uploads those files again.
    await a.write(5)
    const s4 = await a.snapshotter.takeSnapshot()
    const digest = await storeDigest(a.store)
    const again = join(dir, 'restored-again')
    const latest = await restoreSnapshot({ snapshotStore: a.dfs.inner, job: 'job', partition: 0, target: again })
    expect(latest.snapshot?.id).toBe(s4.id)
    expect(await levelDigest(again)).toEqual(digest)
  })

  it('a GC by another process (what `tidemark gc` runs: retain 1, grace 0), before and during an upload, never breaks the next snapshot', async () => {
    const dir = tempDir('tidemark-cost-cli-gc-')
    const a = await owner('fs', dir)
    const layout = new SnapshotLayout('job', 0)
    const cliGc = (): Promise<unknown> => collectGarbage(a.dfs.inner, layout, { retain: 1, graceMs: 0, now: Date.now(), protect: new Set(), cache: new Map() })
    for (let v = 1; v <= 3; v++) {
      await a.write(v)
      await a.snapshotter.takeSnapshot()
    }
    await cliGc()
    await a.write(4)
    const s3 = await a.snapshotter.takeSnapshot()
    // During the next upload: between its data object and its manifest.
    const put = a.dfs.inner.put.bind(a.dfs.inner)
    let ran = false
    a.dfs.inner.put = async (key, body, options) => {
      if (key.startsWith(layout.manifestPrefix) && !ran) {
        ran = true
        await cliGc()
      }
      return put(key, body, options)
    }
    await a.write(5)
    const s4 = await a.snapshotter.takeSnapshot()
    a.dfs.inner.put = put
    expect(ran).toBe(true)
    expect(s4.sequence).toBe(s3.sequence + 1)
    const digest = await storeDigest(a.store)
    const target = join(dir, 'restored')
    const restored = await restoreSnapshot({ snapshotStore: a.dfs.inner, job: 'job', partition: 0, target })
    expect(restored.snapshot?.id).toBe(s4.id)
    expect(restored.skipped).toEqual([])
    expect(await levelDigest(target)).toEqual(digest)
  })
})

describe('a start that hands its listing on', () => {
  it('a Snapshotter given the manifests its owner listed at start lists nothing for its first snapshot (the objects it reuses cost a HEAD each)', async () => {
    const dir = tempDir('tidemark-cost-known-')
    const a = await owner('fs', join(dir, 'a'), { root: join(dir, 'dfs') })
    for (let v = 1; v <= 3; v++) {
      await a.write(v)
      await a.snapshotter.takeSnapshot()
    }
    await a.snapshotter.close()
    // The next owner, as a processor starts: one listing, the manifests read, the claim.
    const dfs = new CountingStore(new FsSnapshotStore({ root: join(dir, 'dfs') }))
    const layout = new SnapshotLayout('job', 0)
    const refs = await listManifests(dfs, layout)
    const { valid } = await readValidManifests(dfs, layout, refs)
    const claim = await acquireClaim({ store: dfs, job: 'job', partition: 0, takeover: 'force', minEpoch: valid[0]!.ref.epoch })
    const before = dfs.snapshot()
    const snapshotter = new Snapshotter({
      snapshotStore: dfs, partitionStore: a.store, job: 'job', partition: 0, epoch: claim.epoch, beforeCommit: () => claim.check(), knownManifests: { refs, valid },
    })
    cleanups.push(() => snapshotter.close())
    await a.write(4)
    const first = await snapshotter.takeSnapshot()
    const counts = diffCounts(dfs.snapshot(), before)
    expect(first.gc).toBeUndefined()
    expect(counts.list).toBe(0)
    expect(counts.put).toBe(2)
    expect(counts.head).toBe(1 + valid[0]!.manifest.objects.length)
    const digest = await storeDigest(a.store)
    const target = join(dir, 'restored')
    const restored = await restoreSnapshot({ snapshotStore: dfs.inner, job: 'job', partition: 0, target })
    expect(restored.snapshot?.id).toBe(first.id)
    expect(await levelDigest(target)).toEqual(digest)
  })
})

describe.each(['fs', 's3'] as const)('what a start costs on %s (issue 13: at most one LIST)', (kind) => {
  const totals = valueState<number>('totals')
  /** A processor as users wire one (claim, defaults), snapshots only when asked, over a counting store. */
  async function setup(dir: string): Promise<{ dfs: CountingStore; processor: (path: string) => PartitionProcessor<{ key: string }>; append: (n: number) => Promise<void> }> {
    const inner: SnapshotStore = kind === 'fs' ? new FsSnapshotStore({ root: join(dir, 'dfs') }) : new S3SnapshotStore(bucket.storeOptions(randomName('p')))
    const dfs = new CountingStore(inner)
    const log = await openFileLog(join(dir, 'log'), { sync: false })
    cleanups.push(async () => {
      await log.close()
      await dfs.close()
    })
    let next = 0
    return {
      dfs,
      processor: (path) => {
        const p = new PartitionProcessor<{ key: string }>({
          job: 'job', log, topic: 't', partition: 0, path, states: [totals],
          handler: async (tx, e) => { tx.value(totals).put(e.key, ((await tx.value(totals).get(e.key)) ?? 0) + 1) },
          snapshots: { store: dfs, schedule: { intervalMs: 0, everyBytes: 0 } },
        })
        cleanups.push(() => p.close())
        return p
      },
      async append(n) {
        for (let i = 0; i < n; i++, next++) await log.append(Buffer.from(JSON.stringify({ key: `k${(next * 7919) % 300}` })))
      },
    }
  }

  it('a start on an intact local store lists once and reads each manifest once; its first snapshot lists nothing', async () => {
    const dir = tempDir('tidemark-cost-start-')
    const { dfs, processor, append } = await setup(dir)
    const a = processor(join(dir, 'a'))
    await a.start()
    for (let i = 0; i < 3; i++) {
      await append(100)
      await a.catchUp()
      await a.snapshot()
    }
    await a.close()
    const manifests = await listManifests(dfs.inner, new SnapshotLayout('job', 0))
    const before = dfs.snapshot()
    const b = processor(join(dir, 'a'))
    const started = await b.start()
    const counts = diffCounts(dfs.snapshot(), before)
    expect(started.source).toBe('local')
    // One LIST (the manifests), one GET per manifest, the claim: a HEAD and a GET to read it, a PUT to take it.
    expect(counts).toEqual({ put: 1, get: manifests.length + 1, head: 1, list: 1, delete: 0 })
    await append(100)
    await b.catchUp()
    const snap = dfs.snapshot()
    const first = await b.snapshot()
    expect(first?.gc).toBeUndefined()
    expect(diffCounts(dfs.snapshot(), snap).list).toBe(0)
  })

  it('a start by restore of a chain lists once, reads each manifest once, and restores the newest snapshot', async () => {
    const dir = tempDir('tidemark-cost-chain-')
    const { dfs, processor, append } = await setup(dir)
    const a = processor(join(dir, 'a'))
    await a.start()
    let last
    for (let i = 0; i < 6; i++) {
      await append(100)
      await a.catchUp()
      last = await a.snapshot()
    }
    const digest = await storeDigest(a.store)
    await a.close()
    const manifests = await listManifests(dfs.inner, new SnapshotLayout('job', 0))
    const before = dfs.snapshot()
    const b = processor(join(dir, 'b'))
    const started = await b.start()
    const counts = diffCounts(dfs.snapshot(), before)
    expect(started.source).toBe('snapshot')
    expect(started.snapshot).toBe(last!.id)
    // One LIST; the manifests once each; the claim (HEAD, GET, PUT); per data object of the snapshot a HEAD (its size) and one ranged GET (small objects).
    const objects = new Set(last!.files.map((f) => f.object)).size
    expect(counts).toEqual({ put: 1, get: manifests.length + 1 + objects, head: 1 + objects, list: 1, delete: 0 })
    expect(await storeDigest(b.store)).toEqual(digest)
  })
})

describe('restoreSnapshot with a listing handed on (knownManifests)', () => {
  async function chain(dir: string): Promise<{ o: Owner; refs: Awaited<ReturnType<typeof listManifests>>; layout: SnapshotLayout }> {
    const o = await owner('fs', dir)
    for (let v = 1; v <= 3; v++) {
      await o.write(v)
      await o.snapshotter.takeSnapshot()
    }
    const layout = new SnapshotLayout('job', 0)
    return { o, refs: await listManifests(o.dfs.inner, layout), layout }
  }

  it('lists nothing and reads no manifest it was given; restores what a listing would', async () => {
    const dir = tempDir('tidemark-cost-known-restore-')
    const { o, refs, layout } = await chain(dir)
    const { valid } = await readValidManifests(o.dfs.inner, layout, refs)
    const before = o.dfs.snapshot()
    const target = join(dir, 'r')
    const restored = await restoreSnapshot({ snapshotStore: o.dfs, job: 'job', partition: 0, target, knownManifests: { refs: [...refs].reverse(), valid } })
    const counts = diffCounts(o.dfs.snapshot(), before)
    // Only the data: per object of the newest snapshot a HEAD (its size) and one ranged GET (small objects, one range each).
    const newest = valid[0]!.manifest
    const objects = new Set(newest.files.map((f) => f.object)).size
    expect(counts).toEqual({ put: 0, get: objects, head: objects, list: 0, delete: 0 })
    expect(restored.snapshot?.id).toBe(newest.id)
    expect(await levelDigest(target)).toEqual(await storeDigest(o.store))
  })

  it('still reads and verifies a listed manifest it was not given, and skips it when it does not verify', async () => {
    const dir = tempDir('tidemark-cost-known-junk-')
    const { o, layout } = await chain(dir)
    const junkKey = layout.manifestKey(9, 0)
    await o.dfs.inner.put(junkKey, Buffer.from('not a manifest'))
    const refs = await listManifests(o.dfs.inner, layout)
    const { valid, invalid } = await readValidManifests(o.dfs.inner, layout, refs)
    expect(invalid.map((m) => m.ref.key)).toEqual([junkKey])
    const before = o.dfs.snapshot()
    const restored = await restoreSnapshot({ snapshotStore: o.dfs, job: 'job', partition: 0, target: join(dir, 'r'), knownManifests: { refs, valid } })
    expect(diffCounts(o.dfs.snapshot(), before).list).toBe(0)
    expect(restored.skipped.map((s) => [s.key, s.reason])).toEqual([[junkKey, 'manifest-unreadable']])
    expect(restored.snapshot?.id).toBe(valid[0]!.manifest.id)
  })

  it('refuses a listing of another partition, or a manifest that is not its key\'s', async () => {
    const dir = tempDir('tidemark-cost-known-wrong-')
    const { o, refs, layout } = await chain(dir)
    const { valid } = await readValidManifests(o.dfs.inner, layout, refs)
    const base = { snapshotStore: o.dfs, job: 'job', target: join(dir, 'r') }
    await expect(restoreSnapshot({ ...base, partition: 1, knownManifests: { refs, valid } })).rejects.toThrow(RangeError)
    const swapped = [{ ref: valid[0]!.ref, manifest: valid[1]!.manifest }]
    await expect(restoreSnapshot({ ...base, partition: 0, knownManifests: { refs, valid: swapped } })).rejects.toThrow(/knownManifests\.valid/)
    await expect(restoreSnapshot({ ...base, partition: 0, knownManifests: { refs: [], valid } })).rejects.toThrow(/knownManifests\.valid/)
    await expect(restoreSnapshot({ ...base, partition: 0, knownManifests: [] as never })).rejects.toThrow(TypeError)
  })
})

describe('a consumer-group task hands its listing on only when it is current', () => {
  it('known when the claim was taken at once (released by the previous owner): the restore then lists nothing', async () => {
    const dir = tempDir('tidemark-cost-group-')
    const dfs = new CountingStore(new FsSnapshotStore({ root: join(dir, 'dfs') }))
    cleanups.push(() => dfs.close())
    const previous = await acquireClaim({ store: dfs, job: 'job', partition: '0', leaseMs: null })
    const store = await openKvStore(join(dir, 'store'))
    const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: '0', epoch: previous.epoch, beforeCommit: () => previous.check() })
    cleanups.push(async () => {
      await snapshotter.close()
      await store.close()
    })
    await writeKeys(store, range(0, 40), 1, 0n, 1000)
    const handoff = await snapshotter.takeSnapshot()
    await previous.release()

    const before = dfs.snapshot()
    const ownership = await acquireAsAssignee({ store: dfs, job: 'job', partition: '0', waitMs: 1000 })
    expect(ownership.known?.valid.map((v) => v.manifest.id)).toEqual([handoff.id])
    const restored = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: '0', target: join(dir, 'r'), knownManifests: ownership.known! })
    expect(restored.snapshot?.id).toBe(handoff.id)
    expect(diffCounts(dfs.snapshot(), before).list).toBe(1)
    await ownership.claim.release()
  })

  it('absent when the claim was taken only after waiting for the previous owner (its hand-off snapshot may be newer), or by force', async () => {
    const dir = tempDir('tidemark-cost-group-wait-')
    const dfs = new CountingStore(new FsSnapshotStore({ root: join(dir, 'dfs') }))
    cleanups.push(() => dfs.close())
    const previous = await acquireClaim({ store: dfs, job: 'job', partition: '0', leaseMs: null })
    // Released right after the next owner's first attempt read the claim as held: it waits, and takes it at the second.
    const claimKey = new SnapshotLayout('job', '0').claimKey
    const get = dfs.get.bind(dfs)
    let released: Promise<unknown> | undefined
    dfs.get = async (key, options) => {
      const body = await get(key, options)
      if (released === undefined && key === claimKey) released = previous.release()
      return body
    }
    const afterWait = await acquireAsAssignee({ store: dfs, job: 'job', partition: '0', waitMs: 10_000 })
    dfs.get = get
    expect(await released).toBe(true)
    expect(afterWait.known).toBeUndefined()
    // By force (waitMs 0): whoever held it may have just committed.
    const forced = await acquireAsAssignee({ store: dfs, job: 'job', partition: '0', waitMs: 0 })
    expect(forced.claim.epoch).toBeGreaterThan(afterWait.claim.epoch)
    expect(forced.known).toBeUndefined()
  })
})

/** Restores the partition into a fresh directory under `dir` and checks that it is `id`, with `digest`'s contents. */
async function expectRestore(store: SnapshotStore, dir: string, id: string, digest: Awaited<ReturnType<typeof storeDigest>>): Promise<void> {
  const target = join(dir, randomName('restored'))
  const restored = await restoreSnapshot({ snapshotStore: store, job: 'job', partition: 0, target })
  expect(restored.snapshot?.id).toBe(id)
  expect(await levelDigest(target)).toEqual(digest)
}

/** A Snapshotter used directly, as a stream engine would: no claim, no beforeCommit, default GC cadence; writerCheck 'create-only' unless said. */
async function direct(inner: SnapshotStore, dir: string, options: { epoch?: number; gcEverySnapshots?: number; writerCheck?: 'listing' | 'create-only' } = {}): Promise<Owner> {
  const dfs = inner instanceof CountingStore ? inner : new CountingStore(inner)
  const store = await openKvStore(join(dir, 'store'))
  const snapshotter = new Snapshotter({
    snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0, epoch: options.epoch ?? 0, writerCheck: options.writerCheck ?? 'create-only',
    ...(options.gcEverySnapshots === undefined ? {} : { gcEverySnapshots: options.gcEverySnapshots }),
  })
  let offset = 0n
  cleanups.push(async () => {
    await snapshotter.close()
    await store.close()
  })
  return {
    dfs, store, snapshotter,
    async write(version) {
      // 5,000 keys of a 20,000-key state each time.
      const from = (version * 5000) % 20_000
      offset = (await writeKeys(store, range(from, from + 5000), version, offset, 1000)) + 1n
    },
  }
}

/** A store that refuses conditional puts (an S3 endpoint without If-None-Match: S3SnapshotStore's conditionalPut: false). */
class UnconditionalStore extends CountingStore {
  override get capabilities(): SnapshotStoreCapabilities {
    return { conditionalPut: false, compareAndSwap: false }
  }
}

describe.each(['fs', 's3'] as const)('a Snapshotter used directly, with no claim, writerCheck \'create-only\', on %s', (kind) => {
  it('costs in steady state what it costs inside a processor: 2 PUTs (data object, create-only manifest), 1 HEAD (the new object), no LIST', async () => {
    const dir = tempDir('tidemark-cost-direct-')
    const inner: SnapshotStore = kind === 'fs' ? new FsSnapshotStore({ root: join(dir, 'dfs') }) : new S3SnapshotStore(bucket.storeOptions(randomName('p')))
    const o = await direct(inner, dir)
    cleanups.push(() => o.dfs.close())
    const steady = []
    let gcRuns = 0
    for (let v = 0; v < 20; v++) {
      await o.write(v)
      const before = o.dfs.snapshot()
      const result = await o.snapshotter.takeSnapshot()
      if (result.gc !== undefined) gcRuns++
      else if (v > 0) steady.push(diffCounts(o.dfs.snapshot(), before))
    }
    // The default cadence: after the first snapshot and after the 11th.
    expect(gcRuns).toBe(2)
    expect(steady).toHaveLength(18)
    for (const counts of steady) {
      expect(counts).toEqual({ put: 2, get: 0, head: 1, list: 0, delete: 0 })
      expect(putClass(counts)).toBeLessThanOrEqual(2)
      expect(getClass(counts)).toBeLessThanOrEqual(1)
    }
    const digest = await storeDigest(o.store)
    const target = join(tempDir('tidemark-cost-direct-restore-'), 'r')
    const restored = await restoreSnapshot({ snapshotStore: o.dfs.inner, job: 'job', partition: 0, target })
    expect(restored.snapshot?.sequence).toBe(19)
    expect(restored.skipped).toEqual([])
    expect(await levelDigest(target)).toEqual(digest)
  })
})

describe('a Snapshotter used directly with writerCheck \'create-only\' still finds another writer', () => {
  it('of its own epoch: its create-only manifest collides with the one it did not list, TIDEMARK_SNAPSHOT_FENCED, and a restore gets the other writer\'s', async () => {
    const dir = tempDir('tidemark-cost-direct-twin-')
    const root = join(dir, 'dfs')
    const a = await direct(new FsSnapshotStore({ root }), join(dir, 'a'))
    for (let v = 0; v < 3; v++) {
      await a.write(v)
      await a.snapshotter.takeSnapshot()
    }
    // A second writer of the same epoch lists, and commits the sequence a numbers next.
    const b = await direct(new FsSnapshotStore({ root }), join(dir, 'b'))
    await b.write(7)
    const theirs = await b.snapshotter.takeSnapshot()
    await a.write(3)
    const before = a.dfs.snapshot()
    await expect(a.snapshotter.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_FENCED' })
    expect(diffCounts(a.dfs.snapshot(), before).list).toBe(0)
    await expectRestore(a.dfs.inner, dir, theirs.id, await storeDigest(b.store))
    // The failure drops the view: the next snapshot lists and numbers after theirs.
    const next = await a.snapshotter.takeSnapshot()
    expect(next.sequence).toBe(theirs.sequence + 1)
  })

  it('of a newer epoch: what it commits meanwhile is never what a restore picks, and the next full listing (its GC run) fences it', async () => {
    const dir = tempDir('tidemark-cost-direct-newer-')
    const root = join(dir, 'dfs')
    const a = await direct(new FsSnapshotStore({ root }), join(dir, 'a'), { gcEverySnapshots: 3 })
    for (let v = 0; v < 2; v++) {
      await a.write(v)
      await a.snapshotter.takeSnapshot()
    }
    const b = await direct(new FsSnapshotStore({ root }), join(dir, 'b'), { epoch: 1 })
    await b.write(7)
    const theirs = await b.snapshotter.takeSnapshot()
    const bDigest = await storeDigest(b.store)
    // Unseen until a listing: a's snapshots land below b's in (epoch, sequence) order.
    let fenced: unknown
    const committed = []
    for (let v = 2; v < 8 && fenced === undefined; v++) {
      await a.write(v)
      try {
        committed.push(await a.snapshotter.takeSnapshot())
      } catch (err) {
        fenced = err
      }
      await expectRestore(a.dfs.inner, dir, theirs.id, bDigest)
    }
    expect(fenced).toMatchObject({ code: 'TIDEMARK_SNAPSHOT_FENCED' })
    // At most gcEverySnapshots snapshots after: the GC after the first, then every 3rd.
    expect(committed.length).toBeLessThanOrEqual(3)
    expect(committed.some((c) => c.gc !== undefined)).toBe(true)
  })

  it('a key planted where it numbers next is no writer: that snapshot fails retriably (no fencing), the next lists and numbers past it', async () => {
    const dir = tempDir('tidemark-cost-direct-junk-')
    const o = await direct(new FsSnapshotStore({ root: join(dir, 'dfs') }), dir)
    await o.write(0)
    const first = await o.snapshotter.takeSnapshot()
    const layout = new SnapshotLayout('job', 0)
    await o.dfs.inner.put(layout.manifestKey(0, first.sequence + 1), Buffer.from('not a manifest'))
    await o.write(1)
    await expect(o.snapshotter.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', retriable: true })
    const next = await o.snapshotter.takeSnapshot()
    expect(next.sequence).toBe(first.sequence + 2)
    await expectRestore(o.dfs.inner, dir, next.id, await storeDigest(o.store))
  })

  it('where the store refuses a create-only manifest of its size (S3 above partSize), it lists before the plain put and never overwrites a twin\'s manifest', async () => {
    const dir = tempDir('tidemark-cost-direct-bounded-')
    const root = join(dir, 'dfs')
    const a = await direct(new FsSnapshotStore({ root }), join(dir, 'a'))
    await a.write(0)
    await a.snapshotter.takeSnapshot()
    const b = await direct(new FsSnapshotStore({ root }), join(dir, 'b'))
    await b.write(7)
    const theirs = await b.snapshotter.takeSnapshot()
    // Fault injection on one call: what S3SnapshotStore does with a create-only body above partSize.
    const put = a.dfs.inner.put.bind(a.dfs.inner)
    a.dfs.inner.put = (key, body, options) => {
      if (options?.ifNoneMatch === true && key.includes('/manifests/')) return Promise.reject(new RangeError('injected: create-only body too large'))
      return put(key, body, options)
    }
    await a.write(1)
    await expect(a.snapshotter.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_FENCED', details: { key: theirs.key } })
    a.dfs.inner.put = put
    await expectRestore(a.dfs.inner, dir, theirs.id, await storeDigest(b.store))
  })

  it('on a store without conditional puts it lists the manifests for every snapshot, as with writerCheck \'listing\' (the default), and HEADs the objects it reuses', async () => {
    const dir = tempDir('tidemark-cost-direct-unconditional-')
    const o = await direct(new UnconditionalStore(new FsSnapshotStore({ root: join(dir, 'dfs') })), dir)
    cleanups.push(() => o.dfs.close())
    await o.write(0)
    await o.snapshotter.takeSnapshot()
    for (let v = 1; v < 4; v++) {
      await o.write(v)
      const before = o.dfs.snapshot()
      const result = await o.snapshotter.takeSnapshot()
      const counts = diffCounts(o.dfs.snapshot(), before)
      expect(result.gc).toBeUndefined()
      // Before the plan and again before the manifest.
      expect(counts.list).toBe(2)
      expect(counts.put).toBe(2)
      expect(counts.head).toBeGreaterThanOrEqual(1)
    }
  })
})
