import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
  type CompletedPart,
  type GetObjectCommandOutput,
  type _Error as DeleteError,
} from '@aws-sdk/client-s3'
import { Readable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { TidemarkError, isTidemarkError } from '../../src/errors.js'
import { AbstractSnapshotStore, bodyChunks, type InternalPutOptions, type ObjectInfo, type PutResult, type SnapshotStoreCapabilities, releaseOnClose, TransferLimiter } from '../../src/snapshot-store/index.js'
import { isRetriableS3Error, toTidemarkError } from './errors.js'
import { quietSdk } from './quiet-sdk.js'
import { resolveS3Options, type ResolvedS3Options, type S3SnapshotStoreOptions } from './options.js'
import { backoffMs, withRetry, type RetryPolicy } from './retry.js'

const MAX_PARTS = 10_000

/**
 * The snapshot store on S3 or an S3-compatible server (MinIO, Ceph radosgw).
 *
 * Retries are ours, not the SDK's (it is built with maxAttempts 1): every
 * request body is a buffered part, so a retry can send it again whatever the
 * caller's stream was; a download that drops midway resumes from the byte it
 * reached; and when the attempts run out the caller gets one TidemarkError.
 */
export class S3SnapshotStore extends AbstractSnapshotStore {
  readonly url: string
  readonly capabilities: SnapshotStoreCapabilities
  readonly options: ResolvedS3Options
  /** The SDK client, for operations this interface does not cover (and for fault injection in tests). */
  readonly client: S3Client
  readonly #retry: RetryPolicy
  readonly #parts: PartPool
  /** Shared by every put and get of this instance: see maxConcurrentUploads and maxConcurrentDownloads. */
  readonly #uploads: TransferLimiter
  readonly #downloads: TransferLimiter

  constructor(options: S3SnapshotStoreOptions) {
    super()
    this.options = resolveS3Options(options)
    const { bucket, prefix, endpoint, region, forcePathStyle, credentials } = this.options
    this.client = quietSdk(() => new S3Client({
      ...(endpoint === undefined ? {} : { endpoint }),
      ...(region === undefined ? {} : { region }),
      ...(credentials === undefined ? {} : { credentials }),
      forcePathStyle,
      maxAttempts: 1,
      requestHandler: { connectionTimeout: this.options.connectTimeoutMs, socketTimeout: this.options.idleTimeoutMs },
    }))
    this.#uploads = new TransferLimiter(this.options.maxConcurrentUploads)
    this.#downloads = new TransferLimiter(this.options.maxConcurrentDownloads)
    // A part buffer is in use only while its request holds an upload slot
    // (a slot is taken before the part is read), so the pool never needs more.
    this.#parts = new PartPool(this.options.partSize, this.options.maxConcurrentUploads)
    this.#retry = { maxAttempts: this.options.maxAttempts, baseDelayMs: this.options.retryBaseDelayMs, maxDelayMs: this.options.retryMaxDelayMs }
    // A server that ignores If-None-Match (s3rver) ignores If-Match too, so
    // one option covers both.
    this.capabilities = Object.freeze({ conditionalPut: this.options.conditionalPut, compareAndSwap: this.options.conditionalPut })
    const query = new URLSearchParams()
    if (endpoint !== undefined) query.set('endpoint', endpoint)
    if (region !== undefined) query.set('region', region)
    if (forcePathStyle) query.set('forcePathStyle', 'true')
    const path = prefix === '' ? '' : `/${prefix.slice(0, -1)}`
    this.url = `s3://${bucket}${path}${query.size > 0 ? `?${query}` : ''}`
  }

  protected async _put(key: string, body: Readable | Uint8Array, options: InternalPutOptions): Promise<PutResult> {
    const { bucket, partSize } = this.options
    const { contentLength, ifNoneMatch, ifMatch } = options
    const conditional = ifNoneMatch || ifMatch !== undefined
    // S3-compatible servers differ on conditions for CompleteMultipartUpload
    // (Ceph radosgw 16 ignores If-None-Match and overwrites), so a conditional put must be one PutObject.
    const conditionalTooLarge = (): RangeError => new RangeError(
      `a put with ${ifNoneMatch ? 'ifNoneMatch' : 'ifMatch'} of '${key}' is limited to partSize (${partSize}) bytes on S3: it must be a single PutObject request`)
    if (conditional && contentLength !== undefined && contentLength > partSize) throw conditionalTooLarge()

    // A body in memory goes up as it is, cut into subarrays: no copy. The
    // caller keeps it unchanged until put() settles, as with any write.
    const parts = body instanceof Uint8Array ? sliceParts(body, partSize) : splitParts(bodyChunks(key, body, contentLength), partSize, this.#parts)
    // A stream's part takes its upload slot before it is read into a pool
    // buffer, so the buffers filled at once are bounded by the slots, not by
    // the puts waiting for one. A body in memory takes none (see maxConcurrentUploads).
    const slots = body instanceof Uint8Array ? undefined : this.#uploads
    const first = await nextPart(parts, slots)
    if (first === undefined) throw new Error('unreachable: splitParts yields at least one part')
    if (first.part.last) {
      const { part, release } = first
      const data = part.data
      const response = await this.#send('put', key, () => this.client.send(new PutObjectCommand({
        Bucket: bucket,
        Key: this.#objectKey(key),
        Body: data,
        ContentLength: data.byteLength,
        ...(ifNoneMatch ? { IfNoneMatch: '*' } : {}),
        // Unquoted: radosgw matches a quoted If-Match against nothing (412 even for the right ETag).
        ...(ifMatch !== undefined ? { IfMatch: ifMatch } : {}),
      }))).catch((err: unknown) => {
        throw ifMatch === undefined ? err : this.#preconditionFailed(key, ifMatch, err)
      }).finally(release)
      this.#parts.give(part)
      // An ETag-less answer would leave a compare-and-swap caller without the version it wrote.
      const etag = unquote(response.ETag) ?? (conditional ? (await this._head(key))?.etag : undefined)
      return { key, size: data.byteLength, etag }
    }
    if (conditional) {
      first.release()
      this.#parts.give(first.part)
      await parts.return(undefined) // stops reading the caller's stream
      throw conditionalTooLarge()
    }
    return this.#putMultipart(key, first, parts, slots)
  }

  /**
   * A failed If-Match put: 412 (another version) and 404 (no object; AWS
   * answers so, and so may others) mean the condition did not hold. Other
   * failures keep their code. A 412 after a retry may also mean that an
   * earlier attempt of this very put landed; the caller can tell by reading
   * the object (src/ownership/ does).
   */
  #preconditionFailed(key: string, ifMatch: string, err: unknown): unknown {
    if (!isTidemarkError(err)) return err
    const status = err.details.httpStatus
    if (err.code !== 'TIDEMARK_DFS_OBJECT_EXISTS' && err.code !== 'TIDEMARK_DFS_NOT_FOUND' && status !== 409) return err
    const found = err.code === 'TIDEMARK_DFS_NOT_FOUND' ? 'no object' : 'another version'
    return new TidemarkError('TIDEMARK_DFS_PRECONDITION_FAILED', `S3 put of '${key}' in bucket '${this.options.bucket}' with ifMatch '${ifMatch}' found ${found}`, {
      cause: err, details: { ...err.details, ifMatch },
    })
  }

  async #putMultipart(key: string, first: HeldPart, parts: AsyncGenerator<Part>, slots: TransferLimiter | undefined): Promise<PutResult> {
    const { bucket, partSize, uploadConcurrency } = this.options
    const Key = this.#objectKey(key)
    let UploadId: string | undefined
    try {
      const created = await this.#send('put', key, () => this.client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key })))
      UploadId = created.UploadId
      if (UploadId === undefined) throw toTidemarkError(new Error('CreateMultipartUpload returned no UploadId'), { op: 'put', key, bucket })
    } catch (err) {
      first.release()
      await parts.return(undefined)
      throw err
    }

    const completed: CompletedPart[] = []
    const inFlight = new Set<Promise<void>>()
    // Part uploads report here instead of rejecting, so that no rejection is
    // ever left unobserved while the loop waits for the caller's stream.
    let failure: unknown
    let size = 0
    // The part read but not yet sent, with its slot; each sent part's request gives its slot back when it settles.
    let held: HeldPart | undefined = first
    try {
      for (let PartNumber = 1; held !== undefined && failure === undefined; PartNumber++) {
        if (PartNumber > MAX_PARTS) {
          throw new RangeError(`'${key}' needs more than ${MAX_PARTS} parts of partSize (${partSize}) bytes; raise partSize`)
        }
        const { part: sending, release } = held
        held = undefined
        const Body = sending.data
        size += Body.byteLength
        const upload: Promise<void> = this.#send('put', key, () => this.client.send(new UploadPartCommand({
          Bucket: bucket, Key, UploadId, PartNumber, Body, ContentLength: Body.byteLength,
        }))).then(
          (response) => {
            completed.push({ PartNumber, ETag: response.ETag })
            this.#parts.give(sending)
          },
          (err: unknown) => { failure ??= err },
        ).finally(() => {
          release()
          inFlight.delete(upload)
        })
        inFlight.add(upload)
        if (inFlight.size >= uploadConcurrency) await Promise.race(inFlight)
        if (!sending.last && failure === undefined) held = await nextPart(parts, slots)
      }
      if (held !== undefined) { // read, but not sent: a part failed meanwhile
        held.release()
        this.#parts.give(held.part)
        held = undefined
      }
      await Promise.all(inFlight)
      if (failure !== undefined) throw failure
      completed.sort((a, b) => (a.PartNumber ?? 0) - (b.PartNumber ?? 0))
      const response = await this.#send('put', key, () => this.client.send(new CompleteMultipartUploadCommand({
        Bucket: bucket, Key, UploadId, MultipartUpload: { Parts: completed },
      })))
      // Ceph radosgw answers CompleteMultipartUpload with an empty ETag; HEAD has the right one.
      const etag = unquote(response.ETag) ?? (await this._head(key))?.etag
      return { key, size, etag }
    } catch (err) {
      held?.release()
      // Let the parts in flight settle first, or one could land after the abort and be kept.
      await Promise.all(inFlight)
      await parts.return(undefined)
      // Best effort: what an abort misses is removed by the bucket's
      // AbortIncompleteMultipartUpload lifecycle rule, and the put fails either way.
      await this.#send('put', key, () => this.client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key, UploadId }))).catch(() => {})
      throw err
    }
  }

  protected async _get(key: string, range: { start: number; end: number | undefined } | undefined, options: { metadata: boolean }): Promise<Readable> {
    // Held until the body is read to its end or destroyed, resumed requests included.
    const release = options.metadata ? () => {} : await this.#downloads.acquire()
    let response: GetObjectCommandOutput
    try {
      response = await this.#getObject(key, range?.start ?? 0, range?.end, range !== undefined)
    } catch (err) {
      release()
      if (isTidemarkError(err) && err.details.httpStatus === 416 && range !== undefined) {
        throw new RangeError(`range.start (${range.start}) is at or past the end of '${key}'`, { cause: err })
      }
      throw err
    }
    // The object's size bounds a resumed request: from ContentLength, or from 'bytes a-b/size' for a ranged GET.
    const total = range === undefined ? response.ContentLength : Number(/\/(\d+)$/.exec(response.ContentRange ?? '')?.[1])
    const last = Math.min(range?.end ?? Infinity, total !== undefined && Number.isFinite(total) ? total - 1 : Infinity)
    return releaseOnClose(Readable.from(this.#resumingBody(key, response, range?.start ?? 0, last), { objectMode: false }), release)
  }

  /**
   * The object's bytes from `start`; when the connection drops midway, asks
   * for the rest with a Range request. Objects are immutable by convention,
   * but the ETag is compared anyway so that a replaced object is never spliced.
   */
  async *#resumingBody(key: string, first: GetObjectCommandOutput, start: number, last: number): AsyncGenerator<Uint8Array> {
    const etag = unquote(first.ETag)
    let body = toReadable(first.Body)
    let offset = start
    let failures = 0
    try {
      while (true) {
        try {
          for await (const chunk of body as AsyncIterable<Uint8Array>) {
            offset += chunk.byteLength
            yield chunk
          }
          return
        } catch (err) {
          body.destroy()
          failures++
          if (!isRetriableS3Error(err) || failures >= this.#retry.maxAttempts) {
            throw toTidemarkError(err, { op: 'get', key, bucket: this.options.bucket, attempts: failures })
          }
          if (offset > last) return // every byte arrived before the connection dropped
          await sleep(backoffMs(this.#retry, failures))
          // A retry of the whole get() reads the new object from its start, so this failure is retriable.
          const replaced = (cause: unknown): TidemarkError => new TidemarkError('TIDEMARK_DFS_REQUEST_FAILED',
            `S3 get of '${key}' in bucket '${this.options.bucket}' failed: the object was replaced while it was read`,
            { retriable: true, cause, details: { key, bucket: this.options.bucket, etag } })
          const next = await this.#getObject(key, offset, last, true).catch((resumeError: unknown) => {
            // 416: the range is past the end of what is there now, a shorter object.
            throw isTidemarkError(resumeError) && resumeError.details.httpStatus === 416 ? replaced(resumeError) : resumeError
          })
          body = toReadable(next.Body)
          if (unquote(next.ETag) !== etag) throw replaced(err)
        }
      }
    } finally {
      body.destroy()
    }
  }

  #getObject(key: string, start: number, end: number | undefined, ranged: boolean): Promise<GetObjectCommandOutput> {
    return this.#send('get', key, () => this.client.send(new GetObjectCommand({
      Bucket: this.options.bucket,
      Key: this.#objectKey(key),
      ...(ranged ? { Range: `bytes=${start}-${end ?? ''}` } : {}),
    })))
  }

  protected async _head(key: string): Promise<ObjectInfo | undefined> {
    try {
      const response = await this.#send('head', key, () => this.client.send(new HeadObjectCommand({ Bucket: this.options.bucket, Key: this.#objectKey(key) })))
      return { key, size: response.ContentLength ?? 0, lastModified: response.LastModified ?? new Date(0), etag: unquote(response.ETag) }
    } catch (err) {
      // A HEAD response has no body, so a missing bucket looks like a missing key here.
      if (isTidemarkError(err, 'TIDEMARK_DFS_NOT_FOUND')) return undefined
      throw err
    }
  }

  protected async *_list(prefix: string, options: { startAfter: string | undefined; limit: number }): AsyncGenerator<ObjectInfo> {
    const { bucket, listPageSize, prefix: storePrefix } = this.options
    let remaining = options.limit
    let token: string | undefined
    do {
      const request = new ListObjectsV2Command({
        Bucket: bucket,
        Prefix: storePrefix + prefix,
        MaxKeys: Math.min(listPageSize, remaining),
        ...(token !== undefined ? { ContinuationToken: token } : {}),
        ...(token === undefined && options.startAfter !== undefined ? { StartAfter: storePrefix + options.startAfter } : {}),
      })
      const page = await this.#send('list', prefix, () => this.client.send(request))
      for (const object of page.Contents ?? []) {
        if (object.Key === undefined) continue
        yield { key: object.Key.slice(storePrefix.length), size: object.Size ?? 0, lastModified: object.LastModified ?? new Date(0), etag: unquote(object.ETag) }
        if (--remaining <= 0) return
      }
      token = page.IsTruncated === true ? page.NextContinuationToken : undefined
    } while (token !== undefined)
  }

  protected async _deleteMany(keys: string[]): Promise<void> {
    const { bucket } = this.options
    // DeleteObjects takes at most 1000 keys per request.
    for (let i = 0; i < keys.length; i += 1000) {
      let pending = keys.slice(i, i + 1000).map((key) => this.#objectKey(key))
      await this.#send('deleteMany', keys[i] ?? '', async () => {
        const response = await this.client.send(new DeleteObjectsCommand({
          Bucket: bucket, Delete: { Objects: pending.map((Key) => ({ Key })), Quiet: true },
        }))
        const errors = (response.Errors ?? []).filter((error) => error.Code !== 'NoSuchKey')
        if (errors.length === 0) return
        // Only the keys that failed are sent again.
        pending = errors.flatMap((error) => (error.Key === undefined ? [] : [error.Key]))
        throw deleteError(errors[0] as DeleteError)
      })
    }
  }

  protected override async _close(): Promise<void> {
    this.client.destroy()
  }

  #objectKey(key: string): string {
    return this.options.prefix + key
  }

  #send<T>(op: string, key: string, call: () => Promise<T>): Promise<T> {
    const bucket = this.options.bucket
    return withRetry(this.#retry, call, isRetriableS3Error, (err, attempts) => toTidemarkError(err, { op, key, bucket, attempts }))
  }
}

interface Part {
  data: Buffer
  /** Known to be the last part, so a body of one part can go up as a plain PutObject. */
  last: boolean
  /** The pool buffer that `data` lies in, when it came from the pool. */
  pooled?: Buffer
}

/** A part read from the body, with the upload slot it was read under (a no-op for a body in memory). */
interface HeldPart {
  part: Part
  release: () => void
}

/** Takes a slot (when `slots` is given), then reads the next part in it; undefined at the end of the body. */
async function nextPart(parts: AsyncGenerator<Part>, slots: TransferLimiter | undefined): Promise<HeldPart | undefined> {
  const release = slots === undefined ? () => {} : await slots.acquire()
  try {
    const next = await parts.next()
    if (next.done === true) {
      release()
      return undefined
    }
    return { part: next.value, release }
  } catch (err) {
    release()
    throw err
  }
}

/**
 * Part buffers of a store, reused from one part to the next and from one put
 * to the next. A fresh partSize buffer per part was most of the garbage of an
 * upload: dead part buffers wait for a scavenge, which external memory does
 * not bring on, and the peak RSS of a snapshot followed them.
 *
 * A buffer comes back only after its request succeeded, which the server
 * answers once it has read the whole body, and after any retries, which send
 * the same buffer again. A part whose request failed is left to the garbage
 * collector: a request that was given up on may still be writing it to its
 * socket.
 */
class PartPool {
  readonly #free: Buffer[] = []
  readonly #size: number
  readonly #keep: number

  constructor(size: number, keep: number) {
    this.#size = size
    this.#keep = keep
  }

  take(): Buffer {
    return this.#free.pop() ?? Buffer.allocUnsafeSlow(this.#size)
  }

  give(part: Part): void {
    const buffer = part.pooled
    if (buffer === undefined) return
    part.pooled = undefined // given back once only, even if called twice
    if (this.#free.length < this.#keep && !this.#free.includes(buffer)) this.#free.push(buffer)
  }
}

/**
 * Copies the body into parts of exactly `partSize` bytes (the last one
 * shorter) in pool buffers. A part is emitted only once a byte more has
 * arrived behind it, which tells whether it is the last without a second
 * buffer of lookahead. The consumer owns each part it receives and gives it
 * back to the pool; a part still being filled when the generator is returned
 * goes back here.
 */
async function* splitParts(chunks: AsyncIterable<Uint8Array>, partSize: number, pool: PartPool): AsyncGenerator<Part> {
  let buffer: Buffer | undefined = pool.take()
  let filled = 0
  try {
    for await (const chunk of chunks) {
      for (let at = 0; at < chunk.byteLength;) {
        if (filled === partSize) {
          const full: Part = { data: buffer!, last: false, pooled: buffer! }
          buffer = undefined // the consumer's now
          yield full
          buffer = pool.take()
          filled = 0
        }
        const n = Math.min(partSize - filled, chunk.byteLength - at)
        buffer!.set(n === chunk.byteLength ? chunk : chunk.subarray(at, at + n), filled)
        filled += n
        at += n
      }
    }
    const last: Part = { data: buffer!.subarray(0, filled), last: true, pooled: buffer! }
    buffer = undefined
    yield last
  } finally {
    if (buffer !== undefined) pool.give({ data: buffer, last: false, pooled: buffer })
  }
}

/** Parts of a body that is already in memory: subarrays of it. */
async function* sliceParts(body: Uint8Array, partSize: number): AsyncGenerator<Part> {
  const whole = toBuffer(body)
  for (let at = 0; ; at += partSize) {
    const last = whole.byteLength - at <= partSize
    yield { data: whole.subarray(at, at + partSize), last }
    if (last) return
  }
}

function toBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
}

function toReadable(body: unknown): Readable {
  // In Node the SDK's body is the http.IncomingMessage; an empty object may come without one.
  return body instanceof Readable ? body : Readable.from([])
}

/** ETags without their quotes: that is how S3-compatible servers compare them in If-Match (Ceph needs it). */
function unquote(etag: string | undefined): string | undefined {
  const bare = etag?.replace(/^"|"$/g, '')
  return bare === '' ? undefined : bare
}

/** A per-key DeleteObjects failure, shaped like an SDK error so it is classified like one. */
function deleteError(error: DeleteError): Error {
  const status = error.Code === 'AccessDenied' ? 403 : error.Code === 'InternalError' || error.Code === 'ServiceUnavailable' ? 500 : undefined
  return Object.assign(new Error(`${error.Code ?? 'Error'} on '${error.Key ?? ''}': ${error.Message ?? ''}`), {
    name: error.Code ?? 'Error',
    $metadata: { httpStatusCode: status },
  })
}
