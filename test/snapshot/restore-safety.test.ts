// Restore and checkpoint cleanup delete only what Tidemark can prove it made
// (the TIDEMARK-STORE marker, or a plain LevelDB store of an earlier
// version), and two restores into one target end in a documented error.
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { cp, mkdir, readdir, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { PartitionStore, restoreSnapshot, type RestoreOptions, type RestoreResult } from '../../src/index.js'
import { removeStaleCheckpoints, takeCheckpoint } from '../../src/snapshot/checkpoint.js'
import { STORE_MARKER } from '../../src/store/store-dir.js'
import { tempDir } from '../helpers/tmp.js'
import { fixture, levelDigest, storeDigest, type Fixture } from './helpers.js'

const fixtures: Fixture[] = []
afterEach(async () => {
  await Promise.all(fixtures.splice(0).map((f) => f.close()))
})

async function setup(keys = 2000): Promise<Fixture> {
  const f = await fixture(tempDir('tidemark-restore-'), keys, { gcAfterSnapshot: false })
  fixtures.push(f)
  return f
}

function restore(f: Fixture, target: string, extra: Partial<RestoreOptions> = {}): Promise<RestoreResult> {
  return restoreSnapshot({ snapshotStore: f.dfs, job: 'job', partition: 0, target, ...extra })
}

/** Every file under `dir` with its bytes. */
function contents(dir: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const name of readdirSync(dir, { recursive: true }) as string[]) {
    try {
      out[name] = readFileSync(join(dir, name), 'hex')
    } catch {
      out[name] = '<dir>'
    }
  }
  return out
}

/** Counts the snapshot store's reads. */
function countGets(f: Fixture): { count: number } {
  const counter = { count: 0 }
  const get = f.dfs.get.bind(f.dfs)
  f.dfs.get = async (...args) => {
    counter.count++
    return get(...args)
  }
  return counter
}

describe('restore leaves what is not a store alone', () => {
  it('a target with LOG beside a user\'s file is refused with allowEmpty and no snapshot, and keeps the file', async () => {
    const f = await setup(0)
    const target = join(f.dir, 't')
    await mkdir(target)
    await writeFile(join(target, 'LOG'), 'x\n')
    await writeFile(join(target, 'thesis.tex'), 'precious\n')
    const before = contents(target)
    const err = await restore(f, target, { allowEmpty: true }).catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE', retriable: false, details: { target } })
    expect((err as Error).message).toMatch(/thesis\.tex/)
    expect(contents(target)).toEqual(before)
    expect((await readdir(f.dir)).filter((n) => n.includes('.replaced-') || n.includes('.restore-'))).toEqual([])
  })

  it('refuses such a target before anything is downloaded when a snapshot exists', async () => {
    const f = await setup()
    await f.snapshotter.takeSnapshot()
    const target = join(f.dir, 't')
    await mkdir(target)
    for (const name of ['CURRENT', 'LOCK', '000005.log', 'MANIFEST-000004', 'thesis.tex']) await writeFile(join(target, name), name)
    const before = contents(target)
    const gets = countGets(f)
    for (const options of [{}, { allowEmpty: true }, { useLocal: false }]) {
      await expect(restore(f, target, options)).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE' })
    }
    expect(gets.count).toBe(0)
    expect(contents(target)).toEqual(before)
  })

  it('a target that is a file is refused the same way', async () => {
    const f = await setup(0)
    const file = join(f.dir, 'file')
    await writeFile(file, 'mine')
    await expect(restore(f, file, { allowEmpty: true })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE' })
    expect(readFileSync(file, 'utf8')).toBe('mine')
  })

  it('replaces a store of an earlier version (LevelDB files only) that is behind, and the restored store carries the marker', async () => {
    const f = await setup()
    const legacy = join(f.dir, 'legacy')
    await f.store.quiesce((path) => cp(path, legacy, { recursive: true }))
    await rm(join(legacy, STORE_MARKER))
    await f.write(0, 500, 2)
    const snap = await f.snapshotter.takeSnapshot()
    expect(snap.files.map((file) => file.name)).not.toContain(STORE_MARKER)
    const digest = await storeDigest(f.store)
    const result = await restore(f, legacy)
    expect(result).toMatchObject({ source: 'snapshot', snapshot: { id: snap.id } })
    expect(await levelDigest(legacy)).toEqual(digest)
    expect(JSON.parse(readFileSync(join(legacy, STORE_MARKER), 'utf8'))).toMatchObject({ format: 1, kind: 'store' })
    const reopened = await PartitionStore.open({ path: legacy, create: false })
    expect(reopened.positions()).toEqual(snap.positions)
    await reopened.close()
  })

  it('with allowEmpty and no snapshot, a damaged Tidemark store is replaced by an empty directory', async () => {
    const f = await setup(0)
    const target = join(f.dir, 'damaged')
    const store = await PartitionStore.open({ path: target })
    await store.close()
    await rm(join(target, 'CURRENT'))
    const result = await restore(f, target, { allowEmpty: true })
    expect(result.source).toBe('empty')
    expect(await readdir(target)).toEqual([])
  })
})

describe('a Tidemark store that also holds a user\'s file', () => {
  it('is used as it is when it is current, but never replaced: behind a snapshot, damaged or with useLocal false, the restore refuses before downloading and keeps the file', async () => {
    const f = await setup()
    const target = join(f.dir, 'marked')
    await f.store.quiesce((path) => cp(path, target, { recursive: true }))
    await writeFile(join(target, 'my-notes.txt'), 'precious\n')
    // At the snapshot's position: the local store is used, nothing is touched.
    await f.snapshotter.takeSnapshot()
    expect((await restore(f, target)).source).toBe('local')
    // Behind a newer snapshot, or not considered: it would have to be replaced.
    await f.write(0, 500, 2)
    await f.snapshotter.takeSnapshot()
    const before = contents(target)
    const dataGets: string[] = []
    const get = f.dfs.get.bind(f.dfs)
    f.dfs.get = async (key, ...rest) => {
      if (key.includes('/data/')) dataGets.push(key)
      return get(key, ...rest)
    }
    for (const options of [{}, { useLocal: false }]) {
      const err = await restore(f, target, options).catch((e: unknown) => e)
      expect(err).toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE', details: { target, strangers: ['my-notes.txt'] } })
      expect((err as Error).message).toMatch(/my-notes\.txt/)
    }
    expect(dataGets).toEqual([])
    // Damaged, with allowEmpty and nothing to restore: not emptied either.
    await rm(join(target, 'CURRENT'))
    const none = await fixture(tempDir('tidemark-restore-'), 0, { gcAfterSnapshot: false })
    fixtures.push(none)
    await expect(restoreSnapshot({ snapshotStore: none.dfs, job: 'job', partition: 0, target, allowEmpty: true })).rejects.toMatchObject({ code: 'TIDEMARK_STORE_NOT_A_STORE' })
    expect(readFileSync(join(target, 'my-notes.txt'), 'utf8')).toBe('precious\n')
    // (Opening the store to read its position rewrites LevelDB's own log and
    // MANIFEST; its tables and the marker stay.)
    const after = contents(target)
    for (const name of Object.keys(before).filter((n) => n.endsWith('.ldb') || n === STORE_MARKER)) expect(after[name]).toBe(before[name])
  })
})

describe('two restores into one target', () => {
  /**
   * Holds every ranged read (the download of data) until two have been
   * asked for. The first restore's read resolves `first`: it has inspected
   * the target (and closed the store there, which it opens to check it), so
   * the second one starts then and finds the target as the first one did.
   */
  function meetAtDownload(f: Fixture): { first: Promise<void> } {
    const get = f.dfs.get.bind(f.dfs)
    let waiting = 0
    let first!: () => void
    let both!: () => void
    const arrived = new Promise<void>((resolve) => { first = resolve })
    const met = new Promise<void>((resolve) => { both = resolve })
    f.dfs.get = async (key, options) => {
      if (options?.range !== undefined) {
        waiting++
        if (waiting === 1) first()
        if (waiting === 2) both()
        await met
      }
      return get(key, options)
    }
    return { first: arrived }
  }

  for (const start of ['absent', 'an empty directory', 'a store behind the snapshot'] as const) {
    it(`one installs, the other fails with TIDEMARK_RESTORE_CONFLICT (target ${start})`, async () => {
      const f = await setup()
      const target = join(f.dir, 'target')
      if (start === 'an empty directory') await mkdir(target)
      if (start === 'a store behind the snapshot') await f.store.quiesce((path) => cp(path, target, { recursive: true }))
      await f.write(0, 500, 2)
      const snap = await f.snapshotter.takeSnapshot()
      const digest = await storeDigest(f.store)
      const meeting = meetAtDownload(f)
      const a = restore(f, target)
      await meeting.first
      const results = await Promise.allSettled([a, restore(f, target)])
      const won = results.filter((r) => r.status === 'fulfilled')
      const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected')
      expect(won).toHaveLength(1)
      expect(lost).toHaveLength(1)
      expect(lost[0]!.reason).toMatchObject({ code: 'TIDEMARK_RESTORE_CONFLICT', retriable: true, details: { target } })
      expect(await levelDigest(target)).toEqual(digest)
      expect(existsSync(join(target, STORE_MARKER))).toBe(true)
      expect((await readdir(f.dir)).filter((n) => n.includes('.replaced-') || n.includes('.restore-'))).toEqual([])
      // A retry uses what the winner installed.
      expect(await restore(f, target)).toMatchObject({ source: 'local', positions: snap.positions })
    })
  }
})

describe('checkpoints', () => {
  it('carry the checkpoint marker, which is not one of their files', async () => {
    const f = await setup()
    const parent = join(f.dir, 'checkpoints')
    const checkpoint = await takeCheckpoint(f.store, parent)
    expect(JSON.parse(readFileSync(join(checkpoint.dir, STORE_MARKER), 'utf8'))).toMatchObject({ kind: 'checkpoint' })
    expect(checkpoint.files.map((file) => file.name)).not.toContain(STORE_MARKER)
    expect(checkpoint.files.length).toBeGreaterThan(0)
    await rm(checkpoint.dir, { recursive: true })
  })

  it('stale cleanup removes only ckpt-* directories that carry the checkpoint marker', async () => {
    const f = await setup(100)
    const parent = join(f.dir, 'checkpoints')
    const stale = await takeCheckpoint(f.store, parent)
    const mine = join(parent, 'ckpt-mine')
    await mkdir(mine)
    await writeFile(join(mine, 'LOG'), 'x')
    await writeFile(join(mine, 'thesis.tex'), 'precious')
    const store = join(parent, 'ckpt-store')
    await f.store.quiesce((path) => cp(path, store, { recursive: true })) // a store's marker, not a checkpoint's
    await writeFile(join(parent, 'ckpt-file'), 'a file')
    const removed = await removeStaleCheckpoints(parent)
    expect(removed).toEqual([stale.dir.slice(parent.length + 1)])
    expect((await readdir(parent)).sort()).toEqual(['ckpt-file', 'ckpt-mine', 'ckpt-store'])
    expect(contents(mine)).toEqual({ LOG: Buffer.from('x').toString('hex'), 'thesis.tex': Buffer.from('precious').toString('hex') })
    expect(await removeStaleCheckpoints(join(f.dir, 'missing'))).toEqual([])
  })
})
