/**
 * Every error Tidemark raises on purpose is a TidemarkError with a stable code.
 * Codes never change meaning within a major version; messages may. Caller
 * mistakes (wrong argument types, out-of-range options) are TypeError or
 * RangeError instead, because retrying them can never help.
 *
 * Each code is listed here once, with whether a retry of the same call can
 * succeed, and in the README's error table; test/errors.test.ts keeps the two
 * in step and checks that a test reaches every code.
 */
export const ERROR_CODES = {
  // store/
  TIDEMARK_STORE_LOCKED: { retriable: true, summary: 'the partition store is open in this or another process' },
  TIDEMARK_STORE_OPEN_FAILED: { retriable: false, summary: 'LevelDB could not open the store directory (corrupt, unreadable or not a store)' },
  TIDEMARK_STORE_CLOSED: { retriable: false, summary: 'the store was closed, or is closing' },
  TIDEMARK_UNKNOWN_STATE: { retriable: false, summary: 'a state was used that the store was not opened with' },
  TIDEMARK_STATE_CONFLICT: { retriable: false, summary: 'two state definitions share a name, or a name is reused with another kind' },
  TIDEMARK_ENCODE_FAILED: { retriable: false, summary: 'a codec could not encode a value (for example a cycle or a BigInt in JSON)' },
  TIDEMARK_DECODE_FAILED: { retriable: false, summary: 'stored bytes could not be decoded by the state\'s codec' },
  TIDEMARK_TRANSACTION_CLOSED: { retriable: false, summary: 'a transaction was used after commit or abort' },
  TIDEMARK_POSITION_NOT_ADVANCING: { retriable: false, summary: 'a commit\'s position is not after the stored position of that source partition' },
  TIDEMARK_COMMIT_FAILED: { retriable: true, summary: 'LevelDB refused the commit batch; nothing of it is visible' },
  // dfs/
  TIDEMARK_DFS_NOT_FOUND: { retriable: false, summary: 'the object does not exist in the snapshot store' },
  TIDEMARK_DFS_OBJECT_EXISTS: { retriable: false, summary: 'a create-only put (ifNoneMatch) found the key already taken' },
  TIDEMARK_DFS_ACCESS_DENIED: { retriable: false, summary: 'the snapshot store refused the credentials or the permission (HTTP 403, EACCES, read-only file system)' },
  TIDEMARK_DFS_UNAVAILABLE: { retriable: true, summary: 'the snapshot store did not answer, failed with a server error or throttled, also after the configured retries' },
  TIDEMARK_DFS_REQUEST_FAILED: { retriable: false, summary: 'the snapshot store rejected the request for another reason (missing bucket, bad request, a key that collides with a directory)' },
  TIDEMARK_DFS_CLOSED: { retriable: false, summary: 'the snapshot store was closed' },
} as const

export type ErrorCode = keyof typeof ERROR_CODES

export interface TidemarkErrorOptions {
  cause?: unknown
  /** Overrides the code's default when one occurrence is known to be (non-)retriable. */
  retriable?: boolean
  /** Structured context (topic, partition, offset, object key, ...). */
  details?: Record<string, unknown>
}

export class TidemarkError extends Error {
  readonly code: ErrorCode
  readonly retriable: boolean
  readonly details: Record<string, unknown>

  constructor(code: ErrorCode, message: string, options: TidemarkErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'TidemarkError'
    this.code = code
    this.retriable = options.retriable ?? ERROR_CODES[code].retriable
    this.details = options.details ?? {}
  }
}

export function isTidemarkError(err: unknown, code?: ErrorCode): err is TidemarkError {
  return err instanceof TidemarkError && (code === undefined || err.code === code)
}
