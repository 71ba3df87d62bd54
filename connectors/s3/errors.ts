import { TidemarkError, type ErrorCode } from '../../src/errors.js'

interface SdkError {
  name?: string
  code?: string
  message?: string
  $metadata?: { httpStatusCode?: number }
  $retryable?: unknown
}

// Node and SDK errors of a connection that failed or dropped; the request may
// or may not have reached the server, and every call here is safe to repeat.
const CONNECTION_ERRORS = new Set([
  'ECONNRESET', 'ECONNREFUSED', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH',
  'ENETDOWN', 'ERR_STREAM_PREMATURE_CLOSE', 'UND_ERR_SOCKET', 'TimeoutError', 'RequestTimeout', 'RequestTimeoutException',
])
const THROTTLING = new Set(['SlowDown', 'Throttling', 'ThrottlingException', 'TooManyRequests', 'TooManyRequestsException', 'RequestLimitExceeded'])

function status(err: unknown): number | undefined {
  return (err as SdkError | undefined)?.$metadata?.httpStatusCode
}

/** 5xx, throttling and dropped connections: the same request can succeed later. */
export function isRetriableS3Error(err: unknown): boolean {
  if (typeof err !== 'object' || err === null || err instanceof TidemarkError) return false
  const { name = '', code = '' } = err as SdkError
  const httpStatus = status(err)
  if (httpStatus !== undefined && (httpStatus >= 500 || httpStatus === 429)) return true
  if (THROTTLING.has(name) || CONNECTION_ERRORS.has(name) || CONNECTION_ERRORS.has(code)) return true
  // The SDK marks some errors retriable from its service model (transient or throttling).
  return Boolean((err as SdkError).$retryable)
}

export interface S3ErrorContext {
  op: string
  key: string
  bucket: string
  attempts?: number
}

/** Maps an SDK or network failure to a TidemarkError with the SDK error as its cause. */
export function toTidemarkError(err: unknown, context: S3ErrorContext): Error {
  if (err instanceof TidemarkError || err instanceof TypeError || err instanceof RangeError) return err
  const { op, key, bucket, attempts } = context
  const { name = 'Error', message = String(err) } = (err ?? {}) as SdkError
  const httpStatus = status(err)
  let code: ErrorCode = 'TIDEMARK_DFS_REQUEST_FAILED'
  let why = `failed: ${name}${httpStatus === undefined ? '' : ` (HTTP ${httpStatus})`}: ${message}`
  if (name === 'NoSuchKey' || name === 'NotFound') {
    code = 'TIDEMARK_DFS_NOT_FOUND'
    why = 'does not exist'
  } else if (name === 'PreconditionFailed' || httpStatus === 412) {
    code = 'TIDEMARK_DFS_OBJECT_EXISTS'
    why = 'found the key already taken'
  } else if (name === 'NoSuchBucket') {
    why = `failed: bucket '${bucket}' does not exist`
  } else if (httpStatus === 401 || httpStatus === 403) {
    code = 'TIDEMARK_DFS_ACCESS_DENIED'
  } else if (isRetriableS3Error(err)) {
    code = 'TIDEMARK_DFS_UNAVAILABLE'
  }
  const tries = attempts !== undefined && attempts > 1 ? ` after ${attempts} attempts` : ''
  return new TidemarkError(code, `S3 ${op} of '${key}' in bucket '${bucket}' ${why}${tries}`, {
    cause: err,
    details: { key, bucket, ...(httpStatus === undefined ? {} : { httpStatus }), ...(attempts === undefined ? {} : { attempts }) },
  })
}
