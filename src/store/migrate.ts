/**
 * Eager migration of a versioned state: every value rewritten at the
 * state's current version, in bounded batches, without a source position.
 * Each batch, and the record of how far the migration got, are one LevelDB
 * commit, so a migration killed at any point resumes after the last batch it
 * committed and every value stays readable throughout (docs/state-evolution.md).
 */
import { TidemarkError } from '../errors.js'
import { checkInt } from '../util/index.js'
import { metadataKey, prefixEnd } from './keys.js'
import type { PartitionStore } from './partition-store.js'
import type { MapState, StateDefinition, ValueState } from './state.js'
import type { PendingWrite } from './transaction-types.js'
import { successor } from './transaction-util.js'
import { decodeVersioned, readHeader } from './versioning.js'
import { encodeWith } from './codec.js'

export interface MigrateProgress {
  state: string
  version: number
  /** Values looked at so far, over every run of this migration. */
  scanned: number
  /** Values rewritten (the others were at the current version already). */
  rewritten: number
  /** The last batch was committed: every value is at the current version. */
  done: boolean
}

export interface MigrateOptions {
  /** Values read, and at most rewritten, per commit: the migration's extra memory. Default 1000, from 1 to 100,000. */
  batchSize?: number
  /** Called after each committed batch (listener errors are not caught). */
  onProgress?: (progress: MigrateProgress) => void
}

export interface MigrateResult extends MigrateProgress {
  /** The migration went on from a run that did not finish. */
  resumed: boolean
}

/** The progress record of a migration, metadata `tidemark.migrate.<state>`. */
interface ProgressRecord {
  version: number
  /** Hex of the last LevelDB key the committed batches covered. */
  after: string
  scanned: number
  rewritten: number
}

export const MIGRATE_METADATA_PREFIX = 'tidemark.migrate.'

/**
 * Rewrites every value of `def`, a versioned state of `store`, at its current
 * version. Run it while nothing else commits to the store (before a
 * processor starts, or on a stopped job's store): a value a handler writes
 * between a batch's read and its commit would be overwritten. A killed run
 * resumes where its last commit left off when called again with the same
 * version; the store records the state's new version with the first
 * rewritten value, as any write does.
 */
export async function migrateState(store: PartitionStore, def: ValueState<unknown, string | Uint8Array> | MapState<unknown, string | Uint8Array, string | Uint8Array>, options: MigrateOptions = {}): Promise<MigrateResult> {
  store.checkState(def as StateDefinition)
  const ver = def.versioning
  if (ver === undefined) throw new TypeError(`state ${JSON.stringify(def.name)} has no version: only a versioned state (valueState(name, { version, upgrade })) can be migrated`)
  if (options === null || typeof options !== 'object') throw new TypeError('options must be an object ({ batchSize?, onProgress? })')
  const batchSize = checkInt(options.batchSize ?? 1000, 'batchSize', 1, 100_000)
  const onProgress = options.onProgress
  if (onProgress !== undefined && typeof onProgress !== 'function') throw new TypeError(`onProgress must be a function, got ${typeof onProgress}`)

  const metaName = `${MIGRATE_METADATA_PREFIX}${def.name}`
  const metaId = metadataKey(metaName).toString('latin1')
  const saved = await store.getMetadata<ProgressRecord>(metaName)
  const resumed = saved !== undefined && saved.version === ver.version
  let after: Buffer | undefined = resumed && saved.after !== '' ? Buffer.from(saved.after, 'hex') : undefined
  let scanned = resumed ? saved.scanned : 0
  let rewritten = resumed ? saved.rewritten : 0
  const end = prefixEnd(def.prefix)
  const describe = (key: Buffer) => (): string => `state ${def.name} key 0x${key.subarray(def.prefix.length).toString('hex')}`

  for (;;) {
    const writes = new Map<string, PendingWrite>()
    let seen = 0
    let last: Buffer | undefined
    for await (const [key, bytes] of store.scan({ gte: after === undefined ? def.prefix : successor(after), lt: end, reverse: false })) {
      seen++
      last = key
      if (readHeader(bytes)?.version !== ver.version) {
        const value = decodeVersioned(def, ver, bytes, describe(key))
        const encoded = encodeWith(def.codec, value, describe(key))
        writes.set(key.toString('latin1'), write(Buffer.concat([ver.headerBytes, encoded]), true))
      }
      if (seen === batchSize) break
    }
    const done = seen < batchSize
    scanned += seen
    rewritten += writes.size
    if (last !== undefined) after = Buffer.from(last)
    const record: ProgressRecord = { version: ver.version, after: after?.toString('hex') ?? '', scanned, rewritten }
    // The progress record goes with the batch; the last batch removes it.
    writes.set(metaId, write(done ? undefined : JSON.stringify(record), false))
    const versions = writes.size > 1 && store.versionBehind(def as StateDefinition) ? new Set([def as StateDefinition]) : undefined
    try {
      await store.commitBatch(writes, [], {}, versions)
    } catch (err) {
      throw err instanceof TidemarkError ? err : new TidemarkError('TIDEMARK_COMMIT_FAILED', `migration of state ${def.name} failed: ${(err as Error)?.message ?? err}`, { cause: err })
    }
    const progress: MigrateProgress = { state: def.name, version: ver.version, scanned, rewritten, done }
    onProgress?.(progress)
    if (done) return { ...progress, resumed }
  }
}

function write(value: Buffer | string | undefined, cache: boolean): PendingWrite {
  return { value, decoded: undefined, exact: false, cache, ascii: false, header: '' }
}
