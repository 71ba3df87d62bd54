// The store-wide transfer limits (maxConcurrentUploads, maxConcurrentDownloads):
// every snapshotter and restore that shares a store instance shares them, and
// a failed or abandoned transfer gives its slot back.
import { GetObjectCommand, PutObjectCommand, S3ServiceException, UploadPartCommand } from '@aws-sdk/client-s3'
import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { describe, expect, it, vi } from 'vitest'
import { S3SnapshotStore, type S3SnapshotStoreOptions } from '../../connectors/s3/index.js'
import { TransferLimiter } from '../../src/snapshot-store/transfer-limiter.js'
import { FsSnapshotStore, PartitionStore, rawCodec, restoreSnapshot, Snapshotter, valueState } from '../../src/index.js'
import { useTestBucket } from '../helpers/s3-bucket.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { randomStream, readAll } from '../../src/testing/streams.js'

const MiB = 1024 * 1024
const kv = valueState('kv', { codec: rawCodec() })
const bucket = useTestBucket('limits')

function s3Store(options: Partial<S3SnapshotStoreOptions> = {}): S3SnapshotStore {
  return new S3SnapshotStore({ ...bucket.storeOptions(randomName('p')), partSize: 5 * MiB, ...options })
}

type Send = (command: unknown) => Promise<unknown>

/**
 * Counts the requests for snapshot data objects in flight on the store's
 * real client: PutObject and UploadPart until answered, GetObject until its
 * body closes. `fail`
 * may throw for a call instead of sending it.
 */
function countRequests(store: S3SnapshotStore, fail: (command: unknown) => Error | undefined = () => undefined) {
  const send = store.client.send.bind(store.client) as Send
  const now = { put: 0, get: 0 }
  const max = { put: 0, get: 0 }
  const total = { put: 0, get: 0 }
  vi.spyOn(store.client, 'send').mockImplementation((async (command: unknown) => {
    const error = fail(command)
    if (error !== undefined) throw error
    // Snapshot data only: manifests are put from memory, which takes no slot.
    const data = ((command as { input?: { Key?: string } }).input?.Key ?? '').includes('/data/')
    const kind = !data ? undefined : command instanceof GetObjectCommand ? 'get' : command instanceof PutObjectCommand || command instanceof UploadPartCommand ? 'put' : undefined
    if (kind === undefined) return send(command)
    total[kind]++
    max[kind] = Math.max(max[kind], ++now[kind])
    let response: { Body?: Readable }
    try {
      response = await send(command) as { Body?: Readable }
    } catch (err) {
      now[kind]--
      throw err
    }
    if (kind === 'get' && response.Body instanceof Readable && !response.Body.closed) response.Body.once('close', () => { now.get-- })
    else now[kind]--
    return response
  }) as never)
  return { now, max, total }
}

/** A partition store of about `mb` MiB of values that do not compress, so that its snapshot is one multipart object. */
async function filledStore(path: string, mb: number): Promise<PartitionStore> {
  const store = await PartitionStore.open({ path, states: [kv] })
  const keys = Math.ceil((mb * MiB) / 1024)
  for (let start = 0, offset = 0n; start < keys; start += 1000) {
    const tx = store.transaction()
    for (let i = start; i < Math.min(keys, start + 1000); i++) tx.value(kv).put(`k${i}`, randomBytes(1024))
    await tx.commit({ topic: 't', partition: 0, offset: offset++ })
  }
  return store
}

const injected = (): Error => new S3ServiceException({ name: 'InvalidRequest', $fault: 'client', $metadata: { httpStatusCode: 400 }, message: 'injected' })

describe('TransferLimiter', () => {
  it('hands slots to waiters in the order they came, and a release counts once', async () => {
    const limiter = new TransferLimiter(1)
    const first = await limiter.acquire()
    const order: number[] = []
    const waiters = [1, 2, 3].map((n) => limiter.acquire().then((release) => {
      order.push(n)
      return release
    }))
    expect(limiter.waiting).toBe(3)
    first()
    first() // a second call must not free a slot someone else holds
    const second = await waiters[0]!
    expect([limiter.active, limiter.waiting]).toEqual([1, 2])
    second()
    ;(await waiters[1]!)()
    ;(await waiters[2]!)()
    expect(order).toEqual([1, 2, 3])
    expect([limiter.active, limiter.waiting]).toEqual([0, 0])
  })
})

describe('store-wide transfer limits on S3', () => {
  it('bound the requests of several snapshotters and restores sharing the store, not each of them', { timeout: 180_000 }, async () => {
    const dir = tempDir('tidemark-limits-')
    const store = s3Store({ maxConcurrentUploads: 2, maxConcurrentDownloads: 3 })
    const partitions = await Promise.all([0, 1, 2].map((p) => filledStore(join(dir, `p${p}`), 11)))
    try {
      const counts = countRequests(store)
      // Alone, each would run 4 parts at once (the store's uploadConcurrency) and 6 downloads.
      const snapshotters = partitions.map((partitionStore, partition) => new Snapshotter({ snapshotStore: store, partitionStore, job: 'j', partition }))
      const taken = await Promise.all(snapshotters.map((s) => s.takeSnapshot()))
      await Promise.all(snapshotters.map((s) => s.close()))
      expect(taken.every((t) => t.full && t.objects.length === 1)).toBe(true)
      expect(counts.total.put).toBe(9) // three parts per object
      expect(counts.max.put).toBe(2)

      const restored = await Promise.all(partitions.map((_s, partition) => restoreSnapshot({ snapshotStore: store, job: 'j', partition, target: join(dir, `r${partition}`), downloadConcurrency: 6 })))
      expect(restored.map((r) => r.snapshot?.id)).toEqual(taken.map((t) => t.id))
      expect(counts.total.get).toBeGreaterThan(6)
      expect(counts.max.get).toBe(3)
      expect(counts.now).toEqual({ put: 0, get: 0 })
    } finally {
      await Promise.all(partitions.map((s) => s.close()))
      await store.close()
    }
  })

  it('give slots back after a failed part, a failed body, a failed get and a get whose reader stops early', { timeout: 60_000 }, async () => {
    const store = s3Store({ maxConcurrentUploads: 1, maxConcurrentDownloads: 1 })
    try {
      let failParts = true
      countRequests(store, (command) => (failParts && command instanceof UploadPartCommand ? injected() : undefined))
      await expect(store.put('failed-part', randomStream(11 * MiB).stream)).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED' })
      const broken = Readable.from((async function* () {
        yield randomBytes(1024)
        throw new Error('the body broke')
      })())
      await expect(store.put('failed-body', broken)).rejects.toThrow('the body broke')
      failParts = false
      // With one slot, each of these waits forever if a slot above was kept.
      const data = randomBytes(6 * MiB)
      await store.put('whole', Readable.from([data]))
      await expect(store.get('missing')).rejects.toMatchObject({ code: 'TIDEMARK_DFS_NOT_FOUND' })
      const early = await store.get('whole')
      for await (const _chunk of early) break // destroys the stream
      const abandoned = await store.get('whole')
      abandoned.destroy()
      expect((await readAll(await store.get('whole'))).equals(data)).toBe(true)
    } finally {
      await store.close()
    }
  })

  it('lets a put of a body in memory (a manifest, a claim) through while the upload slots are taken', { timeout: 60_000 }, async () => {
    const store = s3Store({ maxConcurrentUploads: 1 })
    try {
      let releaseBody!: () => void
      const held = new Promise<void>((resolve) => { releaseBody = resolve })
      // This put holds the only slot while it waits for the rest of its body.
      const slow = store.put('slow', Readable.from((async function* () {
        yield randomBytes(1024)
        await held
        yield randomBytes(1024)
      })()))
      await expect(store.put('small', Buffer.from('claim'), { ifNoneMatch: true })).resolves.toMatchObject({ size: 5 })
      releaseBody()
      await expect(slow).resolves.toMatchObject({ size: 2048 })
    } finally {
      await store.close()
    }
  })

  it('lets a metadata get (a claim, a manifest) through while every download slot is held', { timeout: 60_000 }, async () => {
    const store = s3Store({ maxConcurrentDownloads: 1 })
    try {
      await store.put('data', randomBytes(1024))
      await store.put('owner.json', Buffer.from('{}'))
      const held = await store.get('data') // holds the only slot until read or destroyed
      expect((await readAll(await store.get('owner.json', { metadata: true }))).toString()).toBe('{}')
      let plain: Readable | undefined
      const waiting = store.get('owner.json').then((s) => { plain = s })
      await store.head('owner.json')
      expect(plain).toBeUndefined()
      held.destroy()
      await waiting
      expect((await readAll(plain!)).toString()).toBe('{}')
      await expect(store.get('owner.json', { metadata: 'yes' as never })).rejects.toThrow(new TypeError('metadata must be a boolean, got string'))
    } finally {
      await store.close()
    }
  })

  it('validates the limits once, at construction', () => {
    expect(() => s3Store({ maxConcurrentUploads: 0 })).toThrow(new RangeError('maxConcurrentUploads (0) must be an integer from 1 to 1024'))
    expect(() => s3Store({ maxConcurrentDownloads: 1.5 })).toThrow(RangeError)
    expect(() => s3Store({ maxConcurrentDownloads: '4' as never })).toThrow(new TypeError('maxConcurrentDownloads must be a number, got string'))
  })
})

describe('store-wide transfer limits on the file system', () => {
  it('hold a get until its stream is read or destroyed, and a streamed put while it runs', async () => {
    const store = new FsSnapshotStore({ root: tempDir('tidemark-fslimits-'), maxConcurrentUploads: 1, maxConcurrentDownloads: 1 })
    await store.put('a', randomBytes(1024))
    const first = await store.get('a')
    let second: Readable | undefined
    const waiting = store.get('a').then((s) => { second = s })
    // A whole put (another file-system round trip) completes meanwhile: the second get still waits.
    await store.put('b', randomBytes(10))
    expect(second).toBeUndefined()
    first.destroy()
    await waiting
    expect((await readAll(second!)).length).toBe(1024)
    await expect(store.get('missing')).rejects.toMatchObject({ code: 'TIDEMARK_DFS_NOT_FOUND' })
    expect((await readAll(await store.get('b'))).length).toBe(10)

    let releaseBody!: () => void
    const held = new Promise<void>((resolve) => { releaseBody = resolve })
    const slow = store.put('slow', Readable.from((async function* () {
      yield randomBytes(10)
      await held
    })()))
    let streamedDone = false
    const streamed = store.put('streamed', Readable.from([randomBytes(10)])).then(() => { streamedDone = true })
    await store.put('memory', randomBytes(10)) // a body in memory takes no slot
    expect(streamedDone).toBe(false)
    releaseBody()
    await Promise.all([slow, streamed])

    const holding = await store.get('a')
    expect((await readAll(await store.get('b', { metadata: true }))).length).toBe(10) // takes no slot
    holding.destroy()
    await store.close()
  })

  it('validates the limits once, at construction', () => {
    expect(() => new FsSnapshotStore({ root: '/tmp/x', maxConcurrentUploads: 0 })).toThrow(new RangeError('maxConcurrentUploads (0) must be an integer from 1 to 1024'))
    expect(() => new FsSnapshotStore({ root: '/tmp/x', maxConcurrentDownloads: Infinity })).toThrow(RangeError)
  })
})
