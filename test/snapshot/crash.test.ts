import { spawn } from 'node:child_process'
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { expect, it } from 'vitest'
import { FsSnapshotStore, restoreSnapshot, Snapshotter } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { levelDigest, openKvStore, range, storeDigest, writeKeys } from './helpers.js'

it('a SIGKILL during an upload leaves the previous snapshot as the latest, and the sweep after the next snapshot removes the orphans', async () => {
  const dir = tempDir('tidemark-crash-')
  const storePath = join(dir, 'store')
  const dfsRoot = join(dir, 'dfs')
  const dfs = new FsSnapshotStore({ root: dfsRoot })

  // The previous snapshot, taken by this process.
  let store = await openKvStore(storePath)
  await writeKeys(store, range(0, 30_000), 1, 0n, 1000)
  const before = await new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0 }).takeSnapshot()
  const digest = await storeDigest(store)
  await store.close()

  // A child commits more and dies in the middle of uploading the next one.
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'upload-child.ts'), storePath, dfsRoot], { stdio: ['ignore', 'pipe', 'inherit'] })
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)))
  let killedDuring: string | undefined
  for await (const line of createInterface({ input: child.stdout })) {
    expect(line).toMatch(/^KILL /)
    killedDuring = line.slice('KILL '.length)
    child.kill('SIGKILL')
    break
  }
  expect(await exited).toBe('SIGKILL')
  expect(killedDuring).toMatch(/^job\/0\/data\//)

  store = await openKvStore(storePath)
  const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0, graceMs: 0 })
  try {
    // The crashed snapshot has no manifest, so it does not exist.
    expect((await snapshotter.listSnapshots()).map((s) => s.id)).toEqual([before.id])
    expect((await snapshotter.latest())?.id).toBe(before.id)
    const orphans = (await readdir(join(dfsRoot, 'job', '0', 'data'))).filter((n) => n.endsWith('.tar') && !before.objects.some((o) => o.endsWith(n)))
    expect(orphans.length).toBeGreaterThanOrEqual(1)

    // A restore now yields the previous snapshot exactly.
    const target = join(dir, 'restored')
    const restored = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target })
    expect(restored.snapshot?.id).toBe(before.id)
    expect(restored.positions).toEqual(before.positions)
    expect(await levelDigest(target)).toEqual(digest)

    // What the crash left has an id above every manifest, so it counts as an
    // upload in flight and stays; the sweep takes it once a newer snapshot exists.
    const gc = await snapshotter.gc()
    expect(gc.deletedObjects).toEqual([])
    expect(gc.pendingObjects).toBe(orphans.length)
    expect(gc.retained).toEqual([before.id])
    for (const key of before.objects) expect(await dfs.head(key)).toBeDefined()
    // The checkpoint the child left beside the store goes with the next snapshot.
    expect((await readdir(`${storePath}.checkpoints`)).length).toBe(1)
    const next = await snapshotter.takeSnapshot()
    expect(next.gc?.deletedObjects.map((k) => k.split('/').pop()).sort()).toEqual(orphans.sort())
    expect(await readdir(`${storePath}.checkpoints`)).toEqual([])
    expect(next.sequence).toBe(before.sequence + 1)
  } finally {
    await store.close()
  }
})
