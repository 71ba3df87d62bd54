import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { FsSnapshotStore, PartitionStore, restoreSnapshot, Snapshotter, type SnapshotResult } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { levelDigest, openKvStore, range, storeDigest, TOPIC, waitForCompactions, writeKeys } from './helpers.js'

const KEYS = Number(process.env.TIDEMARK_SNAPSHOT_KEYS ?? 1_000_000)

const open: Array<{ close(): Promise<void> }> = []
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()))
})

describe(`incremental snapshot round trip (${KEYS} keys, file-system store)`, () => {
  it('uploads only what changed and restores each snapshot exactly', { timeout: 180_000 }, async () => {
    const dir = tempDir('tidemark-snap-')
    const store = await openKvStore(join(dir, 'store'))
    open.push(store)
    const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
    const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0 })

    const t0 = performance.now()
    const last1 = await writeKeys(store, range(0, KEYS), 1, 0n)
    // The digest quiesces the store (its log becomes a table file) and reads
    // everything; then the compactions of the bulk load are let finish, so
    // that the second snapshot shows what the snapshotter uploads for the
    // changed keys, not what LevelDB rewrote of the bulk load meanwhile.
    const digest1 = await storeDigest(store)
    await waitForCompactions(store.path)
    const first = await snapshotter.takeSnapshot()

    // Change 1% of the keys, spread over the whole key space.
    const step = 100
    const last2 = await writeKeys(store, (function* () { for (let i = 0; i < KEYS; i += step) yield i })(), 2, last1 + 1n)
    const second = await snapshotter.takeSnapshot()
    const digest2 = await storeDigest(store)
    const report = (r: SnapshotResult): string => `${r.id} (${r.full ? `full: ${r.fullReason}` : 'incremental'}): ${r.bytesUploaded} of ${r.bytesTotal} bytes uploaded, ${r.files.filter((f) => f.uploaded).length}/${r.files.length} files, stall ${r.stallMs.toFixed(1)} ms, upload ${r.uploadMs.toFixed(0)} ms`
    console.log(`[round-trip] ${KEYS} keys\n  first:  ${report(first)}\n  second: ${report(second)}\n  ratio ${(second.bytesUploaded / first.bytesUploaded).toFixed(4)}`)

    expect(first.full).toBe(true)
    expect(first.positions).toEqual([{ topic: TOPIC, partition: 0, offset: last1 }])
    expect(second.full).toBe(false)
    expect(second.positions).toEqual([{ topic: TOPIC, partition: 0, offset: last2 }])
    expect(second.bytesUploaded).toBeLessThanOrEqual(first.bytesUploaded * 0.1)
    expect(second.files.some((f) => !f.uploaded)).toBe(true)

    for (const [snap, digest] of [[first, digest1], [second, digest2]] as const) {
      const target = join(dir, `restored-${snap.id}`)
      const result = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target, snapshot: snap.id })
      expect(result.source).toBe('snapshot')
      expect(result.positions).toEqual(snap.positions)
      expect(await levelDigest(target)).toEqual(digest)
      const restored = await PartitionStore.open({ path: target })
      expect(restored.positions()).toEqual(snap.positions)
      await restored.close()
    }
    console.log(`[round-trip] total ${((performance.now() - t0) / 1000).toFixed(1)} s`)
  })
})
