import { checkIntegerOption } from '../../src/util/index.js'
import { checkTransferLimit, DEFAULT_TRANSFER_LIMIT, type S3StoreSettings } from '../../src/snapshot-store/index.js'

export type { S3Credentials } from '../../src/snapshot-store/index.js'

export interface S3SnapshotStoreOptions extends S3StoreSettings {
  bucket: string
  /** Key prefix inside the bucket that holds the store ('' for the whole bucket); a trailing '/' is added. */
  prefix?: string
}

const MiB = 1024 * 1024

export const S3_DEFAULTS = Object.freeze({
  prefix: '',
  forcePathStyle: false,
  maxAttempts: 5,
  retryBaseDelayMs: 100,
  retryMaxDelayMs: 5_000,
  // S3's smallest part: the pool of part buffers is at most maxConcurrentUploads
  // x partSize, and larger parts were no faster against radosgw (bench snapshot).
  partSize: 5 * MiB,
  uploadConcurrency: 4,
  maxConcurrentUploads: DEFAULT_TRANSFER_LIMIT,
  maxConcurrentDownloads: DEFAULT_TRANSFER_LIMIT,
  listPageSize: 1000,
  connectTimeoutMs: 5_000,
  idleTimeoutMs: 30_000,
  conditionalPut: true,
})

export type ResolvedS3Options = Readonly<Required<Omit<S3SnapshotStoreOptions, 'endpoint' | 'region' | 'credentials'>> & Pick<S3SnapshotStoreOptions, 'endpoint' | 'region' | 'credentials'>>

const KNOWN = new Set(['bucket', 'endpoint', 'region', 'credentials', ...Object.keys(S3_DEFAULTS)])

/** Validates once, at construction; every message names the option and the value. */
export function resolveS3Options(input: S3SnapshotStoreOptions): ResolvedS3Options {
  if (typeof input !== 'object' || input === null) throw new TypeError('S3 snapshot store options must be an object')
  for (const name of Object.keys(input)) {
    if (!KNOWN.has(name)) throw new RangeError(`unknown S3 snapshot store option '${name}'; known options: ${[...KNOWN].join(', ')}`)
  }
  const options = { ...S3_DEFAULTS, ...withoutUndefined(input) }

  const { bucket } = options
  if (typeof bucket !== 'string') throw new TypeError(`bucket must be a string, got ${typeof bucket}`)
  // Loose on purpose: old us-east-1 buckets and S3-compatible servers allow upper case and '_'.
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]$/.test(bucket)) {
    throw new RangeError(`bucket ('${bucket}') must be 3 to 255 letters, digits, '.', '-' or '_', starting and ending with a letter or digit`)
  }

  if (typeof options.prefix !== 'string') throw new TypeError(`prefix must be a string, got ${typeof options.prefix}`)
  const prefix = options.prefix.replace(/^\/+|\/+$/g, '')
  if (prefix !== '' && prefix.split('/').some((segment) => segment === '' || segment === '.' || segment === '..')) {
    throw new RangeError(`prefix ('${options.prefix}') must not contain empty, '.' or '..' segments`)
  }

  if (options.endpoint !== undefined) {
    if (typeof options.endpoint !== 'string') throw new TypeError(`endpoint must be a URL string, got ${typeof options.endpoint}`)
    let url
    try {
      url = new URL(options.endpoint)
    } catch {
      throw new RangeError(`endpoint ('${options.endpoint}') is not a URL`)
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new RangeError(`endpoint ('${options.endpoint}') must be an http or https URL`)
  }
  if (options.region !== undefined && (typeof options.region !== 'string' || options.region === '')) {
    throw new TypeError(`region must be a non-empty string, got ${JSON.stringify(options.region)}`)
  }
  for (const name of ['forcePathStyle', 'conditionalPut'] as const) {
    if (typeof options[name] !== 'boolean') throw new TypeError(`${name} must be a boolean, got ${typeof options[name]}`)
  }
  if (options.credentials !== undefined) {
    const { credentials } = options
    if (typeof credentials !== 'object' || credentials === null) throw new TypeError('credentials must be an object with accessKeyId and secretAccessKey')
    for (const name of ['accessKeyId', 'secretAccessKey'] as const) {
      if (typeof credentials[name] !== 'string' || credentials[name] === '') throw new TypeError(`credentials.${name} must be a non-empty string`)
    }
    if (credentials.sessionToken !== undefined && typeof credentials.sessionToken !== 'string') throw new TypeError('credentials.sessionToken must be a string')
  }

  checkIntegerOption(options.maxAttempts, 'maxAttempts', 1, 100)
  checkIntegerOption(options.retryBaseDelayMs, 'retryBaseDelayMs', 0, 60_000)
  checkIntegerOption(options.retryMaxDelayMs, 'retryMaxDelayMs', options.retryBaseDelayMs, 600_000)
  // S3 rejects parts under 5 MiB (except the last) and over 5 GiB.
  checkIntegerOption(options.partSize, 'partSize', 5 * MiB, 5 * 1024 * MiB)
  checkIntegerOption(options.uploadConcurrency, 'uploadConcurrency', 1, 64)
  checkTransferLimit(options.maxConcurrentUploads, 'maxConcurrentUploads')
  checkTransferLimit(options.maxConcurrentDownloads, 'maxConcurrentDownloads')
  checkIntegerOption(options.listPageSize, 'listPageSize', 1, 1000)
  checkIntegerOption(options.connectTimeoutMs, 'connectTimeoutMs', 1, 600_000)
  checkIntegerOption(options.idleTimeoutMs, 'idleTimeoutMs', 1, 3_600_000)

  return Object.freeze({ ...options, bucket, prefix: prefix === '' ? '' : `${prefix}/` })
}


function withoutUndefined<T extends object>(input: T): Partial<T> {
  return Object.fromEntries(Object.entries(input).filter(([, value]) => value !== undefined)) as Partial<T>
}
