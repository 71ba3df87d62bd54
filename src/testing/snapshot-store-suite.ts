// The SnapshotStore contract, run against every implementation: Tidemark's
// (FsSnapshotStore, S3SnapshotStore) and yours. See docs/testing.md.
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { Readable } from 'node:stream'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { mapLimit } from '../util/index.js'
import { assertMatch, checkRunner, Registrar, rejectsMatching, throwsSync, type SuiteRunner } from './runner.js'
import { chunksOf, collect, listKeys, randomStream, readAll, sha256 } from './streams.js'

export interface SnapshotStoreSuiteCapabilities {
  /** put() honours ifNoneMatch; also checked against store.capabilities. */
  conditionalPut: boolean
  /** put() honours ifMatch and reports etags; also checked against store.capabilities. */
  compareAndSwap: boolean
  /** How many keys the pagination test writes; S3 needs more than 1000 to cross a server page. Default 1200. */
  manyKeys?: number
}

export interface SnapshotStoreSuiteOptions extends SuiteRunner {
  /** Names the group of tests. */
  name: string
  /** A fresh, empty store (a new directory, a new bucket prefix) for each test, and how to remove what it holds. The suite closes the store. */
  factory: () => Promise<{ store: SnapshotStore; cleanup?: () => Promise<void> }>
  capabilities: SnapshotStoreSuiteCapabilities
}

const MiB = 1024 * 1024

/**
 * Registers the SnapshotStore contract's tests on your runner: put, get
 * (with ranges), head, list, deleteMany, conditional puts as the store's
 * capabilities declare them, argument checks and close.
 */
export function snapshotStoreSuite(options: SnapshotStoreSuiteOptions): void {
  const runner = checkRunner(options, 'snapshotStoreSuite')
  const { name, factory, capabilities } = options
  if (typeof name !== 'string') throw new TypeError('snapshotStoreSuite: options.name must be a string')
  if (typeof factory !== 'function') throw new TypeError('snapshotStoreSuite: options.factory must be a function returning { store, cleanup? }')
  if (capabilities === null || typeof capabilities !== 'object' || typeof capabilities.conditionalPut !== 'boolean' || typeof capabilities.compareAndSwap !== 'boolean') {
    throw new TypeError('snapshotStoreSuite: options.capabilities must be { conditionalPut: boolean, compareAndSwap: boolean, manyKeys?: number }')
  }
  const manyKeys = capabilities.manyKeys ?? 1200
  if (!Number.isSafeInteger(manyKeys) || manyKeys < 1) throw new RangeError(`snapshotStoreSuite: options.capabilities.manyKeys must be a positive integer, got ${manyKeys}`)
  const r = new Registrar(runner)
  const it = r.test.bind(r)
  const describe = r.group.bind(r)

  async function open(scope: { defer(fn: () => unknown): void }): Promise<SnapshotStore> {
    const { store, cleanup } = await factory()
    scope.defer(async () => {
      await cleanup?.()
      await store.close()
    })
    return store
  }

  describe(`SnapshotStore suite: ${name}`, () => {
    it('reports its capabilities', async (t) => {
      const store = await open(t)
      assert.equal(store.capabilities.conditionalPut, capabilities.conditionalPut)
      assert.equal(store.capabilities.compareAndSwap, capabilities.compareAndSwap)
      assert.equal(typeof store.url, 'string')
    })

    describe('put, get, head', () => {
      it('round-trips bytes and reports size and modification time', async (t) => {
        const store = await open(t)
        const before = Date.now()
        const body = Buffer.from('hello, snapshot store')
        assertMatch(await store.put('jobs/a/object-1', body), { key: 'jobs/a/object-1', size: body.length })
        assert.deepEqual(await readAll(await store.get('jobs/a/object-1')), body)
        const info = await store.head('jobs/a/object-1')
        assertMatch(info, { key: 'jobs/a/object-1', size: body.length })
        // Server clocks (and S3's one-second resolution) may be a little off.
        assert.ok(Math.abs(info!.lastModified.getTime() - before) < 60_000, `lastModified ${info!.lastModified.toISOString()} is not about now`)
      })

      it('stores an empty object', async (t) => {
        const store = await open(t)
        assertMatch(await store.put('empty', new Uint8Array(0)), { size: 0 })
        assert.equal((await readAll(await store.get('empty'))).length, 0)
        assertMatch(await store.head('empty'), { size: 0 })
      })

      it('streams a 20 MiB body of unknown length in and out (multipart on S3)', async (t) => {
        const store = await open(t)
        const { stream, digest, size } = randomStream(20 * MiB + 12_345)
        const result = await store.put('big/unknown-length', stream)
        assert.equal(result.size, size)
        const back = await store.get('big/unknown-length')
        assert.equal(await sha256(back), digest())
        assertMatch(await store.head('big/unknown-length'), { size })
        if (result.etag !== undefined) assert.equal(result.etag, (await store.head('big/unknown-length'))?.etag)
      })

      it('streams a body of declared length', async (t) => {
        const store = await open(t)
        const { stream, digest, size } = randomStream(9 * MiB)
        assertMatch(await store.put('big/known-length', stream, { contentLength: size }), { size })
        assert.equal(await sha256(await store.get('big/known-length')), digest())
      })

      it('replaces an existing object', async (t) => {
        const store = await open(t)
        await store.put('k', Buffer.from('first version'))
        await store.put('k', Buffer.from('second'))
        assert.equal((await readAll(await store.get('k'))).toString(), 'second')
        assertMatch(await store.head('k'), { size: 6 })
      })

      it('refuses a body whose length differs from contentLength and stores nothing', async (t) => {
        const store = await open(t)
        await assert.rejects(store.put('short', Readable.from([Buffer.alloc(10)]), { contentLength: 11 }), RangeError)
        await assert.rejects(store.put('long', Readable.from([Buffer.alloc(10), Buffer.alloc(10)]), { contentLength: 15 }), /contentLength \(15\)/)
        await assert.rejects(store.put('array', Buffer.alloc(3), { contentLength: 4 }), RangeError)
        assert.equal(await store.head('short'), undefined)
        assert.equal(await store.head('long'), undefined)
        assert.equal(await store.head('array'), undefined)
        assert.deepEqual(await listKeys(store, ''), [])
      })

      it('fails with the body stream\'s error and stores nothing', async (t) => {
        const store = await open(t)
        const failing = Readable.from((async function* () {
          yield randomBytes(6 * MiB)
          yield randomBytes(6 * MiB)
          throw new Error('source broke')
        })())
        await assert.rejects(store.put('broken', failing), /source broke/)
        assert.equal(await store.head('broken'), undefined)
        assert.deepEqual(await listKeys(store, ''), [])
      })

      it('refuses a stream of strings', async (t) => {
        const store = await open(t)
        await assert.rejects(store.put('text', Readable.from(['not bytes'])), TypeError)
        await assert.rejects(store.put('text', 'not bytes' as unknown as Uint8Array), TypeError)
      })

      it('head of a missing key, or of a key prefix, is undefined', async (t) => {
        const store = await open(t)
        await store.put('dir/file', Buffer.from('x'))
        assert.equal(await store.head('missing'), undefined)
        assert.equal(await store.head('dir'), undefined)
        assert.equal(await store.head('dir/file/below'), undefined)
      })

      it('get of a missing key fails with TIDEMARK_DFS_NOT_FOUND', async (t) => {
        const store = await open(t)
        await store.put('dir/file', Buffer.from('x'))
        for (const key of ['missing', 'dir', 'dir/file/below']) {
          await rejectsMatching(store.get(key), { name: 'TidemarkError', code: 'TIDEMARK_DFS_NOT_FOUND', retriable: false, details: { key } })
        }
      })
    })

    describe('ranges', () => {
      const body = Buffer.from('0123456789abcdefghij')

      it('reads inclusive, open-ended and clamped ranges', async (t) => {
        const store = await open(t)
        await store.put('r', body)
        const read = async (range: { start: number; end?: number }): Promise<string> => (await readAll(await store.get('r', { range }))).toString()
        assert.equal(await read({ start: 0, end: 0 }), '0')
        assert.equal(await read({ start: 3, end: 7 }), '34567')
        assert.equal(await read({ start: 15 }), 'fghij')
        assert.equal(await read({ start: 19 }), 'j')
        assert.equal(await read({ start: 18, end: 1000 }), 'ij')
        assert.equal(await read({ start: 0 }), body.toString())
      })

      it('refuses a start at or past the end, and malformed ranges', async (t) => {
        const store = await open(t)
        await store.put('r', body)
        await store.put('empty', Buffer.alloc(0))
        await assert.rejects(store.get('r', { range: { start: 20 } }), RangeError)
        await assert.rejects(store.get('r', { range: { start: 25, end: 30 } }), RangeError)
        await assert.rejects(store.get('empty', { range: { start: 0 } }), RangeError)
        await assert.rejects(store.get('r', { range: { start: 5, end: 4 } }), /range.end \(4\)/)
        await assert.rejects(store.get('r', { range: { start: -1 } }), /range.start/)
        await assert.rejects(store.get('r', { range: { start: 1.5 } }), RangeError)
        await rejectsMatching(store.get('missing', { range: { start: 0 } }), { code: 'TIDEMARK_DFS_NOT_FOUND' })
      })

      it('reads a range across the parts of a large object', async (t) => {
        const store = await open(t)
        const data = randomBytes(17 * MiB)
        await store.put('big', Readable.from(chunksOf(data, 100_003)))
        const start = 8 * MiB - 1000
        const end = 16 * MiB + 1000
        assert.ok((await readAll(await store.get('big', { range: { start, end } }))).equals(data.subarray(start, end + 1)), 'the range across parts differs')
        assert.ok((await readAll(await store.get('big', { range: { start: 17 * MiB - 5 } }))).equals(data.subarray(17 * MiB - 5)), 'the last bytes differ')
      })
    })

    describe('list', () => {
      it('lists by string prefix, in UTF-8 byte order of the keys', async (t) => {
        const store = await open(t)
        // '-' < '.' < '/' < '0' < 'a', and U+FFFD sorts below an emoji in UTF-8 but above it in UTF-16.
        const keys = ['a/b-file', 'a.x', 'a-b', 'a0', 'a/b/c', 'a/bc', 'ab', 'b', 'a/\u{1F600}', 'a/\uFFFD', 'a/z']
        for (const key of keys) await store.put(key, Buffer.from(key))
        const byteOrder = [...keys].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)))
        assert.ok(byteOrder.indexOf('a/\uFFFD') < byteOrder.indexOf('a/\u{1F600}'))
        assert.deepEqual(await listKeys(store, ''), byteOrder)
        assert.deepEqual(await listKeys(store, 'a/'), byteOrder.filter((key) => key.startsWith('a/')))
        assert.deepEqual(await listKeys(store, 'a/b'), ['a/b-file', 'a/b/c', 'a/bc'])
        assert.deepEqual(await listKeys(store, 'a/b/'), ['a/b/c'])
        assert.deepEqual(await listKeys(store, 'a'), byteOrder.filter((key) => key.startsWith('a')))
        assert.deepEqual(await listKeys(store, 'nothing/'), [])
        assert.deepEqual(await listKeys(store, 'a/b/c/'), [])
      })

      it('returns size and lastModified for each object', async (t) => {
        const store = await open(t)
        await store.put('p/one', Buffer.alloc(1))
        await store.put('p/three', Buffer.alloc(3))
        const listed = await collect(store.list('p/'))
        assert.deepEqual(listed.map(({ key, size }) => ({ key, size })), [{ key: 'p/one', size: 1 }, { key: 'p/three', size: 3 }])
        for (const info of listed) assert.ok(info.lastModified instanceof Date, `lastModified of ${info.key} is no Date`)
      })

      it('honours startAfter and limit', async (t) => {
        const store = await open(t)
        for (const key of ['s/a', 's/b/1', 's/b/2', 's/c', 's/d']) await store.put(key, Buffer.from(key))
        assert.deepEqual(await listKeys(store, 's/', { startAfter: 's/b/1' }), ['s/b/2', 's/c', 's/d'])
        assert.deepEqual(await listKeys(store, 's/', { startAfter: 's/b' }), ['s/b/1', 's/b/2', 's/c', 's/d'])
        assert.deepEqual(await listKeys(store, 's/', { startAfter: 's/b0' }), ['s/c', 's/d'])
        assert.deepEqual(await listKeys(store, 's/', { startAfter: 's/a', limit: 2 }), ['s/b/1', 's/b/2'])
        assert.deepEqual(await listKeys(store, 's/', { startAfter: 's/d' }), [])
        assert.deepEqual(await listKeys(store, 's/', { limit: 1 }), ['s/a'])
      })

      it(`pages through ${manyKeys} keys`, async (t) => {
        const store = await open(t)
        const keys = Array.from({ length: manyKeys }, (_, i) => `many/${String(i).padStart(5, '0')}`)
        await mapLimit(keys, 32, (key) => store.put(key, Buffer.from(key)))
        await store.put('many-other', Buffer.from('not under many/'))
        assert.deepEqual(await listKeys(store, 'many/'), keys)
        // The way a caller pages by hand: startAfter = the last key of the previous page.
        const paged: string[] = []
        for (let page = await listKeys(store, 'many/', { limit: 250 }); page.length > 0; page = await listKeys(store, 'many/', { limit: 250, startAfter: paged.at(-1)! })) {
          paged.push(...page)
        }
        assert.deepEqual(paged, keys)
        await store.deleteMany(keys)
        assert.deepEqual(await listKeys(store, ''), ['many-other'])
      }, 120_000)

      it('stops reading when the caller stops iterating', async (t) => {
        const store = await open(t)
        for (const key of ['x/1', 'x/2', 'x/3']) await store.put(key, Buffer.from(key))
        const seen: string[] = []
        for await (const info of store.list('x/')) {
          seen.push(info.key)
          if (seen.length === 2) break
        }
        assert.deepEqual(seen, ['x/1', 'x/2'])
      })
    })

    describe('deleteMany', () => {
      it('deletes the keys, skips missing ones and duplicates', async (t) => {
        const store = await open(t)
        for (const key of ['d/1', 'd/2', 'd/3', 'd/sub/4']) await store.put(key, Buffer.from(key))
        await store.deleteMany(['d/1', 'd/sub/4', 'd/missing', 'd/1', 'nowhere/at/all'])
        assert.deepEqual(await listKeys(store, ''), ['d/2', 'd/3'])
        await rejectsMatching(store.get('d/1'), { code: 'TIDEMARK_DFS_NOT_FOUND' })
        await store.deleteMany([])
        await store.deleteMany(['d/2', 'd/3'])
        assert.deepEqual(await listKeys(store, ''), [])
      })

      it('leaves keys that share a prefix with a deleted one', async (t) => {
        const store = await open(t)
        for (const key of ['e/a-1', 'e/a/b', 'e/ab']) await store.put(key, Buffer.from(key))
        // 'e/a' is no object, only a prefix of one.
        await store.deleteMany(['e/a', 'e/a-1'])
        assert.deepEqual(await listKeys(store, 'e/'), ['e/a/b', 'e/ab'])
      })
    })

    // Optional in the interface; GC calls it where a store has it.
    describe('sweepTemporaryFiles', () => {
      it('removes no object and checks its prefix', async (t) => {
        const store = await open(t)
        if (store.sweepTemporaryFiles === undefined) return
        for (const key of ['s/a', 's/b/c', 't/d']) await store.put(key, Buffer.from(key))
        assert.equal(await store.sweepTemporaryFiles('s/'), 0)
        assert.equal(await store.sweepTemporaryFiles(''), 0)
        assert.deepEqual(await listKeys(store, ''), ['s/a', 's/b/c', 't/d'])
        await assert.rejects(store.sweepTemporaryFiles('/s'), RangeError)
      })
    })

    // A capability flag, as in abstract-level's suite: a store without
    // conditional puts (say, an S3-compatible server that ignores If-None-Match)
    // declares so (the test above checks the declaration), and then it must
    // refuse ifNoneMatch instead of silently overwriting. Nothing is skipped.
    describe('ifNoneMatch', () => {
      if (!capabilities.conditionalPut) {
        it('is refused with a RangeError by a store without conditional puts', async (t) => {
          const store = await open(t)
          await assert.rejects(store.put('fence/manifest', Buffer.from('first'), { ifNoneMatch: true }), RangeError)
          assert.equal(await store.head('fence/manifest'), undefined)
        })
        return
      }

      it('creates a free key and refuses a taken one, keeping the first object', async (t) => {
        const store = await open(t)
        assertMatch(await store.put('fence/manifest', Buffer.from('first'), { ifNoneMatch: true }), { size: 5 })
        await rejectsMatching(store.put('fence/manifest', Buffer.from('second'), { ifNoneMatch: true }), {
          name: 'TidemarkError', code: 'TIDEMARK_DFS_OBJECT_EXISTS', retriable: false, details: { key: 'fence/manifest' },
        })
        assertMatch(await store.put('fence/streamed', Readable.from([Buffer.from('a'), Buffer.from('b')]), { ifNoneMatch: true }), { size: 2 })
        await rejectsMatching(store.put('fence/streamed', Readable.from([Buffer.from('c')]), { ifNoneMatch: true }), { code: 'TIDEMARK_DFS_OBJECT_EXISTS' })
        assert.equal((await readAll(await store.get('fence/manifest'))).toString(), 'first')
        assert.equal((await readAll(await store.get('fence/streamed'))).toString(), 'ab')
        assert.deepEqual(await listKeys(store, ''), ['fence/manifest', 'fence/streamed'])
      })

      it('lets exactly one of concurrent creators win', async (t) => {
        const store = await open(t)
        const results = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => store.put('race/epoch-7', Buffer.from(`writer ${i}`), { ifNoneMatch: true })))
        const won = results.flatMap((result, i) => (result.status === 'fulfilled' ? [i] : []))
        assert.equal(won.length, 1)
        for (const result of results) {
          if (result.status === 'rejected') assertMatch(result.reason, { code: 'TIDEMARK_DFS_OBJECT_EXISTS' })
        }
        assert.equal((await readAll(await store.get('race/epoch-7'))).toString(), `writer ${won[0]}`)
      })
    })

    describe('ifMatch', () => {
      if (!capabilities.compareAndSwap) {
        it('is refused with a RangeError by a store without compare-and-swap', async (t) => {
          const store = await open(t)
          await store.put('claim', Buffer.from('first'))
          await assert.rejects(store.put('claim', Buffer.from('second'), { ifMatch: 'abc' }), RangeError)
          assert.equal((await readAll(await store.get('claim'))).toString(), 'first')
        })
        return
      }

      it('reports the same etag from put and head, a new one for each new content', async (t) => {
        const store = await open(t)
        const first = await store.put('claim', Buffer.from('{"epoch":1}'))
        assert.match(first.etag ?? '', /^[^"]+$/)
        assert.equal((await store.head('claim'))?.etag, first.etag)
        const second = await store.put('claim', Buffer.from('{"epoch":2}'))
        assert.notEqual(second.etag, first.etag)
        assert.equal((await store.head('claim'))?.etag, second.etag)
        const created = await store.put('created', Buffer.from('x'), { ifNoneMatch: true })
        assert.equal(created.etag, (await store.head('created'))?.etag)
      })

      it('replaces the object when the etag matches, and returns the new etag', async (t) => {
        const store = await open(t)
        const { etag } = await store.put('claim', Buffer.from('owner a'), { ifNoneMatch: true })
        const swapped = await store.put('claim', Buffer.from('owner b'), { ifMatch: etag! })
        assertMatch(swapped, { key: 'claim', size: 7 })
        assert.notEqual(swapped.etag, etag)
        assert.equal((await store.head('claim'))?.etag, swapped.etag)
        assert.equal((await readAll(await store.get('claim'))).toString(), 'owner b')
        // The new etag is the one to swap against next; streamed bodies work too.
        await store.put('claim', Readable.from([Buffer.from('owner '), Buffer.from('c')]), { ifMatch: swapped.etag! })
        assert.equal((await readAll(await store.get('claim'))).toString(), 'owner c')
      })

      it('fails with TIDEMARK_DFS_PRECONDITION_FAILED on another etag or a missing object, storing nothing', async (t) => {
        const store = await open(t)
        const { etag: old } = await store.put('claim', Buffer.from('version 1'))
        const { etag: current } = await store.put('claim', Buffer.from('version 2'))
        const failed = { name: 'TidemarkError', code: 'TIDEMARK_DFS_PRECONDITION_FAILED', retriable: false, details: { key: 'claim' } }
        await rejectsMatching(store.put('claim', Buffer.from('stale writer'), { ifMatch: old! }), failed)
        await rejectsMatching(store.put('claim', Buffer.from('made up'), { ifMatch: '0123456789abcdef0123456789abcdef' }), failed)
        await rejectsMatching(store.put('missing', Buffer.from('no one'), { ifMatch: current! }), { ...failed, details: { key: 'missing' } })
        assert.equal((await readAll(await store.get('claim'))).toString(), 'version 2')
        assert.equal((await store.head('claim'))?.etag, current)
        assert.deepEqual(await listKeys(store, ''), ['claim'])
      })

      it('lets exactly one of concurrent swaps against the same etag win', async (t) => {
        const store = await open(t)
        const { etag } = await store.put('race/owner.json', Buffer.from('epoch 1'), { ifNoneMatch: true })
        const results = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => store.put('race/owner.json', Buffer.from(`writer ${i}`), { ifMatch: etag! })))
        const won = results.flatMap((result, i) => (result.status === 'fulfilled' ? [i] : []))
        assert.equal(won.length, 1)
        for (const result of results) {
          if (result.status === 'rejected') assertMatch(result.reason, { code: 'TIDEMARK_DFS_PRECONDITION_FAILED' })
        }
        const winner = results[won[0]!] as PromiseFulfilledResult<{ etag?: string }>
        assert.equal((await readAll(await store.get('race/owner.json'))).toString(), `writer ${won[0]}`)
        assert.equal((await store.head('race/owner.json'))?.etag, winner.value.etag)
        assert.deepEqual(await listKeys(store, 'race/'), ['race/owner.json'])
      })

      it('refuses malformed ifMatch arguments at the call', async (t) => {
        const store = await open(t)
        const { etag } = await store.put('claim', Buffer.from('x'))
        await assert.rejects(store.put('claim', Buffer.from('y'), { ifMatch: '' }), TypeError)
        await assert.rejects(store.put('claim', Buffer.from('y'), { ifMatch: 42 as unknown as string }), TypeError)
        await assert.rejects(store.put('claim', Buffer.from('y'), { ifMatch: `"${etag!}"` }), /without quotes/)
        await assert.rejects(store.put('claim', Buffer.from('y'), { ifMatch: etag!, ifNoneMatch: true }), /exclude each other/)
        assert.equal((await readAll(await store.get('claim'))).toString(), 'x')
      })
    })

    describe('argument checks', () => {
      const badKeys = ['', '/abs', 'a//b', 'a/', 'a/../b', '..', '.', 'a/./b', 'a\u0000b', 'tab\there', '.tidemark-tmp-123', 'a/.tidemark-tmp']

      it('refuses invalid keys with a RangeError naming the key, in every method', async (t) => {
        const store = await open(t)
        for (const key of badKeys) {
          const named = new RegExp(`key '${escapeRegExp(key.replace('\u0000', '\\u0000').replace('\t', '\\u0009'))}'`)
          await assert.rejects(store.put(key, Buffer.from('x')), named)
          await assert.rejects(store.get(key), RangeError)
          await assert.rejects(store.head(key), RangeError)
          await assert.rejects(store.deleteMany(['fine', key]), RangeError)
        }
        await assert.rejects(store.put(42 as unknown as string, Buffer.from('x')), TypeError)
        await assert.rejects(store.deleteMany('a' as unknown as string[]), TypeError)
        assert.deepEqual(await listKeys(store, ''), [])
      })

      it('accepts unusual but valid keys', async (t) => {
        const store = await open(t)
        const keys = ['..a', 'a..', '.hidden', 'sp ace', 'ünï/cødé', 'x=1&y=2', 'percent%20', '\u{1F600}']
        for (const key of keys) await store.put(key, Buffer.from(key))
        for (const key of keys) assert.equal((await readAll(await store.get(key))).toString(), key)
        assert.deepEqual((await listKeys(store, '')).sort(), [...keys].sort())
      })

      it('refuses invalid list arguments at the call', async (t) => {
        const store = await open(t)
        throwsSync(() => store.list('/a'), RangeError, /prefix '\/a'/)
        throwsSync(() => store.list('a//'), RangeError)
        throwsSync(() => store.list('a/../'), RangeError)
        throwsSync(() => store.list('a', { limit: 0 }), RangeError, /limit \(0\)/)
        throwsSync(() => store.list(undefined as unknown as string), TypeError)
        // A partial last segment is a prefix, not a key.
        assert.deepEqual(await collect(store.list('a/.')), [])
        assert.deepEqual(await collect(store.list('a/..')), [])
      })

      it('refuses use after close with TIDEMARK_DFS_CLOSED', async () => {
        const { store, cleanup } = await factory()
        await store.put('k', Buffer.from('v'))
        await cleanup?.()
        await store.close()
        await store.close()
        const closed = { name: 'TidemarkError', code: 'TIDEMARK_DFS_CLOSED', retriable: false }
        await rejectsMatching(store.put('k', Buffer.from('v')), closed)
        await rejectsMatching(store.get('k'), closed)
        await rejectsMatching(store.head('k'), closed)
        await rejectsMatching(store.deleteMany(['k']), closed)
        assertMatch(throwsSync(() => store.list(''), Error), closed)
      })
    })
  })
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}
