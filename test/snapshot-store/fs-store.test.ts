import { mkdir, open, readdir, utimes, writeFile } from 'node:fs/promises'
import { Readable } from 'node:stream'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { FsSnapshotStore } from '../../src/index.js'
import { makeTempDir, tempDir } from '../helpers/tmp.js'
import { snapshotStoreSuite } from '../../src/testing/index.js'
import { listKeys, readAll } from '../../src/testing/streams.js'

snapshotStoreSuite({
  test: it,
  describe,
  name: 'file system',
  factory: async () => {
    const dir = makeTempDir('tidemark-dfs-')
    return { store: new FsSnapshotStore({ root: join(dir.path, 'store') }), cleanup: () => dir.cleanup() }
  },
  capabilities: { conditionalPut: true, compareAndSwap: true, manyKeys: 1200 },
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

  it('hides the lock of a compare-and-swap put and removes it afterwards', async () => {
    const root = tempDir()
    const store = new FsSnapshotStore({ root })
    const { etag } = await store.put('p/owner.json', Buffer.from('a'))
    await store.put('p/owner.json', Buffer.from('b'), { ifMatch: etag! })
    expect(await readdir(join(root, 'p'))).toEqual(['owner.json'])
    await writeFile(join(root, 'p', '.tidemark-tmp-lock-owner.json'), '')
    expect(await listKeys(store, '')).toEqual(['p/owner.json'])
  })

  it('waits for a live lock, and breaks one left by a dead process once it is older than lockStaleMs', async () => {
    const root = tempDir()
    const store = new FsSnapshotStore({ root, lockStaleMs: 60_000 })
    const { etag } = await store.put('p/owner.json', Buffer.from('a'))
    // What a process killed between taking the lock and removing it leaves.
    const lock = join(root, 'p', '.tidemark-tmp-lock-owner.json')
    await writeFile(lock, '')
    let settled = false
    let bodyRead!: () => void
    const read = new Promise<void>((resolve) => { bodyRead = resolve })
    const body = Readable.from((async function* () {
      yield Buffer.from('b')
      bodyRead()
    })())
    const swapping = store.put('p/owner.json', body, { ifMatch: etag! }).finally(() => { settled = true })
    // Past its body, the put syncs and closes its temporary file and takes
    // the lock: after as many syncs of ours, it is at the lock (a minute from
    // stale), and waits there, however slow the machine.
    await read
    const scratch = join(root, 'scratch')
    for (let i = 0; i < 10; i++) {
      const file = await open(scratch, 'w')
      await file.write(Buffer.from([i]))
      await file.sync()
      await file.close()
      await readdir(join(root, 'p'))
    }
    expect(settled).toBe(false)
    expect((await readAll(await store.get('p/owner.json'))).toString()).toBe('a')
    // The lock ages past lockStaleMs (its mtime is what is compared): the waiting put breaks it.
    await utimes(lock, new Date(Date.now() - 120_000), new Date(Date.now() - 120_000))
    const swapped = await swapping
    expect((await readAll(await store.get('p/owner.json'))).toString()).toBe('b')
    expect(await readdir(join(root, 'p'))).toEqual(['owner.json'])
    // A lock older than lockStaleMs from the start is broken at once.
    await writeFile(lock, '')
    await utimes(lock, new Date(Date.now() - 120_000), new Date(Date.now() - 120_000))
    await new FsSnapshotStore({ root }).put('p/owner.json', Buffer.from('c'), { ifMatch: swapped.etag! })
    expect((await readAll(await store.get('p/owner.json'))).toString()).toBe('c')
    expect(await readdir(join(root, 'p'))).toEqual(['owner.json'])
  })

  it('gives large objects an etag from stat that put and head agree on', async () => {
    const store = new FsSnapshotStore({ root: tempDir() })
    const first = await store.put('big', Buffer.alloc(100_000, 1))
    expect(first.etag).toMatch(/^s-/)
    expect((await store.head('big'))?.etag).toBe(first.etag)
    const second = await store.put('big', Buffer.alloc(100_000, 2), { ifMatch: first.etag! })
    expect(second.etag).not.toBe(first.etag)
    await expect(store.put('big', Buffer.alloc(10), { ifMatch: first.etag! })).rejects.toMatchObject({ code: 'TIDEMARK_DFS_PRECONDITION_FAILED' })
  })

  it('validates its root', () => {
    expect(() => new FsSnapshotStore({ root: 'relative/dir' })).toThrow(/root \('relative\/dir'\) must be an absolute path/)
    expect(() => new FsSnapshotStore({ root: '' })).toThrow(TypeError)
    expect(() => new FsSnapshotStore(undefined as unknown as { root: string })).toThrow(TypeError)
    expect(() => new FsSnapshotStore({ root: '/tmp/x', lockStaleMs: 0 })).toThrow(/lockStaleMs \(0\)/)
  })
})
