import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { FsSnapshotStore, openSnapshotStore } from '../../src/index.js'
import { S3SnapshotStore } from '../../connectors/s3/index.js'
import { tempDir } from '../helpers/tmp.js'

describe('openSnapshotStore', () => {
  it('opens a file:// URL as the file-system store, and reopens it from store.url', async () => {
    const root = join(tempDir(), 'snapshots')
    const store = await openSnapshotStore(pathToFileURL(root).href)
    expect(store).toBeInstanceOf(FsSnapshotStore)
    await store.put('k', Buffer.from('v'))
    const again = await openSnapshotStore(store.url)
    expect(await again.head('k')).toMatchObject({ size: 1 })
  })

  it('opens an s3:// URL with the connector, taking bucket, prefix and query parameters', async () => {
    const store = await openSnapshotStore('s3://my-bucket/jobs/j1?endpoint=http://127.0.0.1:9000&region=eu-west-1&forcePathStyle=true', {
      s3: { credentials: { accessKeyId: 'id', secretAccessKey: 'secret' }, partSize: 16 * 1024 * 1024 },
    })
    expect(store).toBeInstanceOf(S3SnapshotStore)
    const { options } = store as S3SnapshotStore
    expect(options).toMatchObject({ bucket: 'my-bucket', prefix: 'jobs/j1/', endpoint: 'http://127.0.0.1:9000', region: 'eu-west-1', forcePathStyle: true, partSize: 16 * 1024 * 1024 })
    expect(store.url).toBe('s3://my-bucket/jobs/j1?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=eu-west-1&forcePathStyle=true')
    const again = await openSnapshotStore(store.url)
    expect((again as S3SnapshotStore).options).toMatchObject({ bucket: 'my-bucket', prefix: 'jobs/j1/', endpoint: 'http://127.0.0.1:9000', region: 'eu-west-1', forcePathStyle: true })
    expect(((await openSnapshotStore('s3://bucket-only')) as S3SnapshotStore).options).toMatchObject({ bucket: 'bucket-only', prefix: '', forcePathStyle: false })
    await Promise.all([store.close(), again.close()])
  })

  it('refuses what it cannot open with a RangeError naming the URL', async () => {
    await expect(openSnapshotStore('ftp://host/dir')).rejects.toThrow(/'ftp:\/\/host\/dir' has an unsupported scheme 'ftp:'/)
    await expect(openSnapshotStore('not a url')).rejects.toThrow(/'not a url' is not a URL/)
    await expect(openSnapshotStore('file://server/share')).rejects.toThrow(/'file:\/\/server\/share' names the host 'server'/)
    await expect(openSnapshotStore('file://relative/dir')).rejects.toThrow(RangeError)
    await expect(openSnapshotStore('file:///tmp/x?sync=1')).rejects.toThrow(RangeError)
    await expect(openSnapshotStore('s3://bucket/p?endpont=http://x')).rejects.toThrow(/unknown parameter 'endpont'/)
    await expect(openSnapshotStore('s3://bucket/p?forcePathStyle=yes')).rejects.toThrow(/forcePathStyle/)
    await expect(openSnapshotStore('s3://key:secret@bucket/p')).rejects.toThrow(/must not carry credentials/)
    await expect(openSnapshotStore('s3://b/p')).rejects.toThrow(/bucket \('b'\)/)
    await expect(openSnapshotStore(42 as unknown as string)).rejects.toThrow(TypeError)
  })

  it('refuses a file URL that is not absolute instead of reading it from the file-system root', async () => {
    for (const url of ['file:relative/dir', 'file:./dir', 'file:../dir', 'FILE:dir']) {
      await expect(openSnapshotStore(url)).rejects.toThrow(new RangeError(`snapshot store URL '${url}' is not absolute; expected file:///absolute/path`))
    }
    expect((await openSnapshotStore('file:/abs/dir')).url).toBe('file:///abs/dir')
    expect((await openSnapshotStore('file://localhost/abs/dir')).url).toBe('file:///abs/dir')
  })

  it('with mustExist, refuses a file:// root that does not exist or is not a directory, and creates nothing', async () => {
    const dir = tempDir()
    const missing = join(dir, 'missing')
    await expect(openSnapshotStore(pathToFileURL(missing).href, { mustExist: true })).rejects.toMatchObject({
      code: 'TIDEMARK_DFS_STORE_NOT_FOUND', retriable: false, details: { path: missing },
    })
    await expect(openSnapshotStore(pathToFileURL(join(missing, 'below')).href, { mustExist: true })).rejects.toMatchObject({ code: 'TIDEMARK_DFS_STORE_NOT_FOUND' })
    const file = join(dir, 'file')
    writeFileSync(file, 'not a store')
    await expect(openSnapshotStore(pathToFileURL(file).href, { mustExist: true })).rejects.toThrow(/snapshot store file:\/\/.*\/file does not exist: .* is not a directory/)
    await expect(openSnapshotStore(pathToFileURL(join(file, 'below')).href, { mustExist: true })).rejects.toMatchObject({ code: 'TIDEMARK_DFS_STORE_NOT_FOUND' })
    expect(await openSnapshotStore(pathToFileURL(dir).href, { mustExist: true })).toBeInstanceOf(FsSnapshotStore)
    expect(existsSync(missing)).toBe(false)
    // Writers leave it off: the root is created on the first put.
    await (await openSnapshotStore(pathToFileURL(missing).href)).put('k', Buffer.from('v'))
    expect(await (await openSnapshotStore(pathToFileURL(missing).href, { mustExist: true })).head('k')).toMatchObject({ size: 1 })
    await expect(openSnapshotStore(pathToFileURL(dir).href, { mustExist: 'yes' as unknown as boolean })).rejects.toThrow(TypeError)
  })
})
