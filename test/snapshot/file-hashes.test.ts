import { createHash } from 'node:crypto'
import { stat, utimes, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import type { CheckpointFile } from '../../src/snapshot/checkpoint.js'
import { FileHashCache } from '../../src/snapshot/file-hashes.js'
import { tempDir } from '../helpers/tmp.js'

const sha = (text: string): string => createHash('sha256').update(text).digest('hex')

async function describeFile(dir: string, name: string): Promise<CheckpointFile> {
  const path = join(dir, name)
  const info = await stat(path)
  return { name, path, size: info.size, ino: info.ino, dev: info.dev, mtimeMs: info.mtimeMs }
}

/** Rewrites a file in place (same inode, same size) and puts its mtime back: the worst case of a reused inode. */
async function rewriteKeepingStat(path: string, text: string): Promise<void> {
  const before = await stat(path)
  await writeFile(path, text)
  await utimes(path, before.atime, before.mtime)
}

describe('file hash cache', () => {
  it('hashes CURRENT every time, even when name, size, device, inode and mtime match the last one', async () => {
    const dir = tempDir('tidemark-hashes-')
    await writeFile(join(dir, 'CURRENT'), 'MANIFEST-000012\n')
    const cache = new FileHashCache()
    expect(await cache.hash(await describeFile(dir, 'CURRENT'))).toBe(sha('MANIFEST-000012\n'))
    await rewriteKeepingStat(join(dir, 'CURRENT'), 'MANIFEST-000014\n')
    const again = await describeFile(dir, 'CURRENT')
    expect(again.ino).toBe((await describeFile(dir, 'CURRENT')).ino)
    expect(await cache.hash(again)).toBe(sha('MANIFEST-000014\n'))
  })

  it('remembers nothing for the MANIFEST and the logs, also when told a hash', async () => {
    const dir = tempDir('tidemark-hashes-')
    for (const name of ['MANIFEST-000003', '000004.log']) {
      await writeFile(join(dir, name), 'one')
      const cache = new FileHashCache()
      cache.remember(await describeFile(dir, name), sha('one'))
      await rewriteKeepingStat(join(dir, name), 'two')
      expect(await cache.hash(await describeFile(dir, name))).toBe(sha('two'))
    }
  })

  it('trusts an unchanged table file and hashes it again when its mtime, size or inode changed, or after retain() dropped it', async () => {
    const dir = tempDir('tidemark-hashes-')
    const path = join(dir, '000007.ldb')
    await writeFile(path, 'table bytes')
    const cache = new FileHashCache()
    const first = await describeFile(dir, '000007.ldb')
    cache.remember(first, 'remembered')
    expect(await cache.hash(first)).toBe('remembered')
    expect(await cache.hash({ ...first, mtimeMs: first.mtimeMs + 1 })).toBe(sha('table bytes'))
    cache.remember(first, 'remembered')
    expect(await cache.hash({ ...first, ino: first.ino + 1 })).toBe(sha('table bytes'))
    cache.remember(first, 'remembered')
    cache.retain([])
    expect(await cache.hash(first)).toBe(sha('table bytes'))
  })

  it('seed() binds a known hash to a table file as it is now; a file of another size, a missing one or a later change is not trusted', async () => {
    const dir = tempDir('tidemark-hashes-')
    await writeFile(join(dir, '000007.ldb'), 'table bytes')
    await writeFile(join(dir, '000008.ldb'), 'other bytes')
    await writeFile(join(dir, '000009.log'), 'log bytes')
    const cache = new FileHashCache()
    await cache.seed(dir, [
      { name: '000007.ldb', size: 11, sha256: 'from the manifest' },
      { name: '000008.ldb', size: 99, sha256: 'wrong size' },
      { name: '000010.ldb', size: 11, sha256: 'missing' },
      { name: '000009.log', size: 9, sha256: 'a log' },
    ])
    // Not read: the seeded value comes back.
    expect(await cache.hash(await describeFile(dir, '000007.ldb'))).toBe('from the manifest')
    expect(await cache.hash(await describeFile(dir, '000008.ldb'))).toBe(sha('other bytes'))
    expect(await cache.hash(await describeFile(dir, '000009.log'))).toBe(sha('log bytes'))
    await writeFile(join(dir, '000007.ldb'), 'table BYTES') // same size, new mtime
    await utimes(join(dir, '000007.ldb'), new Date(), new Date(Date.now() + 5000))
    expect(await cache.hash(await describeFile(dir, '000007.ldb'))).toBe(sha('table BYTES'))
  })

  it('warm() hashes a table file ahead of the snapshot that needs it, unless its size differs', async () => {
    const dir = tempDir('tidemark-hashes-')
    const path = join(dir, '000007.ldb')
    await writeFile(path, 'table bytes')
    // A whole-second mtime, which rewriteKeepingStat can put back exactly.
    await utimes(path, new Date(1_700_000_000_000), new Date(1_700_000_000_000))
    const cache = new FileHashCache()
    await cache.warm(dir, '000007.ldb', 11)
    await cache.warm(dir, '000404.ldb', 11) // gone: nothing, no error
    // The cached hash is used: the content changed behind a kept stat, and the old hash comes back.
    await rewriteKeepingStat(path, 'TABLE BYTES')
    expect(await cache.hash(await describeFile(dir, '000007.ldb'))).toBe(sha('table bytes'))
    const other = new FileHashCache()
    await other.warm(dir, '000007.ldb', 12)
    expect(await other.hash(await describeFile(dir, '000007.ldb'))).toBe(sha('TABLE BYTES'))
  })
})
