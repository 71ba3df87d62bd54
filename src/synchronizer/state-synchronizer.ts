import { randomBytes } from 'node:crypto'
import { assertPrefix } from '../snapshot-store/snapshot-store.js'
import { TidemarkError, isTidemarkError } from '../errors.js'
import { describeValue } from '../util/describe-value.js'
import { NO_REVISION, type LogEntry, type RevisionedLog } from '../log/revisioned-log.js'
import { encodeWith, jsonCodec, type Codec } from '../store/codec.js'
import {
  compactPointKey,
  decodeCompactPoint,
  encodeCompactPoint,
  listCompactPoints,
  readBody,
  type CompactPointRef,
  type CompactPointStore,
} from './compact-point.js'
import { decodeEntry, encodeInit, encodeUpdates } from './entry.js'
import { checkLogger, errorFields, type Logger } from '../logging/logger.js'

/**
 * Pushes the updates it derives from `state` into `updates`. It may run
 * several times for one call (once per conflict), so it must have no side
 * effects and must read nothing but `state`.
 */
export type UpdateGenerator<S, U, R = void> = (state: S, updates: U[]) => R

/**
 * Shared state over a revisioned log, after Pravega's StateSynchronizer.
 *
 * Every client keeps a local copy of the state and the revision it reflects.
 * The log holds the initial state and then updates; a client brings its copy
 * forward by applying the entries after its revision, in log order. Updates
 * must be deterministic: every client applies them and must reach the same
 * state.
 */
export interface StateSynchronizer<S, U> {
  /** The local copy of the state; it may be stale. Treat it as immutable. */
  getState(): S
  /** The revision of the last log entry the local state reflects (NO_REVISION: none yet). */
  getRevision(): bigint
  /** Reads every log entry after the local revision and applies each, in log order. */
  fetchUpdates(): Promise<void>
  /**
   * Calls `generator(state, updates)` and writes the updates it pushed only if
   * no other write took effect since the state's revision; on a conflict it
   * fetches the updates and calls the generator again. The local state
   * includes the updates when this resolves. A generator that throws leaves
   * state and log unchanged, and the error reaches the caller.
   */
  updateState(generator: UpdateGenerator<S, U>): Promise<void>
  /** updateState() that resolves with what the generator's successful run returned. */
  updateStateWithResult<R>(generator: UpdateGenerator<S, U, R>): Promise<R>
  /**
   * Appends the updates without a check, as one entry; the local state sees
   * them only after fetchUpdates(), possibly after other clients' updates.
   */
  updateStateUnconditionally(...updates: U[]): Promise<void>
  /** Writes `initial` as the state if the log and the compact points hold none yet; a no-op otherwise. */
  initialize(initial: S): Promise<void>
  /**
   * Catches up with the log (as fetchUpdates() does), then writes
   * `generator(state)` as a compact point: the newest state, from which new
   * clients start and to which clients that fell behind a truncation
   * continue. The log is then truncated before
   * the previous compact point (one compaction behind, so that a client that
   * just started from that one still finds the entries after it).
   */
  compact(generator: (state: S) => S): Promise<void>
  /** Bytes of the log entries this client applied since the newest compact point it knows (its own or the one it started from). */
  bytesWrittenSinceCompaction(): number
  /** Waits for the operation in progress and refuses further calls. The log and the store stay open: they are the caller's. */
  close(): Promise<void>
}

export interface StateSynchronizerOptions<S, U> {
  log: RevisionedLog
  /** Returns the state after `update`; must be deterministic and must not modify `state`. */
  apply: (state: S, update: U) => S
  /** Encodes updates in log entries. JSON by default. */
  updateCodec?: Codec<U>
  /** Encodes the initial state and compact points. JSON by default. */
  stateCodec?: Codec<S>
  /** Where compact() writes compact points and where a new client looks for the newest one. */
  compactPoints?: { store: CompactPointStore; prefix: string }
  /** Where conflicts, compactions and moves to a compact point are logged (pino-compatible); nothing is logged without one. */
  logger?: Logger
}

export function createStateSynchronizer<S, U>(options: StateSynchronizerOptions<S, U>): StateSynchronizer<S, U> {
  return new Synchronizer(options)
}

class Synchronizer<S, U> implements StateSynchronizer<S, U> {
  readonly #log: RevisionedLog
  readonly #apply: (state: S, update: U) => S
  readonly #updateCodec: Codec<U>
  readonly #stateCodec: Codec<S>
  readonly #compactPoints: { store: CompactPointStore; prefix: string } | undefined
  /** Names this client's compact points. */
  readonly #id = randomBytes(6).toString('hex')
  #state: { value: S } | undefined
  #revision = NO_REVISION
  #bytesSinceCompaction = 0
  #started = false
  #queue: Promise<unknown> = Promise.resolve()
  #closed = false
  readonly #logger: Logger

  constructor(options: StateSynchronizerOptions<S, U>) {
    if (typeof options !== 'object' || options === null) throw new TypeError(`options must be an object, got ${describeValue(options)}`)
    const { log, apply, updateCodec = jsonCodec<U>(), stateCodec = jsonCodec<S>(), compactPoints, logger } = options
    this.#logger = checkLogger(logger, 'options.logger')
    for (const name of ['read', 'append', 'appendConditionally', 'truncate'] as const) {
      if (typeof log?.[name] !== 'function') throw new TypeError(`log must be a RevisionedLog (with ${name}()), got ${describeValue(log)}`)
    }
    if (typeof apply !== 'function') throw new TypeError(`apply must be a function (state, update) => state, got ${describeValue(apply)}`)
    assertCodec(updateCodec, 'updateCodec')
    assertCodec(stateCodec, 'stateCodec')
    if (compactPoints !== undefined) {
      const { store, prefix } = compactPoints ?? {}
      for (const name of ['put', 'get', 'list', 'deleteMany'] as const) {
        if (typeof store?.[name] !== 'function') throw new TypeError(`compactPoints.store must be a snapshot store (with ${name}()), got ${describeValue(store)}`)
      }
      assertPrefix(prefix)
      if (prefix === '') throw new RangeError('compactPoints.prefix must not be empty: the compact points of one state need a prefix of their own')
    }
    this.#log = log
    this.#apply = apply
    this.#updateCodec = updateCodec
    this.#stateCodec = stateCodec
    this.#compactPoints = compactPoints === undefined ? undefined : Object.freeze({ ...compactPoints })
  }

  getState(): S {
    this.#assertOpen()
    if (this.#state === undefined) throw notInitialized()
    return this.#state.value
  }

  getRevision(): bigint {
    return this.#revision
  }

  bytesWrittenSinceCompaction(): number {
    return this.#bytesSinceCompaction
  }

  fetchUpdates(): Promise<void> {
    return this.#exclusive(() => this.#catchUp())
  }

  async updateState(generator: UpdateGenerator<S, U>): Promise<void> {
    await this.updateStateWithResult(generator)
  }

  async updateStateWithResult<R>(generator: UpdateGenerator<S, U, R>): Promise<R> {
    if (typeof generator !== 'function') throw new TypeError(`generator must be a function (state, updates) => result, got ${describeValue(generator)}`)
    return this.#exclusive(async () => {
      await this.#ensureInitialized()
      for (;;) {
        const state = this.#state!.value
        const updates: U[] = []
        const result = generator(state, updates)
        if (isThenable(result)) throw new TypeError('generator must be synchronous: it may run several times and must only derive updates from the state')
        if (updates.length === 0) return result
        const encoded = updates.map((u, i) => encodeWith(this.#updateCodec, u, () => `update ${i} of ${updates.length}`))
        // Other clients apply what the codec gives back, so this one does too:
        // a lossy codec (JSON drops undefined) must not make it diverge. And
        // an update that apply() rejects fails here, before it is written.
        const next = this.#applyAll(state, encoded, undefined)
        const data = encodeUpdates(encoded)
        const revision = await this.#appendConditionally(data)
        if (revision !== undefined) {
          this.#state = { value: next }
          this.#revision = revision
          this.#bytesSinceCompaction += data.byteLength
          return result
        }
        this.#logger.debug({ log: this.#where(), revision: this.#revision }, 'conditional update conflicted with another write; running the generator again on the newer state')
        await this.#catchUp()
      }
    })
  }

  updateStateUnconditionally(...updates: U[]): Promise<void> {
    return this.#exclusive(async () => {
      if (updates.length === 0) return
      // Entries before the initial state are skipped by every reader, so
      // writing one would lose the updates silently.
      await this.#ensureInitialized()
      const encoded = updates.map((u, i) => encodeWith(this.#updateCodec, u, () => `update ${i} of ${updates.length}`))
      await this.#log.append(encodeUpdates(encoded))
    })
  }

  initialize(initial: S): Promise<void> {
    return this.#exclusive(async () => {
      await this.#catchUp()
      const bytes = encodeWith(this.#stateCodec, initial, () => 'the initial state')
      const data = encodeInit(bytes)
      while (this.#state === undefined) {
        const revision = await this.#appendConditionally(data)
        if (revision === undefined) {
          await this.#catchUp()
          continue
        }
        this.#state = { value: this.#decodeState(bytes, revision) }
        this.#revision = revision
        this.#bytesSinceCompaction += data.byteLength
      }
    })
  }

  async compact(generator: (state: S) => S): Promise<void> {
    if (typeof generator !== 'function') throw new TypeError(`generator must be a function (state) => state, got ${describeValue(generator)}`)
    const points = this.#compactPoints
    if (points === undefined) throw new TypeError('compact() needs the compactPoints option (a snapshot store and a prefix)')
    return this.#exclusive(async () => {
      // A client that fell behind compacts the newest state, not its own: a
      // point older than the newest is of no use to any reader.
      await this.#catchUp()
      if (this.#state === undefined) throw notInitialized()
      const revision = this.#revision
      const existing = await listCompactPoints(points.store, points.prefix)
      // A compact point at this revision or later (by any client, written
      // since the catch-up read) already holds this state or a newer one.
      if (!existing.some((p) => p.revision >= revision)) {
        const bytes = encodeWith(this.#stateCodec, generator(this.#state!.value), () => `the compact point at revision ${revision}`)
        await points.store.put(compactPointKey(points.prefix, revision, this.#id), encodeCompactPoint(revision, bytes))
        this.#logger.info({ log: this.#where(), prefix: points.prefix, revision }, 'compact point written')
      }
      this.#bytesSinceCompaction = 0
      const older = existing.filter((p) => p.revision < revision)
      const previous = older[0]
      if (previous === undefined) return
      try {
        await this.#log.truncate(previous.revision + 1n)
      } catch (err) {
        // The entries stay readable; replay from a compact point is what
        // compaction is for, and it works without the truncation.
        if (!isTidemarkError(err, 'TIDEMARK_LOG_TRUNCATE_UNSUPPORTED')) throw err
        this.#logger.info({ log: this.#where(), ...errorFields(err) }, 'the log cannot be truncated; its entries stay')
      }
      // Points older than the previous one can no longer be replayed from.
      const stale = older.filter((p) => p.revision < previous.revision).map((p) => p.key)
      if (stale.length > 0) await points.store.deleteMany(stale)
    })
  }

  async close(): Promise<void> {
    this.#closed = true
    await this.#queue.catch(() => {})
  }

  /** One operation at a time per client: each starts from the state the previous one left. */
  #exclusive<T>(work: () => Promise<T>): Promise<T> {
    const run = (): Promise<T> => {
      this.#assertOpen()
      return work()
    }
    const result = this.#queue.then(run, run)
    this.#queue = result.catch(() => {})
    return result
  }

  async #ensureInitialized(): Promise<void> {
    if (!this.#started || this.#state === undefined) await this.#catchUp()
    if (this.#state === undefined) throw notInitialized()
  }

  /**
   * Reads the log after the local revision. Every read of the log goes
   * through here, so that a truncation past the local revision, by a
   * compaction this client did not see, continues from the newest compact
   * point, which covers the missing entries. Another truncation can land
   * while it reads from that point; each one moves the client to a strictly
   * newer point, so the loop ends once it reads faster than others compact.
   */
  async #catchUp(): Promise<void> {
    if (!this.#started) {
      await this.#loadCompactPoint()
      this.#started = true
    }
    for (;;) {
      try {
        await this.#replay()
        return
      } catch (err) {
        if (!isTidemarkError(err, 'TIDEMARK_LOG_TRUNCATED') || this.#compactPoints === undefined) throw err
        if (!(await this.#loadCompactPoint())) throw err
      }
    }
  }

  /**
   * A conditional append on the local revision. The Kafka log checks the
   * basis before it writes and fails with TIDEMARK_LOG_TRUNCATED when it was
   * truncated away: then nothing was written, and the compact point the log
   * was truncated behind lies after the basis, so it is a conflict; the
   * catch-up that follows continues from the newest compact point.
   */
  async #appendConditionally(data: Uint8Array): Promise<bigint | undefined> {
    try {
      return await this.#log.appendConditionally(data, this.#revision)
    } catch (err) {
      if (isTidemarkError(err, 'TIDEMARK_LOG_TRUNCATED')) return undefined
      throw err
    }
  }

  async #replay(): Promise<void> {
    for await (const entry of this.#log.read(this.#revision + 1n)) {
      this.#assertOpen()
      this.#applyEntry(entry)
    }
  }

  #applyEntry(entry: LogEntry): void {
    const where = this.#where()
    const decoded = decodeEntry(entry.data, entry.revision, where)
    if (decoded.kind === 'init') {
      // Only the first initial state counts: initialize() writes one only
      // where none took effect before, so a later one is a lost race.
      if (this.#state === undefined) this.#state = { value: this.#decodeState(decoded.state, entry.revision) }
    } else if (this.#state !== undefined) {
      this.#state = { value: this.#applyAll(this.#state.value, decoded.updates, entry.revision) }
    }
    // Updates before the initial state have no state to apply to; every
    // client skips them alike.
    this.#revision = entry.revision
    this.#bytesSinceCompaction += entry.data.byteLength
  }

  /** Applies the encoded updates in order; the state changes only if all of them apply. */
  #applyAll(state: S, encoded: readonly Uint8Array[], revision: bigint | undefined): S {
    let next = state
    for (const bytes of encoded) next = this.#apply(next, this.#decodeUpdate(bytes, revision))
    return next
  }

  #decodeUpdate(bytes: Uint8Array, revision: bigint | undefined): U {
    try {
      return this.#updateCodec.decode(bytes)
    } catch (cause) {
      const at = revision === undefined ? 'a new update' : `the update at revision ${revision}`
      throw new TidemarkError('TIDEMARK_DECODE_FAILED', `${at} of ${this.#where()} could not be decoded by the ${this.#updateCodec.name} codec: ${(cause as Error)?.message ?? cause}`, {
        cause,
        details: { revision },
      })
    }
  }

  #decodeState(bytes: Uint8Array, revision: bigint): S {
    try {
      return this.#stateCodec.decode(bytes)
    } catch (cause) {
      throw new TidemarkError('TIDEMARK_DECODE_FAILED', `the state at revision ${revision} of ${this.#where()} could not be decoded by the ${this.#stateCodec.name} codec: ${(cause as Error)?.message ?? cause}`, {
        cause,
        details: { revision },
      })
    }
  }

  /**
   * Loads the newest compact point that verifies, if it is newer than the
   * local state. Points that fail verification are skipped: the previous one
   * still has its log entries (truncation runs one compaction behind).
   */
  async #loadCompactPoint(): Promise<boolean> {
    const points = this.#compactPoints
    if (points === undefined) return false
    const problems: string[] = []
    let candidates: CompactPointRef[] = await listCompactPoints(points.store, points.prefix)
    candidates = candidates.filter((p) => p.revision > this.#revision)
    for (const point of candidates) {
      let body: Buffer
      try {
        body = await readBody(points.store, point.key)
      } catch (err) {
        if (!isTidemarkError(err, 'TIDEMARK_DFS_NOT_FOUND')) throw err
        // A compaction deleted it since the listing, which it does only to
        // points two behind a newer one: list again and take that.
        return this.#loadCompactPoint()
      }
      const decoded = decodeCompactPoint(body, point.revision)
      if ('problem' in decoded) {
        this.#logger.warn({ log: this.#where(), key: point.key, problem: decoded.problem }, 'compact point does not verify; trying an older one')
        problems.push(`${point.key}: ${decoded.problem}`)
        continue
      }
      const oldest = await this.#log.oldest()
      if (problems.length > 0 && point.revision + 1n < oldest) break
      this.#state = { value: this.#decodeState(decoded.state, point.revision) }
      this.#revision = point.revision
      this.#bytesSinceCompaction = 0
      this.#logger.info({ log: this.#where(), key: point.key, revision: point.revision }, 'continuing from a compact point')
      return true
    }
    if (problems.length > 0) {
      throw new TidemarkError('TIDEMARK_SYNC_COMPACT_POINT_CORRUPT', `no usable compact point under ${points.prefix}: ${problems.join('; ')}`, {
        details: { prefix: points.prefix, problems },
      })
    }
    return false
  }

  #where(): string {
    return (this.#log as { location?: string }).location ?? 'the log'
  }

  #assertOpen(): void {
    if (this.#closed) throw new TidemarkError('TIDEMARK_SYNC_CLOSED', `the synchronizer on ${this.#where()} is closed`)
  }
}

function notInitialized(): TidemarkError {
  return new TidemarkError('TIDEMARK_SYNC_NOT_INITIALIZED', 'the synchronizer has no state yet: neither the log nor a compact point holds one (call initialize() first)')
}

function assertCodec(codec: unknown, name: string): void {
  const c = codec as Partial<Codec<unknown>> | undefined
  if (typeof c?.encode !== 'function' || typeof c.decode !== 'function' || typeof c.name !== 'string') {
    throw new TypeError(`${name} must be a codec ({ name, encode(value), decode(bytes) }), got ${describeValue(codec)}`)
  }
}

function isThenable(value: unknown): boolean {
  return typeof (value as { then?: unknown } | null)?.then === 'function'
}
