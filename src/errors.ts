/**
 * Every error Tidemark raises on purpose is a TidemarkError with a stable code.
 * Codes never change meaning within a major version; messages may. Caller
 * mistakes (wrong argument types, out-of-range options) are TypeError or
 * RangeError instead, because retrying them can never help.
 *
 * Each code is listed here once, with whether a retry of the same call can
 * succeed, and in the error table of docs/errors.md; test/errors.test.ts keeps the two
 * in step and checks that a test reaches every code.
 */
export const ERROR_CODES = {
  // store/
  TIDEMARK_STORE_LOCKED: { retriable: true, summary: 'the partition store is open in this or another process' },
  TIDEMARK_STORE_OPEN_FAILED: { retriable: false, summary: 'LevelDB could not open the store directory (corrupt, unreadable, a full disk); after a failed reopen following a checkpoint, every later call of that store fails with it (cause: the reopen\'s error)' },
  TIDEMARK_STORE_NOT_FOUND: { retriable: false, summary: 'a store opened with create: false (to be read) does not exist: the path is missing, an empty directory, or a Tidemark directory without a database' },
  TIDEMARK_STORE_NOT_A_STORE: { retriable: false, summary: 'the path is not a directory, or a non-empty directory that is neither a Tidemark store (no TIDEMARK-STORE marker) nor a plain LevelDB store of an earlier version; nothing there was changed' },
  TIDEMARK_STORE_CLOSED: { retriable: false, summary: 'the store was closed, or is closing' },
  TIDEMARK_STORE_QUIESCED: { retriable: true, summary: 'a synchronous read (getSync) came while the store was closed for a checkpoint; get() waits instead' },
  TIDEMARK_UNKNOWN_STATE: { retriable: false, summary: 'a state was used that the store was not opened with' },
  TIDEMARK_STATE_CONFLICT: { retriable: false, summary: 'two state definitions share a name, or a name is reused with another kind (or a non-JSON state holding unversioned values is given a version)' },
  TIDEMARK_STATE_VERSION_AHEAD: { retriable: false, summary: 'a store or snapshot holds a state at a higher version than the program declares (a newer program wrote it); details name the state and both versions' },
  TIDEMARK_STATE_UPGRADE_FAILED: { retriable: false, summary: 'a versioned state\'s upgrade function threw while it upgraded an older value on read' },
  TIDEMARK_ENCODE_FAILED: { retriable: false, summary: 'a codec could not encode a value (for example a cycle or a BigInt in JSON)' },
  TIDEMARK_DECODE_FAILED: { retriable: false, summary: 'stored bytes could not be decoded by the state\'s codec' },
  TIDEMARK_TRANSACTION_CLOSED: { retriable: false, summary: 'a transaction was used after commit or abort' },
  TIDEMARK_POSITION_NOT_ADVANCING: { retriable: false, summary: 'a commit\'s position is not after the stored position of that source partition' },
  TIDEMARK_COMMIT_FAILED: { retriable: true, summary: 'LevelDB refused the commit batch; nothing of it is visible' },
  // snapshot-store/
  TIDEMARK_DFS_NOT_FOUND: { retriable: false, summary: 'the object does not exist in the snapshot store' },
  TIDEMARK_DFS_OBJECT_EXISTS: { retriable: false, summary: 'a create-only put (ifNoneMatch) found the key already taken' },
  TIDEMARK_DFS_PRECONDITION_FAILED: { retriable: false, summary: 'a conditional put (ifMatch) found another version of the object, or none' },
  TIDEMARK_DFS_ACCESS_DENIED: { retriable: false, summary: 'the snapshot store refused the credentials or the permission (HTTP 403, EACCES, read-only file system)' },
  TIDEMARK_DFS_UNAVAILABLE: { retriable: true, summary: 'the snapshot store did not answer, failed with a server error or throttled, also after the configured retries' },
  TIDEMARK_DFS_REQUEST_FAILED: { retriable: false, summary: 'the snapshot store rejected the request for another reason (missing bucket, bad request, a key that collides with a directory)' },
  TIDEMARK_DFS_CLOSED: { retriable: false, summary: 'the snapshot store was closed' },
  TIDEMARK_DFS_STORE_NOT_FOUND: { retriable: false, summary: 'a snapshot store opened to be read (openSnapshotStore with mustExist, the tidemark command) is not there: its file:// root does not exist or is not a directory' },
  TIDEMARK_DFS_CLIENT_MISSING: { retriable: false, summary: 'an s3:// snapshot store was opened but @aws-sdk/client-s3, an optional peer dependency, is not installed (npm install @aws-sdk/client-s3)' },
  TIDEMARK_KAFKA_CLIENT_MISSING: { retriable: false, summary: 'tidemark/kafka was loaded (import or require, or tidemark replay given --brokers or --output-brokers) but kafkajs, an optional peer dependency, is not installed (npm install kafkajs)' },
  TIDEMARK_PROMETHEUS_CLIENT_MISSING: { retriable: false, summary: 'tidemark/prometheus was loaded but prom-client, an optional peer dependency, is not installed (npm install prom-client)' },
  // log/
  TIDEMARK_LOG_CORRUPT: { retriable: false, summary: 'a log record fails its checksum or framing; details.revision names it' },
  TIDEMARK_LOG_NOT_FOUND: { retriable: false, summary: 'a file log opened to be read or appended to by the tidemark command is not there: the path is missing, not a directory, or a directory that holds no log segment' },
  TIDEMARK_LOG_TRUNCATED: { retriable: false, summary: 'a read asked for entries older than the oldest the log still holds' },
  TIDEMARK_LOG_LOCKED: { retriable: true, summary: 'another process held the file log\'s append lock for longer than lockTimeoutMs' },
  TIDEMARK_LOG_UNAVAILABLE: { retriable: true, summary: 'the log\'s storage failed or did not answer (a file-system error, a Kafka request that failed after the client\'s retries, a file-log append relayed to a process that died or did not answer); the append may or may not have been written' },
  TIDEMARK_LOG_TRUNCATE_UNSUPPORTED: { retriable: false, summary: 'the Kafka cluster refused to delete records (for example librdkafka\'s mock); the log is unchanged' },
  TIDEMARK_LOG_CLOSED: { retriable: false, summary: 'the log was closed' },
  // snapshot/
  TIDEMARK_SNAPSHOT_IN_PROGRESS: { retriable: true, summary: 'a snapshot of this partition store is already being taken; one runs at a time' },
  TIDEMARK_SNAPSHOT_CHECKPOINT_FAILED: { retriable: true, summary: 'the local checkpoint (hard links and copies beside the store) could not be made; nothing was uploaded' },
  TIDEMARK_SNAPSHOT_UPLOAD_FAILED: { retriable: true, summary: 'the snapshot store failed during a snapshot, also after its retries; the previous snapshot stays the latest (cause says why)' },
  TIDEMARK_SNAPSHOT_FENCED: { retriable: false, summary: 'a snapshot of a newer owner epoch exists, or another writer committed the same sequence: this writer no longer owns the partition' },
  TIDEMARK_SNAPSHOT_CORRUPT: { retriable: false, summary: 'a snapshot failed verification (details.reason: manifest-unreadable, object-missing, object-truncated, checksum-mismatch, unsafe-entry, ...)' },
  TIDEMARK_SNAPSHOT_NOT_FOUND: { retriable: false, summary: 'restore found no usable snapshot (none exist, or each failed verification; details.skipped says why) and allowEmpty was not set' },
  TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED: { retriable: false, summary: 'a snapshot that verifies holds the largest epoch (a new owner\'s start) or sequence (a new snapshot) a manifest key can carry, so nothing newer can be numbered; move the partition\'s snapshots aside' },
  TIDEMARK_RESTORE_WRITE_FAILED: { retriable: true, summary: 'the restore could not write the store\'s files beside the target (disk full, a read-only or failing disk); nothing was installed and the target is as it was' },
  TIDEMARK_RESTORE_CONFLICT: { retriable: true, summary: 'another restore (or process) filled or replaced the target while this restore ran; this one did not install its copy, and a retry uses what is there now' },
  // runtime/
  TIDEMARK_HANDLER_FAILED: { retriable: false, summary: 'the operator\'s handler threw on an event (details: topic, partition, offset); nothing of its batch was committed' },
  TIDEMARK_PROCESSOR_CLOSED: { retriable: false, summary: 'the partition processor was closed, or stopped after an error' },
  TIDEMARK_POINT_NOT_REACHABLE: { retriable: false, summary: 'a point-in-time restore target lies beyond the log\'s tail or before anything a snapshot or the log still holds' },
  TIDEMARK_POSITION_TRUNCATED: { retriable: false, summary: 'a consumer-group partition\'s state ends before the first record its Kafka partition still holds (retention deleted the records between); the partition stops unless onTruncated is \'reset-to-earliest\'' },
  // outputs/
  TIDEMARK_OUTPUT_DELIVERY_FAILED: { retriable: true, summary: 'an output sink failed to take records from a partition\'s outbox (cause: the sink\'s error); reported in a delivery-failed event, the records stay in the outbox and the publisher retries with backoff' },
  TIDEMARK_OUTPUT_ID_INVALID: { retriable: false, summary: 'with dedupe: \'tidemark-ids\', a record\'s tidemark-id header is not a Tidemark record id (tm1:<job>:<topic>:<partition>:<offset>:<index>); the partition stops at that record' },
  // ownership/
  TIDEMARK_OWNERSHIP_CONFLICT: { retriable: true, summary: 'another owner holds the partition\'s claim (its lease has not expired, or it has none) or won the race for it; details.reason says which (live-lease, no-lease, unreadable, newer-generation, race)' },
  TIDEMARK_OWNERSHIP_LOST: { retriable: false, summary: 'this owner\'s claim was taken over by a newer owner (higher epoch), released or removed: it must stop processing the partition' },
  // synchronizer/
  TIDEMARK_SYNC_NOT_INITIALIZED: { retriable: false, summary: 'the synchronizer has no state yet: neither the log nor a compact point holds an initial state (call initialize())' },
  TIDEMARK_SYNC_COMPACT_POINT_CORRUPT: { retriable: false, summary: 'no compact point in the snapshot store verifies and the log no longer reaches back far enough to replay without one' },
  TIDEMARK_SYNC_CLOSED: { retriable: false, summary: 'the synchronizer was closed' },
  // replay/
  TIDEMARK_REPLAY_SOURCE_JOB: { retriable: false, summary: 'a replay job was given the name of the job it starts from (in the same snapshot store): a replay never writes into its source job\'s snapshots' },
  TIDEMARK_REPLAY_JOB_EXISTS: { retriable: false, summary: 'the replay\'s job already exists with other parameters, or is no replay job (its snapshots or its local store were not made by a replay); details.reason and details.differences say which' },
  TIDEMARK_REPLAY_RANGE_INVALID: { retriable: false, summary: 'the replay\'s range cannot be replayed as asked: to is at or after the log\'s tail, from is older than the log\'s oldest entry, or the start does not end at from - 1 (details.reason)' },
  // transform/
  TIDEMARK_TRANSFORM_TARGET_NOT_EMPTY: { retriable: false, summary: 'an offline transform or bootstrap was pointed at a partition that already holds snapshots, without to.replace (--replace); nothing was written and its owner was not disturbed' },
  TIDEMARK_TRANSFORM_STATE_UNDECLARED: { retriable: false, summary: 'the source of an offline transform holds states that from.states does not declare, so their entries cannot be decoded (details.states); declare them, or pass unlisted: \'drop\'; no snapshot was written' },
  TIDEMARK_TRANSFORM_ENTRY_INVALID: { retriable: false, summary: 'an entry that a transform returned or put, or a record of a bootstrap, names no state of the target, lacks a map state\'s sub-key (or has one for a value state), has no value or a bad key, or a records file line is not a record (details: reason, state, line); nothing was snapshotted' },
  TIDEMARK_TRANSFORM_FAILED: { retriable: false, summary: 'the user\'s transform function threw (cause: its error; details: the state and key it ran on); nothing was snapshotted' },
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

/**
 * `err` itself when it is a TidemarkError, else a TidemarkError of `code`
 * whose cause it is (with its message appended). For events whose error
 * field is typed TidemarkError (snapshot-failed, gc-failed, ownership), so a
 * listener can read `code` and `retriable` whatever failed underneath.
 */
export function asTidemarkError(err: unknown, code: ErrorCode, message: string, options: Omit<TidemarkErrorOptions, 'cause'> = {}): TidemarkError {
  if (err instanceof TidemarkError) return err
  const reason = err instanceof Error ? err.message : String(err)
  return new TidemarkError(code, `${message}: ${reason}`, { ...options, cause: err })
}
