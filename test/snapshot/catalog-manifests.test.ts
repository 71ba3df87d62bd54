import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { FsSnapshotStore } from '../../src/index.js'
import { listManifests, readManifest, readValidManifests } from '../../src/snapshot/catalog.js'
import { encodeManifest, MAX_MANIFEST_BYTES, MAX_MANIFEST_FILES, type SnapshotManifest } from '../../src/snapshot/manifest.js'
import { tempDir } from '../helpers/tmp.js'
import { layout, manifestOf, putSnapshot } from './catalog-helpers.js'

describe('readValidManifests', () => {
  it('trusts only manifests that parse and match their key, newest first, and reports the others', async () => {
    const store = new FsSnapshotStore({ root: tempDir('tidemark-catalog-') })
    const s1 = await putSnapshot(store, 1, 1)
    const s2 = await putSnapshot(store, 1, 2)
    // Junk under names that sort first and that claim the highest epoch or sequence.
    await store.put(layout.manifestPrefix + '9999999999-000000000000.json', Buffer.from('{"not":"a manifest"}'))
    await store.put(layout.manifestPrefix + '0000000000-999999999999.json', Buffer.from('garbage'))
    // A real manifest body under another snapshot's key.
    await store.put(layout.manifestKey(1, 3), encodeManifest(s1))
    const cache = new Map<string, SnapshotManifest>()

    const { valid, invalid } = await readValidManifests(store, layout, await listManifests(store, layout), { cache })

    expect(valid.map((v) => v.ref.id)).toEqual([s2.id, s1.id])
    expect(valid[0]!.manifest).toEqual(s2)
    expect(invalid.map((i) => i.ref.id)).toEqual(['9999999999-000000000000', '0000000001-000000000003', '0000000000-999999999999'])
    expect(invalid.every((i) => i.reason === 'manifest-unreadable')).toBe(true)
    expect(invalid[0]!.message).toMatch(/format is undefined/)
    expect(invalid[1]!.message).toMatch(/differ from the manifest's key/)
    expect(invalid[2]!.message).toMatch(/not JSON/)
    expect([...cache.keys()].sort()).toEqual([layout.manifestKey(1, 1), layout.manifestKey(1, 2)])
  })

  it('reads a cached manifest from the cache, not the store', async () => {
    const store = new FsSnapshotStore({ root: tempDir('tidemark-catalog-') })
    const s1 = await putSnapshot(store, 1, 1)
    const refs = await listManifests(store, layout)
    const cache = new Map([[refs[0]!.key, s1]])
    let gets = 0
    const get = store.get.bind(store)
    store.get = async (...args) => { gets++; return get(...args) }
    expect((await readValidManifests(store, layout, refs, { cache })).valid).toHaveLength(1)
    expect(gets).toBe(0)
  })

  it('passes errors of the store through', async () => {
    const store = new FsSnapshotStore({ root: tempDir('tidemark-catalog-') })
    await putSnapshot(store, 1, 1)
    const refs = await listManifests(store, layout)
    await store.close()
    await expect(readValidManifests(store, layout, refs)).rejects.toMatchObject({ code: 'TIDEMARK_DFS_CLOSED' })
  })
})

describe('oversized manifests', () => {
  it('are refused from their listed size without a read', async () => {
    const root = tempDir('tidemark-catalog-')
    const store = new FsSnapshotStore({ root })
    await store.put(layout.manifestKey(1, 1), Buffer.alloc(MAX_MANIFEST_BYTES + 1, 0x20))
    let gets = 0
    const get = store.get.bind(store)
    store.get = async (...args) => { gets++; return get(...args) }
    const [ref] = await listManifests(store, layout)
    await expect(readManifest(store, layout, ref!)).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_CORRUPT', details: { reason: 'manifest-unreadable' } })
    expect(gets).toBe(0)
  })

  it('are refused while streaming when the listing understated their size', async () => {
    const root = tempDir('tidemark-catalog-')
    const store = new FsSnapshotStore({ root })
    await store.put(layout.manifestKey(1, 1), Buffer.from('{}'))
    const [ref] = await listManifests(store, layout)
    // Replaced behind the listing's back by something four times the bound.
    await writeFile(join(root, ...ref!.key.split('/')), Buffer.alloc(4 * MAX_MANIFEST_BYTES, 0x20))
    let bytesRead = 0
    const get = store.get.bind(store)
    store.get = async (...args) => {
      const stream = await get(...args)
      stream.on('data', (chunk: Buffer) => { bytesRead += chunk.byteLength })
      return stream
    }
    await expect(readManifest(store, layout, ref!)).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_CORRUPT', details: { reason: 'manifest-unreadable' }, message: /larger than/ })
    expect(bytesRead).toBeLessThanOrEqual(MAX_MANIFEST_BYTES + 1024 * 1024)
  })

  it('are refused when they list more files than a manifest may hold', async () => {
    const store = new FsSnapshotStore({ root: tempDir('tidemark-catalog-') })
    const m = manifestOf(1, 1, [{ key: 'data/x.tar', size: 2048 }])
    const files = Array.from({ length: MAX_MANIFEST_FILES + 1 }, () => 0)
    await store.put(layout.manifestKey(1, 1), Buffer.from(JSON.stringify({ ...m, files })))
    const [ref] = await listManifests(store, layout)
    await expect(readManifest(store, layout, ref!)).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_CORRUPT', message: /files has 100001 entries/ })
  })
})
