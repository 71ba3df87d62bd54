// The one test suite of the SnapshotStore interface; every implementation runs
// it (test/dfs/fs-store.test.ts, test/dfs/s3-store.test.ts).
import { createHash, randomBytes } from 'node:crypto'
import { Readable } from 'node:stream'
import { describe, expect, it, onTestFinished } from 'vitest'
import type { SnapshotStore } from '../../src/index.js'

export interface SuiteCapabilities {
  /** put() honours ifNoneMatch; also checked against store.capabilities. */
  conditionalPut: boolean
  /** put() honours ifMatch and reports etags; also checked against store.capabilities. */
  compareAndSwap: boolean
  /** How many keys the pagination test writes; S3 needs more than 1000 to cross a server page. */
  manyKeys: number
}

export interface SnapshotStoreSuiteOptions {
  name: string
  /** A fresh, empty store (a new directory, a new bucket prefix) for each test. */
  factory: () => Promise<{ store: SnapshotStore; cleanup: () => Promise<void> }>
  capabilities: SuiteCapabilities
}

const MiB = 1024 * 1024

export function snapshotStoreSuite({ name, factory, capabilities }: SnapshotStoreSuiteOptions): void {
  async function open(): Promise<SnapshotStore> {
    const { store, cleanup } = await factory()
    onTestFinished(async () => {
      await cleanup()
      await store.close()
    })
    return store
  }

  describe(`SnapshotStore suite: ${name}`, () => {
    it('reports its capabilities', async () => {
      const store = await open()
      expect(store.capabilities.conditionalPut).toBe(capabilities.conditionalPut)
      expect(store.capabilities.compareAndSwap).toBe(capabilities.compareAndSwap)
      expect(typeof store.url).toBe('string')
    })

    describe('put, get, head', () => {
      it('round-trips bytes and reports size and modification time', async () => {
        const store = await open()
        const before = Date.now()
        const body = Buffer.from('hello, snapshot store')
        await expect(store.put('jobs/a/object-1', body)).resolves.toMatchObject({ key: 'jobs/a/object-1', size: body.length })
        expect(await readAll(await store.get('jobs/a/object-1'))).toEqual(body)
        const info = await store.head('jobs/a/object-1')
        expect(info).toMatchObject({ key: 'jobs/a/object-1', size: body.length })
        // Server clocks (and S3's one-second resolution) may be a little off.
        expect(Math.abs(info!.lastModified.getTime() - before)).toBeLessThan(60_000)
      })

      it('stores an empty object', async () => {
        const store = await open()
        await expect(store.put('empty', new Uint8Array(0))).resolves.toMatchObject({ size: 0 })
        expect((await readAll(await store.get('empty'))).length).toBe(0)
        expect(await store.head('empty')).toMatchObject({ size: 0 })
      })

      it('streams a 20 MiB body of unknown length in and out (multipart on S3)', async () => {
        const store = await open()
        const { stream, digest, size } = randomStream(20 * MiB + 12_345)
        const result = await store.put('big/unknown-length', stream)
        expect(result.size).toBe(size)
        const back = await store.get('big/unknown-length')
        expect(await sha256(back)).toBe(digest())
        expect(await store.head('big/unknown-length')).toMatchObject({ size })
        if (result.etag !== undefined) expect(result.etag).toBe((await store.head('big/unknown-length'))?.etag)
      })

      it('streams a body of declared length', async () => {
        const store = await open()
        const { stream, digest, size } = randomStream(9 * MiB)
        await expect(store.put('big/known-length', stream, { contentLength: size })).resolves.toMatchObject({ size })
        expect(await sha256(await store.get('big/known-length'))).toBe(digest())
      })

      it('replaces an existing object', async () => {
        const store = await open()
        await store.put('k', Buffer.from('first version'))
        await store.put('k', Buffer.from('second'))
        expect((await readAll(await store.get('k'))).toString()).toBe('second')
        expect(await store.head('k')).toMatchObject({ size: 6 })
      })

      it('refuses a body whose length differs from contentLength and stores nothing', async () => {
        const store = await open()
        await expect(store.put('short', Readable.from([Buffer.alloc(10)]), { contentLength: 11 })).rejects.toThrow(RangeError)
        await expect(store.put('long', Readable.from([Buffer.alloc(10), Buffer.alloc(10)]), { contentLength: 15 })).rejects.toThrow(/contentLength \(15\)/)
        await expect(store.put('array', Buffer.alloc(3), { contentLength: 4 })).rejects.toThrow(RangeError)
        expect(await store.head('short')).toBeUndefined()
        expect(await store.head('long')).toBeUndefined()
        expect(await store.head('array')).toBeUndefined()
        expect(await listKeys(store, '')).toEqual([])
      })

      it('fails with the body stream\'s error and stores nothing', async () => {
        const store = await open()
        const failing = Readable.from((async function* () {
          yield randomBytes(6 * MiB)
          yield randomBytes(6 * MiB)
          throw new Error('source broke')
        })())
        await expect(store.put('broken', failing)).rejects.toThrow('source broke')
        expect(await store.head('broken')).toBeUndefined()
        expect(await listKeys(store, '')).toEqual([])
      })

      it('refuses a stream of strings', async () => {
        const store = await open()
        await expect(store.put('text', Readable.from(['not bytes']))).rejects.toThrow(TypeError)
        await expect(store.put('text', 'not bytes' as unknown as Uint8Array)).rejects.toThrow(TypeError)
      })

      it('head of a missing key, or of a key prefix, is undefined', async () => {
        const store = await open()
        await store.put('dir/file', Buffer.from('x'))
        expect(await store.head('missing')).toBeUndefined()
        expect(await store.head('dir')).toBeUndefined()
        expect(await store.head('dir/file/below')).toBeUndefined()
      })

      it('get of a missing key fails with TIDEMARK_DFS_NOT_FOUND', async () => {
        const store = await open()
        await store.put('dir/file', Buffer.from('x'))
        for (const key of ['missing', 'dir', 'dir/file/below']) {
          await expect(store.get(key)).rejects.toMatchObject({ name: 'TidemarkError', code: 'TIDEMARK_DFS_NOT_FOUND', retriable: false, details: { key } })
        }
      })
    })

    describe('ranges', () => {
      const body = Buffer.from('0123456789abcdefghij')

      it('reads inclusive, open-ended and clamped ranges', async () => {
        const store = await open()
        await store.put('r', body)
        const read = async (range: { start: number; end?: number }): Promise<string> => (await readAll(await store.get('r', { range }))).toString()
        expect(await read({ start: 0, end: 0 })).toBe('0')
        expect(await read({ start: 3, end: 7 })).toBe('34567')
        expect(await read({ start: 15 })).toBe('fghij')
        expect(await read({ start: 19 })).toBe('j')
        expect(await read({ start: 18, end: 1000 })).toBe('ij')
        expect(await read({ start: 0 })).toBe(body.toString())
      })

      it('refuses a start at or past the end, and malformed ranges', async () => {
        const store = await open()
        await store.put('r', body)
        await store.put('empty', Buffer.alloc(0))
        await expect(store.get('r', { range: { start: 20 } })).rejects.toThrow(RangeError)
        await expect(store.get('r', { range: { start: 25, end: 30 } })).rejects.toThrow(RangeError)
        await expect(store.get('empty', { range: { start: 0 } })).rejects.toThrow(RangeError)
        await expect(store.get('r', { range: { start: 5, end: 4 } })).rejects.toThrow(/range.end \(4\)/)
        await expect(store.get('r', { range: { start: -1 } })).rejects.toThrow(/range.start/)
        await expect(store.get('r', { range: { start: 1.5 } })).rejects.toThrow(RangeError)
        await expect(store.get('missing', { range: { start: 0 } })).rejects.toMatchObject({ code: 'TIDEMARK_DFS_NOT_FOUND' })
      })

      it('reads a range across the parts of a large object', async () => {
        const store = await open()
        const data = randomBytes(17 * MiB)
        await store.put('big', Readable.from(chunksOf(data, 100_003)))
        const start = 8 * MiB - 1000
        const end = 16 * MiB + 1000
        expect((await readAll(await store.get('big', { range: { start, end } }))).equals(data.subarray(start, end + 1))).toBe(true)
        expect((await readAll(await store.get('big', { range: { start: 17 * MiB - 5 } }))).equals(data.subarray(17 * MiB - 5))).toBe(true)
      })
    })

    describe('list', () => {
      it('lists by string prefix, in UTF-8 byte order of the keys', async () => {
        const store = await open()
        // '-' < '.' < '/' < '0' < 'a', and U+FFFD sorts below an emoji in UTF-8 but above it in UTF-16.
        const keys = ['a/b-file', 'a.x', 'a-b', 'a0', 'a/b/c', 'a/bc', 'ab', 'b', 'a/\u{1F600}', 'a/\uFFFD', 'a/z']
        for (const key of keys) await store.put(key, Buffer.from(key))
        const byteOrder = [...keys].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)))
        expect(byteOrder.indexOf('a/\uFFFD')).toBeLessThan(byteOrder.indexOf('a/\u{1F600}'))
        expect(await listKeys(store, '')).toEqual(byteOrder)
        expect(await listKeys(store, 'a/')).toEqual(byteOrder.filter((key) => key.startsWith('a/')))
        expect(await listKeys(store, 'a/b')).toEqual(['a/b-file', 'a/b/c', 'a/bc'])
        expect(await listKeys(store, 'a/b/')).toEqual(['a/b/c'])
        expect(await listKeys(store, 'a')).toEqual(byteOrder.filter((key) => key.startsWith('a')))
        expect(await listKeys(store, 'nothing/')).toEqual([])
        expect(await listKeys(store, 'a/b/c/')).toEqual([])
      })

      it('returns size and lastModified for each object', async () => {
        const store = await open()
        await store.put('p/one', Buffer.alloc(1))
        await store.put('p/three', Buffer.alloc(3))
        const listed = await collect(store.list('p/'))
        expect(listed.map(({ key, size }) => ({ key, size }))).toEqual([{ key: 'p/one', size: 1 }, { key: 'p/three', size: 3 }])
        for (const info of listed) expect(info.lastModified).toBeInstanceOf(Date)
      })

      it('honours startAfter and limit', async () => {
        const store = await open()
        for (const key of ['s/a', 's/b/1', 's/b/2', 's/c', 's/d']) await store.put(key, Buffer.from(key))
        expect(await listKeys(store, 's/', { startAfter: 's/b/1' })).toEqual(['s/b/2', 's/c', 's/d'])
        expect(await listKeys(store, 's/', { startAfter: 's/b' })).toEqual(['s/b/1', 's/b/2', 's/c', 's/d'])
        expect(await listKeys(store, 's/', { startAfter: 's/b0' })).toEqual(['s/c', 's/d'])
        expect(await listKeys(store, 's/', { startAfter: 's/a', limit: 2 })).toEqual(['s/b/1', 's/b/2'])
        expect(await listKeys(store, 's/', { startAfter: 's/d' })).toEqual([])
        expect(await listKeys(store, 's/', { limit: 1 })).toEqual(['s/a'])
      })

      it(`pages through ${capabilities.manyKeys} keys`, async () => {
        const store = await open()
        const keys = Array.from({ length: capabilities.manyKeys }, (_, i) => `many/${String(i).padStart(5, '0')}`)
        await inParallel(keys, 32, (key) => store.put(key, Buffer.from(key)))
        await store.put('many-other', Buffer.from('not under many/'))
        expect(await listKeys(store, 'many/')).toEqual(keys)
        // The way a caller pages by hand: startAfter = the last key of the previous page.
        const paged: string[] = []
        for (let page = await listKeys(store, 'many/', { limit: 250 }); page.length > 0; page = await listKeys(store, 'many/', { limit: 250, startAfter: paged.at(-1)! })) {
          paged.push(...page)
        }
        expect(paged).toEqual(keys)
        await store.deleteMany(keys)
        expect(await listKeys(store, '')).toEqual(['many-other'])
      }, 120_000)

      it('stops reading when the caller stops iterating', async () => {
        const store = await open()
        for (const key of ['x/1', 'x/2', 'x/3']) await store.put(key, Buffer.from(key))
        const seen: string[] = []
        for await (const info of store.list('x/')) {
          seen.push(info.key)
          if (seen.length === 2) break
        }
        expect(seen).toEqual(['x/1', 'x/2'])
      })
    })

    describe('deleteMany', () => {
      it('deletes the keys, skips missing ones and duplicates', async () => {
        const store = await open()
        for (const key of ['d/1', 'd/2', 'd/3', 'd/sub/4']) await store.put(key, Buffer.from(key))
        await store.deleteMany(['d/1', 'd/sub/4', 'd/missing', 'd/1', 'nowhere/at/all'])
        expect(await listKeys(store, '')).toEqual(['d/2', 'd/3'])
        await expect(store.get('d/1')).rejects.toMatchObject({ code: 'TIDEMARK_DFS_NOT_FOUND' })
        await store.deleteMany([])
        await store.deleteMany(['d/2', 'd/3'])
        expect(await listKeys(store, '')).toEqual([])
      })

      it('leaves keys that share a prefix with a deleted one', async () => {
        const store = await open()
        for (const key of ['e/a-1', 'e/a/b', 'e/ab']) await store.put(key, Buffer.from(key))
        // 'e/a' is no object, only a prefix of one.
        await store.deleteMany(['e/a', 'e/a-1'])
        expect(await listKeys(store, 'e/')).toEqual(['e/a/b', 'e/ab'])
      })
    })

    // Optional in the interface; GC calls it where a store has it.
    describe('sweepTemporaryFiles', () => {
      it('removes no object and checks its prefix', async () => {
        const store = await open()
        if (store.sweepTemporaryFiles === undefined) return
        for (const key of ['s/a', 's/b/c', 't/d']) await store.put(key, Buffer.from(key))
        expect(await store.sweepTemporaryFiles('s/')).toBe(0)
        expect(await store.sweepTemporaryFiles('')).toBe(0)
        expect(await listKeys(store, '')).toEqual(['s/a', 's/b/c', 't/d'])
        await expect(store.sweepTemporaryFiles('/s')).rejects.toThrow(RangeError)
      })
    })

    // A capability flag, as in abstract-level's suite: a store without
    // conditional puts (say, an S3-compatible server that ignores If-None-Match)
    // declares so (the test above checks the declaration), and then it must
    // refuse ifNoneMatch instead of silently overwriting. Nothing is skipped.
    describe('ifNoneMatch', () => {
      if (!capabilities.conditionalPut) {
        it('is refused with a RangeError by a store without conditional puts', async () => {
          const store = await open()
          await expect(store.put('fence/manifest', Buffer.from('first'), { ifNoneMatch: true })).rejects.toThrow(RangeError)
          expect(await store.head('fence/manifest')).toBeUndefined()
        })
        return
      }

      it('creates a free key and refuses a taken one, keeping the first object', async () => {
        const store = await open()
        await expect(store.put('fence/manifest', Buffer.from('first'), { ifNoneMatch: true })).resolves.toMatchObject({ size: 5 })
        await expect(store.put('fence/manifest', Buffer.from('second'), { ifNoneMatch: true })).rejects.toMatchObject({
          name: 'TidemarkError', code: 'TIDEMARK_DFS_OBJECT_EXISTS', retriable: false, details: { key: 'fence/manifest' },
        })
        await expect(store.put('fence/streamed', Readable.from([Buffer.from('a'), Buffer.from('b')]), { ifNoneMatch: true })).resolves.toMatchObject({ size: 2 })
        await expect(store.put('fence/streamed', Readable.from([Buffer.from('c')]), { ifNoneMatch: true })).rejects.toMatchObject({ code: 'TIDEMARK_DFS_OBJECT_EXISTS' })
        expect((await readAll(await store.get('fence/manifest'))).toString()).toBe('first')
        expect((await readAll(await store.get('fence/streamed'))).toString()).toBe('ab')
        expect(await listKeys(store, '')).toEqual(['fence/manifest', 'fence/streamed'])
      })

      it('lets exactly one of concurrent creators win', async () => {
        const store = await open()
        const results = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => store.put('race/epoch-7', Buffer.from(`writer ${i}`), { ifNoneMatch: true })))
        const won = results.flatMap((result, i) => (result.status === 'fulfilled' ? [i] : []))
        expect(won).toHaveLength(1)
        for (const result of results) {
          if (result.status === 'rejected') expect(result.reason).toMatchObject({ code: 'TIDEMARK_DFS_OBJECT_EXISTS' })
        }
        expect((await readAll(await store.get('race/epoch-7'))).toString()).toBe(`writer ${won[0]}`)
      })
    })

    describe('ifMatch', () => {
      if (!capabilities.compareAndSwap) {
        it('is refused with a RangeError by a store without compare-and-swap', async () => {
          const store = await open()
          await store.put('claim', Buffer.from('first'))
          await expect(store.put('claim', Buffer.from('second'), { ifMatch: 'abc' })).rejects.toThrow(RangeError)
          expect((await readAll(await store.get('claim'))).toString()).toBe('first')
        })
        return
      }

      it('reports the same etag from put and head, a new one for each new content', async () => {
        const store = await open()
        const first = await store.put('claim', Buffer.from('{"epoch":1}'))
        expect(first.etag).toMatch(/^[^"]+$/)
        expect((await store.head('claim'))?.etag).toBe(first.etag)
        const second = await store.put('claim', Buffer.from('{"epoch":2}'))
        expect(second.etag).not.toBe(first.etag)
        expect((await store.head('claim'))?.etag).toBe(second.etag)
        const created = await store.put('created', Buffer.from('x'), { ifNoneMatch: true })
        expect(created.etag).toBe((await store.head('created'))?.etag)
      })

      it('replaces the object when the etag matches, and returns the new etag', async () => {
        const store = await open()
        const { etag } = await store.put('claim', Buffer.from('owner a'), { ifNoneMatch: true })
        const swapped = await store.put('claim', Buffer.from('owner b'), { ifMatch: etag! })
        expect(swapped).toMatchObject({ key: 'claim', size: 7 })
        expect(swapped.etag).not.toBe(etag)
        expect((await store.head('claim'))?.etag).toBe(swapped.etag)
        expect((await readAll(await store.get('claim'))).toString()).toBe('owner b')
        // The new etag is the one to swap against next; streamed bodies work too.
        await store.put('claim', Readable.from([Buffer.from('owner '), Buffer.from('c')]), { ifMatch: swapped.etag! })
        expect((await readAll(await store.get('claim'))).toString()).toBe('owner c')
      })

      it('fails with TIDEMARK_DFS_PRECONDITION_FAILED on another etag or a missing object, storing nothing', async () => {
        const store = await open()
        const { etag: old } = await store.put('claim', Buffer.from('version 1'))
        const { etag: current } = await store.put('claim', Buffer.from('version 2'))
        const failed = { name: 'TidemarkError', code: 'TIDEMARK_DFS_PRECONDITION_FAILED', retriable: false, details: { key: 'claim' } }
        await expect(store.put('claim', Buffer.from('stale writer'), { ifMatch: old! })).rejects.toMatchObject(failed)
        await expect(store.put('claim', Buffer.from('made up'), { ifMatch: '0123456789abcdef0123456789abcdef' })).rejects.toMatchObject(failed)
        await expect(store.put('missing', Buffer.from('no one'), { ifMatch: current! })).rejects.toMatchObject({ ...failed, details: { key: 'missing' } })
        expect((await readAll(await store.get('claim'))).toString()).toBe('version 2')
        expect((await store.head('claim'))?.etag).toBe(current)
        expect(await listKeys(store, '')).toEqual(['claim'])
      })

      it('lets exactly one of concurrent swaps against the same etag win', async () => {
        const store = await open()
        const { etag } = await store.put('race/owner.json', Buffer.from('epoch 1'), { ifNoneMatch: true })
        const results = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => store.put('race/owner.json', Buffer.from(`writer ${i}`), { ifMatch: etag! })))
        const won = results.flatMap((result, i) => (result.status === 'fulfilled' ? [i] : []))
        expect(won).toHaveLength(1)
        for (const result of results) {
          if (result.status === 'rejected') expect(result.reason).toMatchObject({ code: 'TIDEMARK_DFS_PRECONDITION_FAILED' })
        }
        const winner = results[won[0]!] as PromiseFulfilledResult<{ etag?: string }>
        expect((await readAll(await store.get('race/owner.json'))).toString()).toBe(`writer ${won[0]}`)
        expect((await store.head('race/owner.json'))?.etag).toBe(winner.value.etag)
        expect(await listKeys(store, 'race/')).toEqual(['race/owner.json'])
      })

      it('refuses malformed ifMatch arguments at the call', async () => {
        const store = await open()
        const { etag } = await store.put('claim', Buffer.from('x'))
        await expect(store.put('claim', Buffer.from('y'), { ifMatch: '' })).rejects.toThrow(TypeError)
        await expect(store.put('claim', Buffer.from('y'), { ifMatch: 42 as unknown as string })).rejects.toThrow(TypeError)
        await expect(store.put('claim', Buffer.from('y'), { ifMatch: `"${etag!}"` })).rejects.toThrow(/without quotes/)
        await expect(store.put('claim', Buffer.from('y'), { ifMatch: etag!, ifNoneMatch: true })).rejects.toThrow(/exclude each other/)
        expect((await readAll(await store.get('claim'))).toString()).toBe('x')
      })
    })

    describe('argument checks', () => {
      const badKeys = ['', '/abs', 'a//b', 'a/', 'a/../b', '..', '.', 'a/./b', 'a\u0000b', 'tab\there', '.tidemark-tmp-123', 'a/.tidemark-tmp']

      it('refuses invalid keys with a RangeError naming the key, in every method', async () => {
        const store = await open()
        for (const key of badKeys) {
          const named = new RegExp(`key '${escapeRegExp(key.replace('\u0000', '\\u0000').replace('\t', '\\u0009'))}'`)
          await expect(store.put(key, Buffer.from('x'))).rejects.toThrow(named)
          await expect(store.get(key)).rejects.toThrow(RangeError)
          await expect(store.head(key)).rejects.toThrow(RangeError)
          await expect(store.deleteMany(['fine', key])).rejects.toThrow(RangeError)
        }
        await expect(store.put(42 as unknown as string, Buffer.from('x'))).rejects.toThrow(TypeError)
        await expect(store.deleteMany('a' as unknown as string[])).rejects.toThrow(TypeError)
        expect(await listKeys(store, '')).toEqual([])
      })

      it('accepts unusual but valid keys', async () => {
        const store = await open()
        const keys = ['..a', 'a..', '.hidden', 'sp ace', 'ünï/cødé', 'x=1&y=2', 'percent%20', '\u{1F600}']
        for (const key of keys) await store.put(key, Buffer.from(key))
        for (const key of keys) expect((await readAll(await store.get(key))).toString()).toBe(key)
        expect((await listKeys(store, '')).sort()).toEqual([...keys].sort())
      })

      it('refuses invalid list arguments at the call', async () => {
        const store = await open()
        expect(() => store.list('/a')).toThrow(/prefix '\/a'/)
        expect(() => store.list('a//')).toThrow(RangeError)
        expect(() => store.list('a/../')).toThrow(RangeError)
        expect(() => store.list('a', { limit: 0 })).toThrow(/limit \(0\)/)
        expect(() => store.list(undefined as unknown as string)).toThrow(TypeError)
        // A partial last segment is a prefix, not a key.
        await expect(collect(store.list('a/.'))).resolves.toEqual([])
        await expect(collect(store.list('a/..'))).resolves.toEqual([])
      })

      it('refuses use after close with TIDEMARK_DFS_CLOSED', async () => {
        const { store, cleanup } = await factory()
        await store.put('k', Buffer.from('v'))
        await cleanup()
        await store.close()
        await store.close()
        const closed = { name: 'TidemarkError', code: 'TIDEMARK_DFS_CLOSED', retriable: false }
        await expect(store.put('k', Buffer.from('v'))).rejects.toMatchObject(closed)
        await expect(store.get('k')).rejects.toMatchObject(closed)
        await expect(store.head('k')).rejects.toMatchObject(closed)
        await expect(store.deleteMany(['k'])).rejects.toMatchObject(closed)
        let thrown: unknown
        try {
          store.list('')
        } catch (err) {
          thrown = err
        }
        expect(thrown).toMatchObject(closed)
      })
    })
  })
}

export async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

async function sha256(stream: Readable): Promise<string> {
  const hash = createHash('sha256')
  for await (const chunk of stream) hash.update(chunk as Buffer)
  return hash.digest('hex')
}

/** A stream of `size` random bytes in odd-sized chunks, and the sha256 of what it produced. */
export function randomStream(size: number): { stream: Readable; digest: () => string; size: number } {
  const hash = createHash('sha256')
  let left = size
  const stream = Readable.from((async function* () {
    while (left > 0) {
      const chunk = randomBytes(Math.min(left, 65_537))
      left -= chunk.length
      hash.update(chunk)
      yield chunk
    }
  })())
  return { stream, digest: () => hash.digest('hex'), size }
}

function* chunksOf(data: Buffer, size: number): Generator<Buffer> {
  for (let i = 0; i < data.length; i += size) yield data.subarray(i, i + size)
}

export async function listKeys(store: SnapshotStore, prefix: string, options?: { startAfter?: string; limit?: number }): Promise<string[]> {
  return (await collect(store.list(prefix, options))).map((info) => info.key)
}

async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const items: T[] = []
  for await (const item of iterable) items.push(item)
  return items
}

export async function inParallel<T>(items: readonly T[], concurrency: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, async () => {
    while (next < items.length) await fn(items[next++]!)
  }))
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}
