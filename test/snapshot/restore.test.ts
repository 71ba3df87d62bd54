import { cp, mkdir, open, readdir, rm, truncate, unlink, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import {
  PartitionStore, restoreSnapshot, type CorruptReason, type RestoreEvent, type RestoreOptions, type RestoreProgress, type RestoreResult, type SnapshotResult,
} from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { fixture, levelDigest, storeDigest, type Fixture } from './helpers.js'

const fixtures: Fixture[] = []
afterEach(async () => {
  await Promise.all(fixtures.splice(0).map((f) => f.close()))
})

async function setup(keys = 20_000): Promise<Fixture> {
  const f = await fixture(tempDir('tidemark-restore-'), keys, { gcAfterSnapshot: false })
  fixtures.push(f)
  return f
}

function objectPath(f: Fixture, key: string): string {
  return join(f.dir, 'dfs', ...`job/0/${key}`.split('/'))
}

function restore(f: Fixture, target: string, extra: Partial<RestoreOptions> = {}): Promise<RestoreResult> {
  return restoreSnapshot({ snapshotStore: f.dfs, job: 'job', partition: 0, target, ...extra })
}

/** Snapshot A (full), then B (incremental, with files of its own), and the store's digest at each. */
async function twoSnapshots(f: Fixture): Promise<{ a: SnapshotResult; b: SnapshotResult; digestA: { sha256: string; entries: number }; digestB: { sha256: string; entries: number } }> {
  const a = await f.snapshotter.takeSnapshot()
  const digestA = await storeDigest(f.store)
  await f.write(0, 2000, 2)
  const b = await f.snapshotter.takeSnapshot()
  const digestB = await storeDigest(f.store)
  expect(b.full).toBe(false)
  return { a, b, digestA, digestB }
}

describe('restore falls back to the previous snapshot and says why', () => {
  const cases: Array<[string, CorruptReason, (f: Fixture, b: SnapshotResult) => Promise<void>]> = [
    ['a flipped bit in a table file', 'checksum-mismatch', async (f, b) => {
      const table = b.files.find((file) => file.uploaded && file.name.endsWith('.ldb'))!
      const handle = await open(objectPath(f, table.object), 'r+')
      const byte = Buffer.alloc(1)
      await handle.read(byte, 0, 1, table.offset + Math.floor(table.size / 2))
      byte[0]! ^= 0x10
      await handle.write(byte, 0, 1, table.offset + Math.floor(table.size / 2))
      await handle.close()
    }],
    ['a truncated object', 'object-truncated', async (f, b) => {
      const object = b.files.find((file) => file.uploaded)!.object
      const size = b.files.filter((file) => file.object === object).reduce((max, file) => Math.max(max, file.offset + file.size), 0)
      await truncate(objectPath(f, object), Math.floor(size / 2))
    }],
    ['a missing object', 'object-missing', async (f, b) => {
      await unlink(objectPath(f, b.files.find((file) => file.uploaded)!.object))
    }],
    ['a manifest that does not parse', 'manifest-unreadable', async (f, b) => {
      await writeFile(join(f.dir, 'dfs', ...b.key.split('/')), '{"format":"tidemark-snapshot","version":1,"files":[')
    }],
  ]

  for (const [what, reason, damage] of cases) {
    it(`on ${what} (${reason})`, async () => {
      const f = await setup()
      const { a, b, digestA } = await twoSnapshots(f)
      await damage(f, b)

      const events: RestoreEvent[] = []
      const target = join(f.dir, 'restored')
      const result = await restore(f, target, { onEvent: (e) => events.push(e) })

      expect(result.source).toBe('snapshot')
      expect(result.snapshot?.id).toBe(a.id)
      expect(result.positions).toEqual(a.positions)
      expect(result.skipped).toEqual([{ id: b.id, key: b.key, reason, message: expect.any(String) }])
      expect(events).toContainEqual({ type: 'snapshot-skipped', skipped: result.skipped[0] })
      expect(await levelDigest(target)).toEqual(digestA)
      // Nothing of the failed attempt is left beside the target.
      expect((await readdir(f.dir)).filter((n) => n.includes('.restore-'))).toEqual([])
    })
  }

  it('does not fall back from a snapshot asked for by id: TIDEMARK_SNAPSHOT_CORRUPT says what is wrong', async () => {
    const f = await setup(5000)
    const { b } = await twoSnapshots(f)
    await unlink(objectPath(f, b.files.find((file) => file.uploaded)!.object))
    const err = await restore(f, join(f.dir, 'restored'), { snapshot: b.id }).catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'TIDEMARK_SNAPSHOT_CORRUPT', retriable: false, details: { reason: 'object-missing', snapshot: b.id } })
    await expect(restore(f, join(f.dir, 'restored'), { snapshot: '0000000009-000000000009' })).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_NOT_FOUND' })
  })

  it('fails with TIDEMARK_SNAPSHOT_NOT_FOUND when every snapshot is damaged, listing each', async () => {
    const f = await setup(5000)
    const { a, b } = await twoSnapshots(f)
    for (const snap of [a, b]) await writeFile(join(f.dir, 'dfs', ...snap.key.split('/')), 'not json')
    const target = join(f.dir, 'restored')
    const err = await restore(f, target).catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'TIDEMARK_SNAPSHOT_NOT_FOUND', retriable: false })
    expect((err as { details: { skipped: unknown[] } }).details.skipped).toHaveLength(2)
    await expect(readdir(target)).rejects.toMatchObject({ code: 'ENOENT' })
  })
})

describe('restore', () => {
  it('reports progress up to every byte it downloads and the snapshot it picked', async () => {
    const f = await setup()
    const { b, digestB } = await twoSnapshots(f)
    const progress: RestoreProgress[] = []
    const events: RestoreEvent[] = []
    const target = join(f.dir, 'restored')
    const result = await restore(f, target, { onProgress: (p) => progress.push(p), onEvent: (e) => events.push(e), progressIntervalMs: 0, rangeBytes: 64 * 1024, downloadConcurrency: 3 })
    expect(result).toMatchObject({ source: 'snapshot', snapshot: { id: b.id }, files: b.files.length, skipped: [] })
    expect(result.bytesDownloaded).toBe(result.bytesTotal)
    expect(progress.length).toBeGreaterThan(1)
    expect(progress.at(-1)).toMatchObject({ snapshot: b.id, bytesDownloaded: result.bytesTotal, bytesTotal: result.bytesTotal, filesDone: b.files.length, filesTotal: b.files.length })
    for (let i = 1; i < progress.length; i++) expect(progress[i]!.bytesDownloaded).toBeGreaterThanOrEqual(progress[i - 1]!.bytesDownloaded)
    expect(events[0]).toMatchObject({ type: 'snapshot-restoring', id: b.id, bytesTotal: result.bytesTotal })
    expect(await levelDigest(target)).toEqual(digestB)
  })

  it('a throwing onProgress or onEvent is logged with its callback and the restore completes', async () => {
    const f = await setup()
    const { b, digestB } = await twoSnapshots(f)
    const errors: Array<{ fields: Record<string, unknown>; msg: string }> = []
    const logger = { debug() {}, info() {}, warn() {}, error(fields: object, msg: string) { errors.push({ fields: fields as Record<string, unknown>, msg }) } }
    const target = join(f.dir, 'restored')
    const result = await restore(f, target, {
      logger, progressIntervalMs: 0,
      onProgress: () => { throw new Error('the progress bar is broken') },
      onEvent: () => { throw new Error('the event sink is broken') },
    })
    expect(result).toMatchObject({ source: 'snapshot', snapshot: { id: b.id } })
    expect(await levelDigest(target)).toEqual(digestB)
    const progressErrors = errors.filter((e) => e.fields['callback'] === 'onProgress')
    expect(progressErrors.length).toBeGreaterThan(0)
    expect((progressErrors[0]!.fields['err'] as Error).message).toBe('the progress bar is broken')
    expect(errors.some((e) => e.fields['event'] === 'snapshot-restoring' && (e.fields['err'] as Error).message === 'the event sink is broken')).toBe(true)
  })

  it('with no snapshot: TIDEMARK_SNAPSHOT_NOT_FOUND, or an empty directory when allowEmpty is set', async () => {
    const f = await setup(0)
    const target = join(f.dir, 'restored')
    await expect(restore(f, target)).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_NOT_FOUND' })
    const result = await restore(f, target, { allowEmpty: true })
    expect(result).toMatchObject({ source: 'empty', positions: [], bytesDownloaded: 0 })
    expect(await readdir(target)).toEqual([])
  })

  it('refuses a target that holds something other than a partition store', async () => {
    const f = await setup(100)
    await f.snapshotter.takeSnapshot()
    const target = join(f.dir, 'elsewhere')
    await mkdir(target)
    await writeFile(join(target, 'notes.txt'), 'mine')
    await expect(restore(f, target)).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE' })
    expect(await readdir(target)).toEqual(['notes.txt'])
  })

  it('refuses a store that is open (TIDEMARK_STORE_LOCKED) instead of replacing it', async () => {
    const f = await setup(100)
    await f.snapshotter.takeSnapshot()
    await expect(restore(f, f.store.path)).rejects.toMatchObject({ code: 'TIDEMARK_STORE_LOCKED' })
  })
})

describe('local recovery', () => {
  it('uses an intact local store at the newest snapshot\'s position and downloads nothing', async () => {
    const f = await setup()
    const snap = await f.snapshotter.takeSnapshot()
    const digest = await storeDigest(f.store)
    await f.store.close()
    let gets = 0
    const get = f.dfs.get.bind(f.dfs)
    f.dfs.get = async (...args) => {
      gets++
      return get(...args)
    }
    const events: RestoreEvent[] = []
    const result = await restore(f, f.store.path, { onEvent: (e) => events.push(e) })
    expect(result).toMatchObject({ source: 'local', positions: snap.positions, bytesDownloaded: 0, snapshot: { id: snap.id } })
    expect(events).toEqual([{ type: 'local-store-used', positions: snap.positions, reason: expect.stringContaining(snap.id) }])
    expect(gets).toBe(1) // the manifest, to learn its position
    expect(await levelDigest(f.store.path)).toEqual(digest)
  })

  it('replaces a local store that is behind the newest snapshot', async () => {
    const f = await setup()
    await f.snapshotter.takeSnapshot()
    const stale = join(f.dir, 'stale')
    await f.store.quiesce((path) => cp(path, stale, { recursive: true }))
    await f.write(0, 3000, 3)
    const newer = await f.snapshotter.takeSnapshot()
    const digest = await storeDigest(f.store)
    const events: RestoreEvent[] = []
    const result = await restore(f, stale, { onEvent: (e) => events.push(e) })
    expect(result).toMatchObject({ source: 'snapshot', snapshot: { id: newer.id }, positions: newer.positions })
    expect(events.map((e) => e.type)).toEqual(['snapshot-restoring', 'local-store-replaced'])
    expect(await levelDigest(stale)).toEqual(digest)
    expect((await readdir(f.dir)).filter((n) => n.includes('.replaced-') || n.includes('.restore-'))).toEqual([])
  })

  it('replaces a local store that lost a table file', async () => {
    const f = await setup()
    const snap = await f.snapshotter.takeSnapshot()
    const digest = await storeDigest(f.store)
    const damaged = join(f.dir, 'damaged')
    await f.store.quiesce((path) => cp(path, damaged, { recursive: true }))
    const table = (await readdir(damaged)).find((n) => n.endsWith('.ldb'))!
    await rm(join(damaged, table))
    const events: RestoreEvent[] = []
    const result = await restore(f, damaged, { onEvent: (e) => events.push(e) })
    expect(result).toMatchObject({ source: 'snapshot', snapshot: { id: snap.id } })
    expect(events).toContainEqual({ type: 'local-store-replaced', reason: expect.stringContaining(table) })
    expect(await levelDigest(damaged)).toEqual(digest)
    const reopened = await PartitionStore.open({ path: damaged })
    expect(reopened.positions()).toEqual(snap.positions)
    await reopened.close()
  })

  it('falls back to an intact local store when no snapshot can be restored', async () => {
    const f = await setup(5000)
    const snap = await f.snapshotter.takeSnapshot()
    const behind = join(f.dir, 'behind')
    await f.store.quiesce((path) => cp(path, behind, { recursive: true }))
    await f.write(0, 100, 4)
    const newer = await f.snapshotter.takeSnapshot()
    await unlink(objectPath(f, newer.files.find((file) => file.uploaded)!.object))
    await writeFile(join(f.dir, 'dfs', ...snap.key.split('/')), '[]')
    const result = await restore(f, behind)
    // The newest snapshot is damaged; the older one is unreadable, and the
    // local store is at its position anyway.
    expect(result.source).toBe('local')
    expect(result.skipped.map((s) => [s.id, s.reason])).toEqual([[newer.id, 'object-missing'], [snap.id, 'manifest-unreadable']])
  })
})
