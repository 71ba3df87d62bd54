// A restore whose local writes find the disk full: one documented code, the
// target and the user's files untouched, and a retry that works once space is
// back. The full disk is injected by wrapping single fs calls (enospc.ts must
// load before src/, so that the restore binds the wrappers).
import { enospc } from '../torture/enospc.js'
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterEach, expect, it } from 'vitest'
import { FsSnapshotStore, restoreSnapshot, Snapshotter } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { levelDigest, openKvStore, range, storeDigest, writeKeys } from './helpers.js'

afterEach(() => enospc.clear())

it('fails with TIDEMARK_RESTORE_WRITE_FAILED (retriable, errno ENOSPC), leaves nothing behind, and a retry restores', async () => {
  const dir = tempDir('tidemark-restore-enospc-')
  const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
  const store = await openKvStore(join(dir, 'store'))
  try {
    await writeKeys(store, range(0, 2000), 1, 0n, 500)
    const snapshot = await new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0 }).takeSnapshot()
    const site = join(dir, 'site')
    const target = join(site, 'target')
    await mkdir(site)
    await writeFile(join(site, 'notes.txt'), 'mine\n')

    enospc.set((op, path) => op === 'write' && path.startsWith(site))
    const error = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target }).then(() => undefined, (e: unknown) => e)
    enospc.clear()
    expect(error).toMatchObject({ code: 'TIDEMARK_RESTORE_WRITE_FAILED', retriable: true, details: { target, errno: 'ENOSPC' } })
    expect(await readFile(join(site, 'notes.txt'), 'utf8')).toBe('mine\n')
    expect(await readdir(site), 'no temporary copy is left, and no target').toEqual(['notes.txt'])

    const result = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target })
    expect(result.snapshot?.id).toBe(snapshot.id)
    expect(await levelDigest(target)).toEqual(await storeDigest(store))
  } finally {
    await store.close()
    await dfs.close()
  }
})
