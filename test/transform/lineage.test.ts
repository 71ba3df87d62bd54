// A transform gives the state a new lineage (src/store/lineage.ts): its
// manifests carry it, a restore uses a local store as it is only when it is
// of the snapshot's lineage, and never falls back from a snapshot of one
// lineage to an older one of another (the state before the transform).
import { cp, unlink } from 'node:fs/promises'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { FsSnapshotStore, PartitionStore, SnapshotLayout, Snapshotter, restoreSnapshot, transformState, type SnapshotStore } from '../../src/index.js'
import { encodeManifest, parseManifest } from '../../src/snapshot/manifest.js'
import { tempDir } from '../helpers/tmp.js'
import { NEW_STATES, OLD_STATES, TOPIC, byBucket, legacy, toNewProgram, totals } from './fixtures/jobs.js'

/** Job "sales" partition 0 with one snapshot of the old program at offset 9; its store stays at `path`. */
async function oldJob(dir: string): Promise<{ store: SnapshotStore; path: string; snapshot: { id: string; key: string } }> {
  const store = new FsSnapshotStore({ root: join(dir, 'snapshots') })
  onTestFinished(() => store.close())
  const path = join(dir, 'old')
  const partition = await PartitionStore.open({ path, states: OLD_STATES })
  const tx = partition.transaction()
  for (let i = 0; i < 20; i++) {
    tx.value(totals).put(`k${i}`, i)
    tx.value(legacy).put(`k${i}`, 1)
  }
  await tx.commit({ topic: TOPIC, partition: 0, offset: 9n })
  const snapshotter = new Snapshotter({ snapshotStore: store, partitionStore: partition, job: 'sales', partition: 0, gcAfterSnapshot: false })
  const snapshot = await snapshotter.takeSnapshot()
  // Past the snapshot, as a running owner would be.
  const more = partition.transaction()
  more.value(totals).put('k0', 100)
  await more.commit({ topic: TOPIC, partition: 0, offset: 30n })
  await snapshotter.close()
  await partition.close()
  return { store, path, snapshot }
}

/** What parseManifest expects of the manifest at `key`. */
function keyOf(key: string): { job: string; partition: string; epoch: number; sequence: number } {
  return { job: 'sales', partition: '0', ...new SnapshotLayout('sales', 0).parseManifestKey(key)! }
}

async function readObject(store: SnapshotStore, key: string): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of await store.get(key)) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

function transformInPlace(store: SnapshotStore, dir: string): ReturnType<typeof transformState> {
  return transformState({ snapshotStore: store, from: { job: 'sales', partition: 0, states: OLD_STATES }, to: { job: 'sales' }, states: NEW_STATES, transform: toNewProgram, workDir: join(dir, 'work') })
}

describe('lineage', () => {
  it('a manifest with a lineage reads and encodes again byte for byte; a malformed one does not verify', async () => {
    const dir = tempDir('tidemark-lineage-')
    const { store } = await oldJob(dir)
    const result = await transformInPlace(store, dir)
    const bytes = await readObject(store, result.snapshot.key)
    const expect1 = keyOf(result.snapshot.key)
    const parsed = parseManifest(bytes, expect1)
    expect(parsed.lineage).toBe(result.lineage)
    expect(encodeManifest(parsed).equals(bytes)).toBe(true)
    const bad = Buffer.from(bytes.toString('utf8').replace(`"lineage":"${result.lineage}"`, '"lineage":"../x"'))
    expect(() => parseManifest(bad, expect1)).toThrow(/lineage must be/)
  })

  it('a local store of the old lineage, at or after the transformed snapshot, is replaced; one of its lineage is used as it is', async () => {
    const dir = tempDir('tidemark-lineage-')
    const { store, path } = await oldJob(dir)
    const result = await transformInPlace(store, dir)
    const replaced = await restoreSnapshot({ snapshotStore: store, job: 'sales', partition: 0, target: path })
    expect(replaced).toMatchObject({ source: 'snapshot', snapshot: { id: result.snapshot.id }, positions: [{ topic: TOPIC, partition: 0, offset: 9n }] })
    const restored = await PartitionStore.open({ path, states: NEW_STATES })
    expect(await restored.transaction().value(byBucket).get('b0')).toBe(0 + 7 + 14)
    await restored.close()
    // Now the local store is of the snapshot's lineage: used as it is.
    expect(await restoreSnapshot({ snapshotStore: store, job: 'sales', partition: 0, target: path })).toMatchObject({ source: 'local' })
  })

  it('never falls back from a transformed snapshot to one from before the transform; a local store of the old lineage is not used either', async () => {
    const dir = tempDir('tidemark-lineage-')
    const { store, path, snapshot } = await oldJob(dir)
    const result = await transformInPlace(store, dir)
    const manifest = parseManifest(await readObject(store, result.snapshot.key), keyOf(result.snapshot.key))
    // The transformed snapshot loses an object.
    await unlink(join(dir, 'snapshots', 'sales', '0', ...manifest.objects[0]!.key.split('/')))

    const fresh = join(dir, 'fresh')
    const error = await restoreSnapshot({ snapshotStore: store, job: 'sales', partition: 0, target: fresh }).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: 'TIDEMARK_SNAPSHOT_NOT_FOUND' })
    const skipped = (error as { details: { skipped: Array<{ id: string; reason: string }> } }).details.skipped
    expect(skipped).toEqual([
      expect.objectContaining({ id: result.snapshot.id, reason: 'object-missing' }),
      expect.objectContaining({ id: snapshot.id, reason: 'other-lineage' }),
    ])
    // The old owner's store is not brought back in its place, and is left as it is.
    await expect(restoreSnapshot({ snapshotStore: store, job: 'sales', partition: 0, target: path })).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_NOT_FOUND', message: expect.stringContaining('another lineage') })
    const kept = await PartitionStore.open({ path, states: OLD_STATES })
    expect(kept.position(TOPIC, 0)).toBe(30n)
    await kept.close()
  })

  it('a local store of the transformed lineage is used when no snapshot can be restored', async () => {
    const dir = tempDir('tidemark-lineage-')
    const { store } = await oldJob(dir)
    const result = await transformInPlace(store, dir)
    const path = join(dir, 'new')
    await restoreSnapshot({ snapshotStore: store, job: 'sales', partition: 0, target: path })
    const copy = join(dir, 'copy')
    await cp(path, copy, { recursive: true })
    const manifest = parseManifest(await readObject(store, result.snapshot.key), keyOf(result.snapshot.key))
    await unlink(join(dir, 'snapshots', 'sales', '0', ...manifest.objects[0]!.key.split('/')))
    expect(await restoreSnapshot({ snapshotStore: store, job: 'sales', partition: 0, target: copy })).toMatchObject({ source: 'local' })
  })
})
