import { mkdir, readdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { FsSnapshotStore } from '../../src/index.js'
import { makeTempDir, tempDir } from '../helpers/tmp.js'
import { listKeys, readAll, snapshotStoreSuite } from './snapshot-store.suite.js'

snapshotStoreSuite({
  name: 'file system',
  factory: async () => {
    const dir = makeTempDir('tidemark-dfs-')
    return { store: new FsSnapshotStore({ root: join(dir.path, 'store') }), cleanup: () => dir.cleanup() }
  },
  capabilities: { conditionalPut: true, manyKeys: 1200 },
})

describe('FsSnapshotStore', () => {
  it('leaves no temporary files behind and ignores those a crash left', async () => {
    const root = tempDir()
    const store = new FsSnapshotStore({ root })
    await store.put('a/b', Buffer.from('x'))
    await store.put('a/b', Buffer.from('y'))
    await expect(store.put('a/b', Buffer.from('z'), { ifNoneMatch: true })).rejects.toMatchObject({ code: 'TIDEMARK_DFS_OBJECT_EXISTS' })
    expect(await readdir(join(root, 'a'))).toEqual(['b'])
    // What a crash between write and rename leaves: a temporary file in the target directory.
    await writeFile(join(root, 'a', '.tidemark-tmp-0123456789abcdef'), 'half written')
    expect(await listKeys(store, '')).toEqual(['a/b'])
  })

  it('maps keys to paths under the root', async () => {
    const root = tempDir()
    const store = new FsSnapshotStore({ root })
    await store.put('jobs/j1/p0/000001.ldb', Buffer.from('table'))
    expect(await readdir(join(root, 'jobs', 'j1', 'p0'))).toEqual(['000001.ldb'])
    expect(store.url).toBe(pathToFileURL(root).href)
  })

  it('fails with TIDEMARK_DFS_REQUEST_FAILED where a key collides with a directory or a file', async () => {
    const store = new FsSnapshotStore({ root: tempDir() })
    await store.put('a/b', Buffer.from('file'))
    // S3 could hold both 'a/b' and 'a/b/c'; a file system cannot.
    await expect(store.put('a/b/c', Buffer.from('below a file'))).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED', retriable: false, details: { key: 'a/b/c' } })
    await expect(store.put('a', Buffer.from('over a directory'))).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED' })
    expect(await listKeys(store, '')).toEqual(['a/b'])
  })

  it('lists an empty or missing root as empty and ignores other file types', async () => {
    const root = tempDir()
    expect(await listKeys(new FsSnapshotStore({ root: join(root, 'missing') }), '')).toEqual([])
    await mkdir(join(root, 'empty-dir'))
    expect(await listKeys(new FsSnapshotStore({ root }), '')).toEqual([])
  })

  it('keeps reading an object that is replaced while it is read', async () => {
    const store = new FsSnapshotStore({ root: tempDir() })
    await store.put('k', Buffer.alloc(1000, 1))
    const stream = await store.get('k')
    await store.put('k', Buffer.alloc(10, 2))
    // The open handle still reads the old inode: rename replaced the name, not the bytes.
    expect(await readAll(stream)).toEqual(Buffer.alloc(1000, 1))
  })

  it('validates its root', () => {
    expect(() => new FsSnapshotStore({ root: 'relative/dir' })).toThrow(/root \('relative\/dir'\) must be an absolute path/)
    expect(() => new FsSnapshotStore({ root: '' })).toThrow(TypeError)
    expect(() => new FsSnapshotStore(undefined as unknown as { root: string })).toThrow(TypeError)
  })
})
