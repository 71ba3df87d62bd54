// What a restore fsyncs: every file it writes, and every linked file whose
// bytes may still be in the page cache (a prefetch's), but not the links to
// a SnapshotFollower's copy, whose files were synced when the follower took
// them (and again when a follower reopens a copy an earlier one left).
// fsyncAndClose is wrapped to record the path of each descriptor it syncs.
import { readlinkSync } from 'node:fs'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { FsSnapshotStore, restoreSnapshot, SnapshotFollower, type ReusableFile } from '../../src/index.js'
import { prefetchSnapshot } from '../../src/snapshot/prefetch.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { listManifests, readManifest } from '../../src/snapshot/catalog.js'
import type * as Util from '../../src/util/index.js'
import { tempDir } from '../helpers/tmp.js'
import { fixture, levelDigest, storeDigest, waitForCompactions } from './helpers.js'

const synced = vi.hoisted(() => [] as string[])
vi.mock('../../src/util/index.js', async (importOriginal) => {
  const actual = await importOriginal<typeof Util>()
  return {
    ...actual,
    fsyncAndClose: (fd: number) => {
      synced.push(readlinkSync(`/proc/self/fd/${fd}`))
      return actual.fsyncAndClose(fd)
    },
  }
})

const open: Array<{ close(): Promise<void> }> = []
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()))
  synced.length = 0
})

/** The shared fixture's store and its first snapshot; `more()` changes a few keys and snapshots again (a few new files beside the first's). */
async function source(dir: string) {
  const f = await fixture(dir, 6000, { gcAfterSnapshot: false })
  open.push(f)
  await storeDigest(f.store)
  await waitForCompactions(f.store.path, 300)
  const older = await f.snapshotter.takeSnapshot()
  return {
    dfs: f.dfs,
    older,
    async more() {
      await f.write(0, 300, 2)
      return { newer: await f.snapshotter.takeSnapshot(), digest: await storeDigest(f.store) }
    },
  }
}

const inDir = (dir: string) => (path: string): boolean => path.startsWith(`${dir}/`)
const names = (paths: readonly string[]): string[] => paths.map((p) => p.slice(p.lastIndexOf('/') + 1)).sort()

describe('what a restore fsyncs', () => {
  it('links a follower\'s copy without syncing it again (the follower synced it), and syncs the files it downloads', { timeout: 60_000 }, async () => {
    const dir = tempDir('tidemark-restore-sync-')
    const { dfs, older, more } = await source(dir)
    const copy = join(dir, 'copy')
    const follower = new SnapshotFollower({ snapshotStore: dfs, job: 'job', partition: 0, dir: copy })
    open.push({ close: () => follower.dispose() })
    // Follows the older snapshot only: the newer one's new files are downloaded by the restore.
    expect((await follower.sync()).snapshot?.id).toBe(older.id)
    const { newer, digest } = await more()
    const files = await follower.reusableFiles()
    // Each file the copy holds was synced once, when the follower took it.
    expect(names(synced.filter(inDir(join(copy, 'files'))))).toEqual(files.map((f) => `${f.name}.${f.sha256}`).sort())
    expect(files.every((f) => f.synced === true)).toBe(true)
    synced.length = 0

    const target = join(dir, 'restored')
    const result = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target, reuse: files })
    expect(result.snapshot?.id).toBe(newer.id)
    expect(await levelDigest(target)).toEqual(digest)
    const linked = new Set(files.map((f) => f.name))
    const downloaded = newer.files.filter((f) => !files.some((r) => r.name === f.name && r.sha256 === f.sha256)).map((f) => f.name)
    expect(downloaded.length).toBeGreaterThan(0)
    expect(newer.files.some((f) => linked.has(f.name))).toBe(true)
    // Synced in the temporary directory beside the target, before it was renamed into place.
    const restoreSyncs = names(synced.filter((p) => p.startsWith(join(dir, '.restored.restore-'))))
    expect(restoreSyncs).toEqual([...downloaded].sort())
  })

  it('a follower reopened over the copy an earlier one left syncs the files it keeps before it offers them as synced', { timeout: 60_000 }, async () => {
    const dir = tempDir('tidemark-restore-sync-')
    const { dfs } = await source(dir)
    const copy = join(dir, 'copy')
    const first = new SnapshotFollower({ snapshotStore: dfs, job: 'job', partition: 0, dir: copy })
    await first.sync()
    await first.stop()
    const kept = await first.reusableFiles()
    synced.length = 0
    // A restarted process: its page cache may hold bytes the dead follower never synced.
    const again = new SnapshotFollower({ snapshotStore: dfs, job: 'job', partition: 0, dir: copy })
    open.push({ close: () => again.dispose() })
    const files = await again.reusableFiles()
    expect(files.map((f) => f.name).sort()).toEqual(kept.map((f) => f.name).sort())
    expect(files.every((f) => f.synced === true)).toBe(true)
    expect(names(synced.filter(inDir(join(copy, 'files'))))).toEqual(files.map((f) => `${f.name}.${f.sha256}`).sort())
  })

  it('syncs a prefetch\'s files, and any reused file that does not say it is synced', { timeout: 60_000 }, async () => {
    const dir = tempDir('tidemark-restore-sync-')
    const { dfs, older, more } = await source(dir)
    const { newer, digest } = await more()
    const layout = new SnapshotLayout('job', 0)
    const ref = (await listManifests(dfs, layout)).find((r) => r.id === older.id)!
    const prefetch = prefetchSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, manifest: await readManifest(dfs, layout, ref), dir: join(dir, 'restored.prefetch') })
    const files: ReusableFile[] = await prefetch.finished()
    expect(files.length).toBeGreaterThan(0)
    expect(files.some((f) => f.synced === true)).toBe(false)
    synced.length = 0
    const result = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target: join(dir, 'restored'), reuse: files })
    await prefetch.dispose()
    expect(result.snapshot?.id).toBe(newer.id)
    expect(await levelDigest(join(dir, 'restored'))).toEqual(digest)
    // Every file of the restored snapshot: the linked ones too.
    expect(names(synced.filter((p) => p.startsWith(join(dir, '.restored.restore-'))))).toEqual(newer.files.map((f) => f.name).sort())
  })

  it('refuses a reused file whose synced is not a boolean, naming it', async () => {
    const dir = tempDir('tidemark-restore-sync-')
    const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
    const bad = { name: '000005.ldb', size: 1, sha256: 'a'.repeat(64), path: join(dir, 'x'), synced: 'yes' } as unknown as ReusableFile
    await expect(restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target: join(dir, 't'), reuse: [bad] }))
      .rejects.toThrow(new TypeError('reuse: "000005.ldb" has synced "yes", which must be true, false or left out'))
  })
})
