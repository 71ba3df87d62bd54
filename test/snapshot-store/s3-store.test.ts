import {
  AbortMultipartUploadCommand,
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  UploadPartCommand,
} from '@aws-sdk/client-s3'
import { createHash, randomBytes } from 'node:crypto'
import { Readable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest'
import { S3SnapshotStore, S3_DEFAULTS, type S3SnapshotStoreOptions } from '../../connectors/s3/index.js'
import { openSnapshotStore } from '../../src/index.js'
import { s3Service } from '../helpers/services.js'
import { randomName } from '../helpers/tmp.js'
import { snapshotStoreSuite } from '../../src/testing/index.js'
import { listKeys, randomStream, readAll } from '../../src/testing/streams.js'

const MiB = 1024 * 1024
const bucket = randomName('dfs')
let admin: S3Client

function connection(): Pick<S3SnapshotStoreOptions, 'endpoint' | 'region' | 'forcePathStyle' | 'credentials'> {
  const { endpoint, region, forcePathStyle, accessKeyId, secretAccessKey } = s3Service()
  return { endpoint, region, forcePathStyle, credentials: { accessKeyId, secretAccessKey } }
}

/** A store on a fresh prefix of the test bucket, emptied and closed when the test ends. */
function newStore(options: Partial<S3SnapshotStoreOptions> = {}): S3SnapshotStore {
  const store = new S3SnapshotStore({ ...connection(), bucket, prefix: randomName('t'), retryBaseDelayMs: 1, ...options })
  onTestFinished(async () => {
    await emptyPrefix(store.options.prefix)
    await store.close()
  })
  return store
}

async function emptyPrefix(prefix: string): Promise<void> {
  const uploads = await admin.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: prefix }))
  for (const upload of uploads.Uploads ?? []) {
    await admin.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: upload.Key, UploadId: upload.UploadId }))
  }
  for (let token: string | undefined, more = true; more;) {
    const page = await admin.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }))
    const keys = (page.Contents ?? []).map((object) => ({ Key: object.Key }))
    if (keys.length > 0) await admin.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: keys, Quiet: true } }))
    token = page.NextContinuationToken
    more = page.IsTruncated === true
  }
}

async function multipartUploads(store: S3SnapshotStore): Promise<number> {
  const uploads = await admin.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: store.options.prefix }))
  return uploads.Uploads?.length ?? 0
}

type Send = (command: unknown) => Promise<unknown>

/**
 * Fault injection: wraps the store's real client.send; `intercept` decides
 * per call whether to fail, alter the answer, or pass the call on.
 */
function interceptSend(store: S3SnapshotStore, intercept: (command: unknown, send: Send) => Promise<unknown>) {
  const send = store.client.send.bind(store.client) as Send
  return vi.spyOn(store.client, 'send').mockImplementation(((command: unknown) => intercept(command, send)) as never)
}

/** Counts the calls with commands of one class; fails the nth of them (1-based) with `error`. */
function failNth(store: S3SnapshotStore, kind: new (...args: never[]) => unknown, nth: number[], error: () => unknown) {
  let seen = 0
  const spy = interceptSend(store, async (command, send) => {
    if (command instanceof kind && nth.includes(++seen)) throw error()
    return send(command)
  })
  return { spy, calls: () => spy.mock.calls.filter(([command]) => command instanceof kind).length }
}

const slowDown = (): Error => new S3ServiceException({ name: 'SlowDown', $fault: 'server', $metadata: { httpStatusCode: 503 }, message: 'Please reduce your request rate.' })
const connectionReset = (): Error => Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' })
const badRequest = (): Error => new S3ServiceException({ name: 'InvalidRequest', $fault: 'client', $metadata: { httpStatusCode: 400 }, message: 'injected' })

beforeAll(async () => {
  const { endpoint, region, accessKeyId, secretAccessKey } = s3Service()
  admin = new S3Client({ endpoint, region, forcePathStyle: true, credentials: { accessKeyId, secretAccessKey } })
  await admin.send(new CreateBucketCommand({ Bucket: bucket }))
})

afterAll(async () => {
  await emptyPrefix('')
  await admin.send(new DeleteBucketCommand({ Bucket: bucket }))
  admin.destroy()
})

snapshotStoreSuite({
  test: it,
  describe,
  name: 'S3',
  factory: async () => {
    const store = new S3SnapshotStore({ ...connection(), bucket, prefix: randomName('suite') })
    return { store, cleanup: () => emptyPrefix(store.options.prefix) }
  },
  // 1100 keys cross the server's 1000-key page of ListObjectsV2 and DeleteObjects' 1000-key limit.
  capabilities: { conditionalPut: true, compareAndSwap: true, manyKeys: 1100 },
})

describe('S3SnapshotStore', () => {
  it('keeps objects under its prefix in the bucket', async () => {
    const store = newStore()
    await store.put('a/b', Buffer.from('x'))
    const page = await admin.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: store.options.prefix }))
    expect(page.Contents?.map((object) => object.Key)).toEqual([`${store.options.prefix}a/b`])
    expect(store.options.prefix).toMatch(/\/$/)
  })

  it('reports the ETag of a multipart upload (radosgw leaves it out of CompleteMultipartUpload)', async () => {
    const store = newStore({ partSize: 5 * MiB })
    const { stream } = randomStream(11 * MiB)
    const result = await store.put('multi', stream)
    expect(result.etag).toMatch(/^[0-9a-f]{32}-3$/)
    expect((await store.head('multi'))?.etag).toBe(result.etag)
  })

  it('reuses part buffers across parts and puts without mixing their bytes, also after a failed part', async () => {
    const store = newStore({ partSize: 5 * MiB, uploadConcurrency: 2 })
    const digestOf = async (key: string): Promise<string> => {
      const hash = createHash('sha256')
      for await (const chunk of await store.get(key)) hash.update(chunk as Buffer)
      return hash.digest('hex')
    }
    const a = randomStream(23 * MiB)
    const b = randomStream(11 * MiB + 7)
    await Promise.all([store.put('pool-a', a.stream), store.put('pool-b', b.stream)])
    const { calls } = failNth(store, UploadPartCommand, [2], badRequest)
    await expect(store.put('pool-failed', randomStream(16 * MiB).stream)).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED' })
    expect(calls()).toBeGreaterThanOrEqual(2)
    const c = randomStream(3 * MiB)
    const d = randomStream(12 * MiB)
    await store.put('pool-c', c.stream)
    await store.put('pool-d', d.stream)
    expect(await digestOf('pool-a')).toBe(a.digest())
    expect(await digestOf('pool-b')).toBe(b.digest())
    expect(await digestOf('pool-c')).toBe(c.digest())
    expect(await digestOf('pool-d')).toBe(d.digest())
  })

  it('uploads parts with bounded concurrency', async () => {
    const store = newStore({ partSize: 5 * MiB, uploadConcurrency: 2 })
    let running = 0
    let peak = 0
    interceptSend(store, async (command, send) => {
      if (!(command instanceof UploadPartCommand)) return send(command)
      peak = Math.max(peak, ++running)
      try {
        return await send(command)
      } finally {
        running--
      }
    })
    // A buffer, not a stream: parts are ready at once, so only the bound holds them back.
    await store.put('parts', randomBytes(26 * MiB))
    expect(peak).toBe(2)
  })

  it('lists with small pages, continuing across them', async () => {
    const store = newStore({ listPageSize: 3 })
    const keys = Array.from({ length: 10 }, (_, i) => `p/${i}`)
    for (const key of keys) await store.put(key, Buffer.from(key))
    const { calls } = failNth(store, ListObjectsV2Command, [], () => undefined)
    expect(await listKeys(store, 'p/')).toEqual(keys)
    expect(calls()).toBe(4)
    expect(await listKeys(store, 'p/', { startAfter: 'p/1', limit: 5 })).toEqual(['p/2', 'p/3', 'p/4', 'p/5', 'p/6'])
  })

  describe('retries (one wrapped call on the real client)', () => {
    it('retries a PutObject answered with 503 SlowDown', async () => {
      const store = newStore()
      const { calls } = failNth(store, PutObjectCommand, [2], slowDown)
      await store.put('first', Buffer.from('1'))
      await store.put('second', Buffer.from('2'))
      expect(calls()).toBe(3)
      expect((await readAll(await store.get('second'))).toString()).toBe('2')
    })

    it('sends a part again after its connection dropped, from the buffered part', async () => {
      const store = newStore({ partSize: 5 * MiB })
      const { calls } = failNth(store, UploadPartCommand, [2], connectionReset)
      const { stream, digest } = randomStream(12 * MiB)
      await store.put('parts', stream)
      expect(calls()).toBe(4)
      const hash = createHash('sha256')
      for await (const chunk of await store.get('parts')) hash.update(chunk as Buffer)
      expect(hash.digest('hex')).toBe(digest())
    })

    it('resumes a download from the byte it reached when the connection drops midway', async () => {
      const store = newStore()
      const data = randomBytes(6 * MiB)
      await store.put('download', data)
      let gets = 0
      const ranges: (string | undefined)[] = []
      interceptSend(store, async (command, send) => {
        const response = await send(command)
        if (!(command instanceof GetObjectCommand)) return response
        ranges.push(command.input.Range)
        if (++gets > 1) return response
        const body = (response as { Body: Readable }).Body
        return { ...(response as object), Body: cutAfter(body, 2 * MiB) }
      })
      expect((await readAll(await store.get('download'))).equals(data)).toBe(true)
      expect(ranges).toHaveLength(2)
      expect(ranges[0]).toBeUndefined()
      const resumedAt = Number(/^bytes=(\d+)-(\d+)$/.exec(ranges[1] ?? '')?.[1])
      expect(resumedAt).toBeGreaterThan(0)
      expect(resumedAt).toBeLessThanOrEqual(2 * MiB)

      // A ranged read resumes within its range.
      gets = 0
      ranges.length = 0
      const start = 1 * MiB
      const end = 5 * MiB - 1
      expect((await readAll(await store.get('download', { range: { start, end } }))).equals(data.subarray(start, end + 1))).toBe(true)
      expect(ranges[0]).toBe(`bytes=${start}-${end}`)
      expect(ranges[1]).toMatch(new RegExp(`^bytes=\\d+-${end}$`))
    })

    it('refuses to splice a download when the object was replaced before the resume', async () => {
      const store = newStore()
      await store.put('replaced', randomBytes(4 * MiB))
      let gets = 0
      let longer = false
      interceptSend(store, async (command, send) => {
        if (command instanceof GetObjectCommand && ++gets === 2) {
          const Body = longer ? randomBytes(5 * MiB) : Buffer.from('new')
          await send(new PutObjectCommand({ Bucket: bucket, Key: `${store.options.prefix}replaced`, Body }))
        }
        const response = await send(command)
        if (!(command instanceof GetObjectCommand) || gets > 1) return response
        return { ...(response as object), Body: cutAfter((response as { Body: Readable }).Body, 1 * MiB) }
      })
      await expect(readAll(await store.get('replaced'))).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED', retriable: true, message: /replaced while it was read/ })

      // Replaced by a longer object: the resumed range exists, but its ETag differs.
      await store.put('replaced', randomBytes(4 * MiB))
      gets = 0
      longer = true
      await expect(readAll(await store.get('replaced'))).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED', retriable: true, message: /replaced while it was read/ })
    })

    it('sends again only the keys that DeleteObjects reported as failed', async () => {
      const store = newStore()
      for (const key of ['d/1', 'd/2', 'd/3']) await store.put(key, Buffer.from(key))
      const sent: string[][] = []
      let errorCode = 'InternalError'
      interceptSend(store, async (command, send) => {
        const response = await send(command)
        if (!(command instanceof DeleteObjectsCommand)) return response
        const keys = (command.input.Delete?.Objects ?? []).map((object) => object.Key!)
        sent.push(keys)
        return sent.length === 1 ? { ...(response as object), Errors: [{ Key: keys[1], Code: errorCode, Message: 'injected' }] } : response
      })
      await store.deleteMany(['d/1', 'd/2', 'd/3'])
      const prefix = store.options.prefix
      expect(sent).toEqual([[`${prefix}d/1`, `${prefix}d/2`, `${prefix}d/3`], [`${prefix}d/2`]])
      expect(await listKeys(store, '')).toEqual([])

      sent.length = 0
      errorCode = 'AccessDenied'
      await expect(store.deleteMany(['d/4', 'd/5'])).rejects.toMatchObject({ code: 'TIDEMARK_DFS_ACCESS_DENIED', retriable: false })
      expect(sent).toHaveLength(1)
    })

    it('gives up after maxAttempts with a retriable TIDEMARK_DFS_UNAVAILABLE carrying the cause', async () => {
      const store = newStore({ maxAttempts: 3 })
      const { calls } = failNth(store, PutObjectCommand, [1, 2, 3, 4], slowDown)
      const error = await store.put('never', Buffer.from('x')).catch((err: unknown) => err)
      expect(error).toMatchObject({
        name: 'TidemarkError',
        code: 'TIDEMARK_DFS_UNAVAILABLE',
        retriable: true,
        details: { key: 'never', bucket, attempts: 3, httpStatus: 503 },
        cause: { name: 'SlowDown' },
      })
      expect(calls()).toBe(3)
      expect(await store.head('never')).toBeUndefined()
    })

    it('does not retry a client error', async () => {
      const store = newStore()
      const { calls } = failNth(store, PutObjectCommand, [1], badRequest)
      await expect(store.put('bad', Buffer.from('x'))).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED', retriable: false, details: { httpStatus: 400 } })
      expect(calls()).toBe(1)
    })

    it('aborts the multipart upload when a part fails for good, and when the body fails', async () => {
      const store = newStore({ partSize: 5 * MiB })
      const { spy } = failNth(store, UploadPartCommand, [2], badRequest)
      await expect(store.put('aborted', randomStream(16 * MiB).stream)).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED' })
      expect(spy.mock.calls.filter(([command]) => command instanceof AbortMultipartUploadCommand)).toHaveLength(1)
      expect(await multipartUploads(store)).toBe(0)
      expect(await store.head('aborted')).toBeUndefined()

      const failing = Readable.from((async function* () {
        yield randomBytes(6 * MiB)
        throw new Error('source broke')
      })())
      await expect(store.put('aborted', failing)).rejects.toThrow('source broke')
      expect(await multipartUploads(store)).toBe(0)
    })
  })

  describe('errors from a real server', () => {
    it('a refused connection becomes TIDEMARK_DFS_UNAVAILABLE after the retries', async () => {
      const store = new S3SnapshotStore({ ...connection(), endpoint: 'http://127.0.0.1:1', bucket, maxAttempts: 2, retryBaseDelayMs: 1 })
      onTestFinished(() => store.close())
      await expect(store.head('k')).rejects.toMatchObject({ code: 'TIDEMARK_DFS_UNAVAILABLE', retriable: true, details: { attempts: 2 }, cause: { code: 'ECONNREFUSED' } })
    })

    it('wrong credentials give TIDEMARK_DFS_ACCESS_DENIED', async () => {
      const store = newStore({ credentials: { accessKeyId: s3Service().accessKeyId, secretAccessKey: 'wrong-secret' } })
      await expect(store.put('k', Buffer.from('x'))).rejects.toMatchObject({ code: 'TIDEMARK_DFS_ACCESS_DENIED', retriable: false, details: { bucket, httpStatus: 403 } })
      await expect(store.head('k')).rejects.toMatchObject({ code: 'TIDEMARK_DFS_ACCESS_DENIED' })
    })

    it('a missing bucket is TIDEMARK_DFS_REQUEST_FAILED, not a missing key', async () => {
      const store = new S3SnapshotStore({ ...connection(), bucket: randomName('missing') })
      onTestFinished(() => store.close())
      await expect(store.get('k')).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED', message: /bucket '.*' does not exist/ })
      await expect(store.put('k', Buffer.from('x'))).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED' })
      expect(() => store.list('')[Symbol.asyncIterator]()).not.toThrow()
      await expect(listKeys(store, '')).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED' })
    })

    it('limits a create-only put to one request of at most partSize bytes', async () => {
      const store = newStore({ partSize: 5 * MiB })
      await expect(store.put('big-manifest', Buffer.alloc(5 * MiB + 1), { ifNoneMatch: true })).rejects.toThrow(/limited to partSize \(5242880\) bytes/)
      await expect(store.put('big-manifest', randomStream(6 * MiB).stream, { ifNoneMatch: true })).rejects.toThrow(RangeError)
      await expect(store.put('fits', Buffer.alloc(5 * MiB), { ifNoneMatch: true })).resolves.toMatchObject({ size: 5 * MiB })
      expect(await listKeys(store, '')).toEqual(['fits'])
      expect(await multipartUploads(store)).toBe(0)
    })

    it('limits a compare-and-swap put to one request of at most partSize bytes', async () => {
      const store = newStore({ partSize: 5 * MiB })
      const { etag } = await store.put('claim', Buffer.from('small'))
      await expect(store.put('claim', Buffer.alloc(5 * MiB + 1), { ifMatch: etag! })).rejects.toThrow(/ifMatch of 'claim' is limited to partSize/)
      await expect(store.put('claim', randomStream(6 * MiB).stream, { ifMatch: etag! })).rejects.toThrow(RangeError)
      expect((await readAll(await store.get('claim'))).toString()).toBe('small')
      expect(await multipartUploads(store)).toBe(0)
    })

    it('sends If-Match without quotes (radosgw refuses a quoted ETag with 412)', async () => {
      const store = newStore()
      const { etag } = await store.put('claim', Buffer.from('v1'))
      const sent: unknown[] = []
      interceptSend(store, async (command, send) => {
        if (command instanceof PutObjectCommand) sent.push(command.input.IfMatch)
        return send(command)
      })
      await store.put('claim', Buffer.from('v2'), { ifMatch: etag! })
      expect(sent).toEqual([etag])
      expect(etag).not.toMatch(/"/)
    })

    it('reopens from its URL with credentials passed apart', async () => {
      const store = newStore()
      await store.put('k', Buffer.from('v'))
      const again = await openSnapshotStore(store.url, { s3: { credentials: connection().credentials } })
      onTestFinished(() => again.close())
      expect((await readAll(await again.get('k'))).toString()).toBe('v')
    })
  })

  describe('options', () => {
    it('are validated at construction, naming the field', () => {
      const base = { bucket: 'some-bucket' }
      expect(() => new S3SnapshotStore({ ...base, partSize: 1024 })).toThrow(/partSize \(1024\) must be an integer from 5242880/)
      expect(() => new S3SnapshotStore({ ...base, maxAttempts: 0 })).toThrow(/maxAttempts \(0\)/)
      expect(() => new S3SnapshotStore({ ...base, listPageSize: 1001 })).toThrow(/listPageSize \(1001\)/)
      expect(() => new S3SnapshotStore({ ...base, uploadConcurrency: '4' as unknown as number })).toThrow(TypeError)
      expect(() => new S3SnapshotStore({ ...base, retryBaseDelayMs: 500, retryMaxDelayMs: 100 })).toThrow(/retryMaxDelayMs \(100\)/)
      expect(() => new S3SnapshotStore({ bucket: 'x' })).toThrow(/bucket \('x'\)/)
      expect(() => new S3SnapshotStore({ ...base, endpoint: 'localhost:9000' })).toThrow(/endpoint \('localhost:9000'\)/)
      expect(() => new S3SnapshotStore({ ...base, prefix: 'a/../b' })).toThrow(/prefix \('a\/..\/b'\)/)
      expect(() => new S3SnapshotStore({ ...base, credentials: { accessKeyId: 'id' } as never })).toThrow(/credentials.secretAccessKey/)
      expect(() => new S3SnapshotStore({ ...base, partsize: 5 } as never)).toThrow(/unknown S3 snapshot store option 'partsize'/)
      expect(() => new S3SnapshotStore(undefined as never)).toThrow(TypeError)
    })

    it('have frozen defaults', () => {
      expect(Object.isFrozen(S3_DEFAULTS)).toBe(true)
      const store = new S3SnapshotStore({ bucket: 'some-bucket', prefix: '/jobs/' })
      expect(store.options).toMatchObject({ ...S3_DEFAULTS, prefix: 'jobs/' })
      expect(Object.isFrozen(store.options)).toBe(true)
      expect(store.url).toBe('s3://some-bucket/jobs')
    })
  })
})

/** The body as a dropped connection delivers it: about `bytes` bytes, then ECONNRESET. */
function cutAfter(body: Readable, bytes: number): Readable {
  return Readable.from((async function* () {
    let passed = 0
    for await (const chunk of body as AsyncIterable<Buffer>) {
      if (passed + chunk.length >= bytes) {
        yield chunk.subarray(0, bytes - passed)
        body.destroy()
        throw connectionReset()
      }
      passed += chunk.length
      yield chunk
    }
  })(), { objectMode: false })
}
