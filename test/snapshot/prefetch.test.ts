// prefetchSnapshot + restoreSnapshot's `reuse` (a new owner downloads the
// previous snapshot while the old owner takes its hand-off snapshot), and the
// restore's verifiedFiles given to the restored store's Snapshotter.
import { randomBytes } from 'node:crypto'
import { existsSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { FsSnapshotStore, PartitionStore, restoreSnapshot, Snapshotter, type SnapshotResult } from '../../src/index.js'
import { prefetchSnapshot } from '../../src/snapshot/prefetch.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { readManifest, listManifests } from '../../src/snapshot/catalog.js'
import { tempDir } from '../helpers/tmp.js'
import { keyOf, kv, levelDigest, openKvStore, range, storeDigest, TOPIC, waitForCompactions } from './helpers.js'

/** Values that do not compress: about 12 MiB of table files, several ranged reads of the prefetch. */
const KEYS = 12_000
const open: Array<{ close(): Promise<void> }> = []
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()))
})

async function writeRandom(store: PartitionStore, keys: Iterable<number>, firstOffset: bigint): Promise<bigint> {
  let offset = firstOffset - 1n
  let tx = store.transaction()
  for (const i of keys) {
    tx.value(kv).put(keyOf(i), randomBytes(1000))
    if (tx.size >= 1000) {
      await tx.commit({ topic: TOPIC, partition: 0, offset: ++offset })
      tx = store.transaction()
    }
  }
  if (tx.size > 0) await tx.commit({ topic: TOPIC, partition: 0, offset: ++offset })
  return offset
}

/** Two snapshots of one store: `older` (full), then `newer` after 1 % of the keys changed (incremental). */
async function twoSnapshots(dir: string) {
  const store = await openKvStore(join(dir, 'store'))
  open.push(store)
  const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
  const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0 })
  const last = await writeRandom(store, range(0, KEYS), 0n)
  await storeDigest(store)
  await waitForCompactions(store.path, 500)
  const older = await snapshotter.takeSnapshot()
  await writeRandom(store, (function* () { for (let i = 0; i < KEYS; i += 100) yield i })(), last + 1n)
  const newer = await snapshotter.takeSnapshot()
  const digest = await storeDigest(store)
  await snapshotter.close()
  const layout = new SnapshotLayout('job', 0)
  const ref = (await listManifests(dfs, layout)).find((r) => r.id === older.id)!
  return { dfs, older, newer, digest, olderManifest: await readManifest(dfs, layout, ref) }
}

const newBytes = (s: SnapshotResult): number => s.files.filter((f) => f.uploaded).reduce((sum, f) => sum + f.size, 0)

describe('prefetchSnapshot and restore reuse', () => {
  it('a restore given a prefetch of the previous snapshot downloads only what the newer one added, and restores it exactly', { timeout: 60_000 }, async () => {
    const dir = tempDir('tidemark-prefetch-')
    const { dfs, newer, digest, olderManifest } = await twoSnapshots(dir)
    expect(newer.full).toBe(false)
    const target = join(dir, 'restored')
    const prefetch = prefetchSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, manifest: olderManifest, dir: `${target}.prefetch` })
    const files = await prefetch.finished()
    expect(files.length).toBe(olderManifest.files.length)
    const plain = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target: join(dir, 'plain'), snapshot: newer.id })
    const result = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target, snapshot: newer.id, reuse: files })
    await prefetch.dispose()
    expect(existsSync(`${target}.prefetch`)).toBe(false)
    expect(result.source).toBe('snapshot')
    // The files the older snapshot held and the newer one kept came from the prefetch.
    expect(result.bytesDownloaded).toBeLessThan(plain.bytesDownloaded / 2)
    expect(result.bytesDownloaded).toBeGreaterThanOrEqual(newBytes(newer)) // at least what is new
    expect(await levelDigest(target)).toEqual(digest)
    const restored = await PartitionStore.open({ path: target, states: [kv] })
    expect(restored.positions()).toEqual(newer.positions)
    await restored.close()
  })

  it('narrowed to the files of the snapshot a new owner restores, fetches every one of them and skips ranges without one', { timeout: 60_000 }, async () => {
    const dir = tempDir('tidemark-prefetch-')
    const { dfs, olderManifest } = await twoSnapshots(dir)
    const key = (f: { name: string; size: number; sha256: string }): string => `${f.name}:${f.size}:${f.sha256}`
    // About 12 MiB in ranges of at most 4 MiB: the first file's range is not all of them.
    const wanted = [olderManifest.files[0]!, olderManifest.files.at(-1)!]
    // Narrowed before any range starts (the prefetch begins by clearing its directory).
    const narrowed = prefetchSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, manifest: olderManifest, dir: join(dir, 'narrowed.prefetch') })
    narrowed.narrow(wanted)
    const files = await narrowed.finished()
    expect(files.map(key)).toEqual(expect.arrayContaining(wanted.map(key)))
    expect(files.length).toBeLessThan(olderManifest.files.length)
    await narrowed.dispose()
    const none = prefetchSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, manifest: olderManifest, dir: join(dir, 'none.prefetch') })
    none.narrow([])
    expect(await none.finished()).toEqual([])
    await none.dispose()
  })

  it('downloads a file whose prefetched copy has another hash or size, and files whose prefetch failed', { timeout: 60_000 }, async () => {
    const dir = tempDir('tidemark-prefetch-')
    const { dfs, newer, digest, olderManifest } = await twoSnapshots(dir)
    // Fault injection: the prefetch's first ranged read fails.
    const get = dfs.get.bind(dfs)
    let calls = 0
    dfs.get = (async (key, options) => {
      if (++calls === 1) throw new Error('injected')
      return get(key, options)
    }) as typeof dfs.get
    const target = join(dir, 'restored')
    const prefetch = prefetchSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, manifest: olderManifest, dir: `${target}.prefetch`, downloadConcurrency: 1 })
    const files = await prefetch.finished()
    dfs.get = get
    expect(files.length).toBeLessThan(olderManifest.files.length)
    expect(files.length).toBeGreaterThan(1)
    // Two copies are damaged on disk and described as not matching the
    // snapshot (another hash, another size): linked, they would show in the digest.
    await writeFile(files[0]!.path, randomBytes(files[0]!.size))
    await writeFile(files[1]!.path, randomBytes(files[1]!.size))
    const tampered = files.map((f, i) => (i === 0 ? { ...f, sha256: '0'.repeat(64) } : i === 1 ? { ...f, size: f.size + 1 } : f))
    await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target, snapshot: newer.id, reuse: tampered })
    await prefetch.dispose()
    expect(await levelDigest(target)).toEqual(digest)
  })

  it('refuses a reuse list that is not made of { name, size, sha256, path }', async () => {
    const dir = tempDir('tidemark-prefetch-')
    const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
    await expect(restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target: join(dir, 't'), reuse: [{ name: 'x' }] as never })).rejects.toThrow(TypeError)
    await expect(restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target: join(dir, 't'), reuse: 'files' as never })).rejects.toThrow(/reuse must be an array/)
  })
})

describe('verifiedFiles', () => {
  it('the first snapshot of a restored store takes their hashes instead of reading the files', { timeout: 60_000 }, async () => {
    const dir = tempDir('tidemark-verified-')
    const { dfs, newer } = await twoSnapshots(dir)
    const target = join(dir, 'restored')
    const restored = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target })
    expect(restored.snapshot?.id).toBe(newer.id)
    const tables = restored.verifiedFiles!.filter((f) => f.name.endsWith('.ldb'))
    expect(tables.length).toBeGreaterThan(1)
    expect(restored.verifiedFiles!.map((f) => f.name).sort()).toEqual(newer.files.map((f) => f.name).sort())

    // One hash told wrong: that file does not match the snapshot it came
    // from, so it is uploaded again; every other table file is referenced
    // without being read. (A snapshotter that read the files would upload none.)
    const wrong = tables[0]!.name
    const store = await PartitionStore.open({ path: target, states: [kv] })
    open.push(store)
    const told = restored.verifiedFiles!.map((f) => (f.name === wrong ? { ...f, sha256: 'f'.repeat(64) } : f))
    const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0, epoch: newer.epoch, verifiedFiles: told })
    const next = await snapshotter.takeSnapshot()
    await snapshotter.close()
    const uploadedTables = next.files.filter((f) => f.uploaded && f.name.endsWith('.ldb')).map((f) => f.name)
    expect(uploadedTables).toEqual([wrong])

    expect(() => new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0, verifiedFiles: [{ name: 'x', size: '1' }] as never })).toThrow(/verifiedFiles must be an array/)
  })
})
