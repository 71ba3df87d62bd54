import { mkdir, readdir, readFile, symlink, utimes, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { FsSnapshotStore } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { listKeys, readAll } from '../../src/testing/streams.js'

/** A store whose `job/0/data` is a link to a directory outside the root that holds two files. */
async function linkedDataStore(): Promise<{ store: FsSnapshotStore; root: string; outside: string }> {
  const dir = tempDir('tidemark-fs-link-')
  const root = join(dir, 'store')
  const outside = join(dir, 'outside')
  await mkdir(outside)
  await writeFile(join(outside, 'precious.tar'), 'not the store\'s')
  await writeFile(join(outside, '0000000000-000000000001-abcd-0.tar'), 'not the store\'s either')
  const store = new FsSnapshotStore({ root })
  await store.put('job/0/manifests/0000000000-000000000001.json', Buffer.from('{}'))
  await symlink(outside, join(root, 'job', '0', 'data'), 'dir')
  return { store, root, outside }
}

describe('FsSnapshotStore and symbolic links', () => {
  it('lists nothing behind a linked directory, and neither linked files', async () => {
    const { store, root } = await linkedDataStore()
    await writeFile(join(root, 'job', 'target'), 'x')
    await symlink(join(root, 'job', 'target'), join(root, 'job', '0', 'manifests', 'linked.json'))
    expect(await listKeys(store, '')).toEqual(['job/0/manifests/0000000000-000000000001.json', 'job/target'])
    expect(await listKeys(store, 'job/0/data/')).toEqual([])
    expect(await listKeys(store, 'job/0/da')).toEqual([])
  })

  it('refuses get, head, put and deleteMany of keys behind a link, and deletes nothing outside the root', async () => {
    const { store, outside } = await linkedDataStore()
    const refused = { code: 'TIDEMARK_DFS_REQUEST_FAILED', message: /symbolic link/ }
    await expect(store.get('job/0/data/precious.tar')).rejects.toMatchObject(refused)
    await expect(store.head('job/0/data/precious.tar')).rejects.toMatchObject(refused)
    await expect(store.put('job/0/data/new.tar', Buffer.from('x'))).rejects.toMatchObject(refused)
    await expect(store.put('job/0/data/sub/new.tar', Buffer.from('x'))).rejects.toMatchObject(refused)
    await expect(store.deleteMany(['job/0/manifests/0000000000-000000000001.json', 'job/0/data/precious.tar'])).rejects.toMatchObject(refused)
    // Refused as a whole: the manifest, listed first, is still there.
    expect(await listKeys(store, 'job/')).toEqual(['job/0/manifests/0000000000-000000000001.json'])
    expect((await readdir(outside)).sort()).toEqual(['0000000000-000000000001-abcd-0.tar', 'precious.tar'])
  })

  it('refuses to read a linked file in an object\'s place', async () => {
    const dir = tempDir('tidemark-fs-link-')
    const root = join(dir, 'store')
    const store = new FsSnapshotStore({ root })
    await store.put('a/real', Buffer.from('real'))
    await writeFile(join(dir, 'secret'), 'secret')
    await symlink(join(dir, 'secret'), join(root, 'a', 'linked'))
    await expect(store.get('a/linked')).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED', message: /symbolic link/ })
    await expect(store.head('a/linked')).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED' })
    expect(await readAll(await store.get('a/real'))).toEqual(Buffer.from('real'))
  })

  it('refuses a link to a directory inside the root as well', async () => {
    const root = tempDir('tidemark-fs-link-')
    const store = new FsSnapshotStore({ root })
    await store.put('real/k', Buffer.from('v'))
    await symlink(join(root, 'real'), join(root, 'alias'), 'dir')
    expect(await listKeys(store, '')).toEqual(['real/k'])
    await expect(store.get('alias/k')).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED' })
    await expect(store.deleteMany(['alias/k'])).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED' })
    expect(await readFile(join(root, 'real', 'k'), 'utf8')).toBe('v')
  })

  it('works under a root that is itself a link', async () => {
    const dir = tempDir('tidemark-fs-link-')
    await mkdir(join(dir, 'real-root'))
    await symlink(join(dir, 'real-root'), join(dir, 'root'), 'dir')
    const store = new FsSnapshotStore({ root: join(dir, 'root') })
    await store.put('a/b', Buffer.from('x'))
    expect(await listKeys(store, '')).toEqual(['a/b'])
    expect(await store.head('a/b')).toMatchObject({ size: 1 })
    await store.deleteMany(['a/b'])
    expect(await listKeys(store, '')).toEqual([])
  })
})

describe('FsSnapshotStore temporary files', () => {
  it('sweepTemporaryFiles removes those older than the grace under the prefix, and keeps fresh ones', async () => {
    const root = tempDir('tidemark-fs-tmp-')
    const store = new FsSnapshotStore({ root, temporaryFileGraceMs: 60_000 })
    await store.put('job/0/data/x.tar', Buffer.from('x'))
    await store.put('job/1/data/y.tar', Buffer.from('y'))
    const old = join(root, 'job', '0', 'data', '.tidemark-tmp-00000000000000aa')
    const fresh = join(root, 'job', '0', 'data', '.tidemark-tmp-00000000000000bb')
    const otherPartition = join(root, 'job', '1', 'data', '.tidemark-tmp-00000000000000cc')
    for (const path of [old, fresh, otherPartition]) await writeFile(path, 'half written')
    const twoMinutesAgo = new Date(Date.now() - 120_000)
    await utimes(old, twoMinutesAgo, twoMinutesAgo)
    await utimes(otherPartition, twoMinutesAgo, twoMinutesAgo)

    expect(await store.sweepTemporaryFiles('job/0/')).toBe(1)
    expect((await readdir(join(root, 'job', '0', 'data'))).sort()).toEqual(['.tidemark-tmp-00000000000000bb', 'x.tar'])
    expect((await readdir(join(root, 'job', '1', 'data'))).sort()).toEqual(['.tidemark-tmp-00000000000000cc', 'y.tar'])
    expect(await store.sweepTemporaryFiles('')).toBe(1)
    expect(await readdir(join(root, 'job', '1', 'data'))).toEqual(['y.tar'])
  })

  it('are kept for an hour by default, and the grace is validated', async () => {
    const root = tempDir('tidemark-fs-tmp-')
    const store = new FsSnapshotStore({ root })
    expect(store.temporaryFileGraceMs).toBe(60 * 60 * 1000)
    await store.put('a/b', Buffer.from('x'))
    const temp = join(root, 'a', '.tidemark-tmp-00000000000000aa')
    await writeFile(temp, 'half written')
    const minutesAgo = (m: number): Date => new Date(Date.now() - m * 60_000)
    await utimes(temp, minutesAgo(59), minutesAgo(59))
    expect(await store.sweepTemporaryFiles('')).toBe(0)
    await utimes(temp, minutesAgo(61), minutesAgo(61))
    expect(await store.sweepTemporaryFiles('')).toBe(1)
    expect(() => new FsSnapshotStore({ root, temporaryFileGraceMs: -1 })).toThrow(RangeError)
    expect(() => new FsSnapshotStore({ root, temporaryFileGraceMs: '1' as unknown as number })).toThrow(/temporaryFileGraceMs must be a number/)
  })

  it('does not enter linked directories', async () => {
    const { store, outside } = await linkedDataStore()
    const temp = join(outside, '.tidemark-tmp-00000000000000aa')
    await writeFile(temp, 'someone else\'s')
    await utimes(temp, new Date(0), new Date(0))
    expect(await store.sweepTemporaryFiles('')).toBe(0)
    expect(await readdir(outside)).toContain('.tidemark-tmp-00000000000000aa')
  })
})
