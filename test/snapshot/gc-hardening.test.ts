import { mkdir, readdir, symlink, utimes, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { FsSnapshotStore, restoreSnapshot, type SnapshotStore } from '../../src/index.js'
import { collectGarbage, type GcOptions, type GcResult } from '../../src/snapshot/gc.js'
import { encodeManifest, MAX_MANIFEST_BYTES } from '../../src/snapshot/manifest.js'
import { tempDir } from '../helpers/tmp.js'
import { dataKeys, layout, manifestKeys, manifestOf, putObject, putSnapshot } from './catalog-helpers.js'
import { fixture, levelDigest, storeDigest, type Fixture } from './helpers.js'

const fixtures: Fixture[] = []
afterEach(async () => {
  await Promise.all(fixtures.splice(0).map((f) => f.close()))
})

/** GC the way the CLI runs it: another process, nothing cached, nothing protected. */
function gc(store: SnapshotStore, options: Partial<GcOptions> = {}): Promise<GcResult> {
  return collectGarbage(store, layout, { retain: 1, graceMs: 0, now: Date.now(), protect: new Set(), cache: new Map(), ...options })
}

function fsStore(): FsSnapshotStore {
  return new FsSnapshotStore({ root: join(tempDir('tidemark-gc-'), 'dfs') })
}

describe('retention counts snapshots that verify', () => {
  it('a broken newest manifest does not push the last restorable snapshot out (end to end)', async () => {
    const f = await fixture(tempDir('tidemark-gc-'), 3000, { retain: 1, gcAfterSnapshot: false, graceMs: 0 })
    fixtures.push(f)
    const good = await f.snapshotter.takeSnapshot({ full: true })
    const digest = await storeDigest(f.store)
    await f.write(0, 100, 2)
    const broken = await f.snapshotter.takeSnapshot({ full: true })
    // The newest manifest parses, but one of its objects is gone.
    await f.dfs.deleteMany([broken.objects[0]!])

    const result = await gc(f.dfs)
    expect(result.retained).toEqual([good.id])
    expect(result.unverified).toEqual([expect.objectContaining({ id: broken.id, reason: 'object-missing' })])
    expect(result.deletedManifests).toEqual([])
    expect(result.deletedObjects).toEqual([])
    for (const key of good.objects) expect(await f.dfs.head(key)).toBeDefined()

    const target = join(f.dir, 'restored')
    const restored = await restoreSnapshot({ snapshotStore: f.dfs, job: 'job', partition: 0, target })
    expect(restored.snapshot?.id).toBe(good.id)
    expect(await levelDigest(target)).toEqual(digest)
  })

  it('a short object makes its snapshot unverified; older snapshots go once `retain` newer ones verify', async () => {
    const store = fsStore()
    const s1 = await putSnapshot(store, 1, 1)
    const s2 = await putSnapshot(store, 1, 2)
    const s3 = await putSnapshot(store, 1, 3)
    const s4 = await putSnapshot(store, 1, 4)
    await store.put(layout.dataKey(s4.objects[0]!.key), Buffer.alloc(100))

    const result = await gc(store, { retain: 2 })
    expect(result.retained).toEqual([s3.id, s2.id])
    expect(result.unverified).toEqual([expect.objectContaining({ id: s4.id, reason: 'object-truncated', message: expect.stringMatching(/has 100 bytes, its manifest says 2048/) })])
    expect(result.deletedManifests).toEqual([layout.manifestKey(1, 1)])
    expect(result.deletedObjects).toEqual([layout.dataKey(s1.objects[0]!.key)])
    // The unverified snapshot's objects stay: they are referenced by a kept manifest.
    expect(await dataKeys(store)).toEqual([s2, s3, s4].map((s) => layout.dataKey(s.objects[0]!.key)).sort())
  })

  it('keeps everything while no snapshot verifies', async () => {
    const store = fsStore()
    const s1 = await putSnapshot(store, 1, 1)
    const s2 = await putSnapshot(store, 1, 2)
    await store.deleteMany([s1, s2].map((s) => layout.dataKey(s.objects[0]!.key)))
    const result = await gc(store, { retain: 1 })
    expect(result.retained).toEqual([])
    expect(result.unverified.map((u) => u.id)).toEqual([s2.id, s1.id])
    expect(result.deletedManifests).toEqual([])
  })

  it('refuses a retain below 1', async () => {
    await expect(gc(fsStore(), { retain: 0 })).rejects.toThrow(RangeError)
  })
})

describe('junk manifests', () => {
  it('are reported and trusted with nothing: neither retention, nor the newest id, nor references', async () => {
    const store = fsStore()
    const s1 = await putSnapshot(store, 1, 1)
    const s2 = await putSnapshot(store, 1, 2)
    const s3 = await putSnapshot(store, 1, 3)
    const junkNewest = `${layout.manifestPrefix}9999999999-000000000000.json`
    const junkOldest = `${layout.manifestPrefix}0000000000-999999999999.json`
    await store.put(junkNewest, Buffer.from('{"objects":[{"key":"data/x.tar","size":1}]}'))
    await store.put(junkOldest, Buffer.from('junk'))
    const orphan = layout.dataKey(await putObject(store, 1, 2)) // a crashed rival of s2

    const result = await gc(store, { retain: 2 })
    expect(result.retained).toEqual([s3.id, s2.id])
    expect(result.unverified).toEqual([expect.objectContaining({ key: junkNewest, reason: 'manifest-unreadable' })])
    expect(result.deletedManifests).toEqual([layout.manifestKey(1, 1), junkOldest])
    expect(result.objectsSkipped).toBeUndefined()
    expect(result.deletedObjects.sort()).toEqual([layout.dataKey(s1.objects[0]!.key), orphan].sort())
    expect(await manifestKeys(store)).toEqual([layout.manifestKey(1, 2), layout.manifestKey(1, 3), junkNewest])
  })

  it('too large to be a manifest are refused from the listing, without a read', async () => {
    const store = fsStore()
    const s1 = await putSnapshot(store, 1, 1)
    await store.put(layout.manifestKey(1, 2), Buffer.alloc(MAX_MANIFEST_BYTES + 1, 0x20))
    let bytesRead = 0
    const get = store.get.bind(store)
    store.get = async (...args) => {
      const stream = await get(...args)
      stream.on('data', (chunk: Buffer) => { bytesRead += chunk.byteLength })
      return stream
    }
    const result = await gc(store)
    expect(result.retained).toEqual([s1.id])
    expect(result.unverified).toEqual([expect.objectContaining({ id: '0000000001-000000000002', message: expect.stringMatching(/more than a manifest may have/) })])
    expect(bytesRead).toBeLessThan(4096)
  })

  it('but a manifest of a newer format version stops every object deletion, since its references are unknown', async () => {
    const store = fsStore()
    const s1 = await putSnapshot(store, 1, 1)
    const s2 = await putSnapshot(store, 1, 2)
    const s3 = await putSnapshot(store, 1, 3)
    await store.put(layout.manifestKey(1, 3), Buffer.from(JSON.stringify({ ...s3, version: 2 })))
    const before = await dataKeys(store)
    const result = await gc(store)
    expect(result.retained).toEqual([s2.id])
    expect(result.unverified).toEqual([expect.objectContaining({ id: s3.id, message: expect.stringMatching(/version 2 is newer/) })])
    expect(result.deletedManifests).toEqual([layout.manifestKey(1, 1)])
    expect(result.objectsSkipped).toMatch(/format version 2, written by a newer Tidemark/)
    expect(await dataKeys(store)).toEqual(before)
    expect(s1.objects).toHaveLength(1)
  })
})

describe('uploads in flight', () => {
  it('objects of an id above the newest manifest survive a zero grace; they go once a newer manifest exists', async () => {
    const store = fsStore()
    const s1 = await putSnapshot(store, 1, 1)
    const inFlight = layout.dataKey(await putObject(store, 1, 2))
    const rival = layout.dataKey(await putObject(store, 1, 1)) // unreferenced, at the newest manifest's id: not in flight

    const first = await gc(store)
    expect(first.pendingObjects).toBe(1)
    expect(first.deletedObjects).toEqual([rival])
    expect(await dataKeys(store)).toEqual([layout.dataKey(s1.objects[0]!.key), inFlight].sort())

    // A newer snapshot commits without them (the upload crashed): now they are garbage.
    const s3 = await putSnapshot(store, 1, 3, [s1.objects[0]!])
    const second = await gc(store)
    expect(second.pendingObjects).toBe(0)
    expect(second.deletedObjects).toEqual([inFlight])
    expect(await dataKeys(store)).toEqual(s3.objects.map((o) => layout.dataKey(o.key)).sort())
  })

  it('a zero-grace GC from another process during an upload leaves the snapshot restorable (end to end)', async () => {
    const f = await fixture(tempDir('tidemark-gc-'), 3000, { gcAfterSnapshot: false })
    fixtures.push(f)
    await f.snapshotter.takeSnapshot({ full: true })
    await f.write(0, 500, 2)
    const digest = await storeDigest(f.store)
    // Between the upload of the data objects and the commit of the manifest.
    let during: GcResult | undefined
    const put = f.dfs.put.bind(f.dfs)
    f.dfs.put = async (key, body, options) => {
      if (key.startsWith(layout.manifestPrefix) && during === undefined) during = await gc(f.dfs, { retain: 1 })
      return put(key, body, options)
    }
    const taken = await f.snapshotter.takeSnapshot({ full: true })
    expect(during?.pendingObjects).toBe(taken.objects.length)
    expect(during?.deletedObjects).toEqual([])
    for (const key of taken.objects) expect(await f.dfs.head(key)).toBeDefined()

    const target = join(f.dir, 'restored')
    const restored = await restoreSnapshot({ snapshotStore: f.dfs, job: 'job', partition: 0, target })
    expect(restored.snapshot?.id).toBe(taken.id)
    expect(restored.skipped).toEqual([])
    expect(await levelDigest(target)).toEqual(digest)
  })
})

describe('GC on the file-system store', () => {
  it('sweeps temporary files of killed puts older than the store\'s grace, and keeps fresh ones', async () => {
    const root = join(tempDir('tidemark-gc-'), 'dfs')
    const store = new FsSnapshotStore({ root, temporaryFileGraceMs: 60_000 })
    await putSnapshot(store, 1, 1)
    const dataDir = join(root, 'job', '0', 'data')
    await writeFile(join(dataDir, '.tidemark-tmp-00000000000000aa'), 'killed')
    await writeFile(join(dataDir, '.tidemark-tmp-00000000000000bb'), 'being written')
    const old = new Date(Date.now() - 120_000)
    await utimes(join(dataDir, '.tidemark-tmp-00000000000000aa'), old, old)
    const result = await gc(store)
    expect(result.temporaryFilesRemoved).toBe(1)
    expect((await readdir(dataDir)).filter((n) => n.startsWith('.tidemark-tmp-'))).toEqual(['.tidemark-tmp-00000000000000bb'])
  })

  it('leaves the files of a linked data directory outside the root alone', async () => {
    const dir = tempDir('tidemark-gc-')
    const store = new FsSnapshotStore({ root: join(dir, 'dfs') })
    const s1 = manifestOf(1, 1, [{ key: 'data/0000000001-000000000001-abcd1234-0.tar', size: 2048 }])
    await store.put(layout.manifestKey(1, 1), encodeManifest(s1))
    const outside = join(dir, 'outside')
    await mkdir(outside)
    const names = ['0000000000-000000000000-abcd-0.tar', 'precious.txt', '.tidemark-tmp-00000000000000aa']
    for (const name of names) {
      await writeFile(join(outside, name), 'not the store\'s')
      await utimes(join(outside, name), new Date(0), new Date(0))
    }
    await symlink(outside, join(dir, 'dfs', 'job', '0', 'data'), 'dir')

    const result = await gc(store)
    expect(result.deletedObjects).toEqual([])
    expect(result.temporaryFilesRemoved).toBe(0)
    expect(result.unverified).toEqual([expect.objectContaining({ id: s1.id, reason: 'object-missing' })])
    await expect(store.deleteMany([`${layout.dataPrefix}precious.txt`])).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED' })
    expect((await readdir(outside)).sort()).toEqual([...names].sort())
  })
})
