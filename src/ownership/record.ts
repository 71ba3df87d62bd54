import { MAX_EPOCH } from '../snapshot/layout.js'

/** The `format` of a claim object; a claim of another format is unreadable to this version. */
export const CLAIM_FORMAT = 'tidemark-claim/1'

/** A claim object larger than this is not one (claims are a few hundred bytes); it is not read in full. */
export const MAX_CLAIM_BYTES = 16 * 1024

/**
 * The body of `<job>/<partition>/owner.json`, as JSON. docs/ownership.md
 * describes each field; `epoch` is the fencing token and only grows.
 */
export interface ClaimRecord {
  format: typeof CLAIM_FORMAT
  job: string
  partition: string
  /** The owner's fencing token: higher than every earlier claim's, and than every snapshot epoch its acquirer had seen. */
  epoch: number
  owner: ClaimOwner
  /** The lease length the holder renews with, or null for a claim held without a lease. */
  leaseMs: number | null
  /**
   * Until when (ms since the Unix epoch, by the holder's clock) the claim
   * holds; 0 once released; null for a claim held without a lease, which
   * only a forced takeover ends.
   */
  leaseUntil: number | null
  /** The consumer group's generation id that assigned the partition, when a group did. */
  generation?: number
  /**
   * The key of the member lease (`<job>/_members/<id>.json`) the claim holds
   * by, for a claim without a lease of its own (leaseMs and leaseUntil null):
   * it holds while that lease does.
   */
  member?: string
  /** When the claim was taken (holder's clock). */
  takenAt: number
  /** When the claim was last renewed (holder's clock). */
  renewedAt?: number
  /** When the holder released the claim (holder's clock). */
  releasedAt?: number
  /**
   * Written at release: the key of the last snapshot manifest the holder
   * committed. An acquirer that listed the snapshots before taking the claim
   * lists again if its listing lacks it (a hand-off snapshot committed
   * between its listing and the release).
   */
  lastSnapshot?: string
  /**
   * Written by a consumer group's new assignee whose wait for this holder's
   * release ran out (acquirer's clock, and its owner name): the holder's next
   * look at its claim finds it changed and stops; the assignee takes the
   * claim by force only a grace period later (docs/ownership.md, "Through a
   * group round").
   */
  takeoverAt?: number
  takeoverBy?: string
}

export interface ClaimOwner {
  /** Random, one per acquireClaim() call: what tells two owners apart, also two incarnations of one process. */
  id: string
  /** For humans: the `owner` option, by default `<host>:<pid>`. */
  name: string
  host: string
  pid: number
  /**
   * The holder process's identity on its Linux host (ProcessIdentity):
   * with them an acquirer on the same host takes the claim at once once it
   * proves that process gone. Absent off Linux and in claims of older
   * versions, which are then taken only as before.
   */
  bootId?: string
  pidNamespace?: string
  startTime?: number
}

/** The record, or why the bytes are not a claim of this job and partition. */
export function parseClaim(body: Buffer, job: string, partition: string): { record: ClaimRecord } | { problem: string } {
  let value: unknown
  try {
    value = JSON.parse(body.toString('utf8'))
  } catch (err) {
    return { problem: `not JSON (${(err as Error).message})` }
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { problem: 'not a JSON object' }
  const r = value as Record<string, unknown>
  if (r.format !== CLAIM_FORMAT) return { problem: `format is ${JSON.stringify(r.format)}, not '${CLAIM_FORMAT}'` }
  if (r.job !== job || r.partition !== partition) return { problem: `it names job ${JSON.stringify(r.job)} partition ${JSON.stringify(r.partition)}` }
  if (!isInteger(r.epoch, 1, MAX_EPOCH)) return { problem: `epoch ${JSON.stringify(r.epoch)} is not an integer from 1 to ${MAX_EPOCH}` }
  const owner = r.owner as Record<string, unknown> | null
  if (typeof owner !== 'object' || owner === null || typeof owner.id !== 'string' || owner.id === '' ||
    typeof owner.name !== 'string' || typeof owner.host !== 'string' || !isInteger(owner.pid, 0)) {
    return { problem: 'owner is not { id, name, host, pid }' }
  }
  for (const name of ['bootId', 'pidNamespace']) {
    if (owner[name] !== undefined && (typeof owner[name] !== 'string' || owner[name] === '')) return { problem: `owner.${name} ${JSON.stringify(owner[name])} is not a non-empty string` }
  }
  if (owner.startTime !== undefined && !isInteger(owner.startTime, 0)) return { problem: `owner.startTime ${JSON.stringify(owner.startTime)} is not an integer >= 0` }
  if (r.leaseMs !== null && !isInteger(r.leaseMs, 1)) return { problem: `leaseMs ${JSON.stringify(r.leaseMs)} is neither null nor a positive integer` }
  if (r.leaseUntil !== null && !isInteger(r.leaseUntil, 0)) return { problem: `leaseUntil ${JSON.stringify(r.leaseUntil)} is neither null nor an integer >= 0` }
  if (!isInteger(r.takenAt, 0)) return { problem: `takenAt ${JSON.stringify(r.takenAt)} is not an integer >= 0` }
  for (const name of ['generation', 'renewedAt', 'releasedAt', 'takeoverAt']) {
    if (r[name] !== undefined && !isInteger(r[name], name === 'generation' ? -Infinity : 0)) return { problem: `${name} ${JSON.stringify(r[name])} is not an integer` }
  }
  if (r.lastSnapshot !== undefined && typeof r.lastSnapshot !== 'string') return { problem: `lastSnapshot ${JSON.stringify(r.lastSnapshot)} is not a string` }
  if (r.member !== undefined && (typeof r.member !== 'string' || r.member === '')) return { problem: `member ${JSON.stringify(r.member)} is not a non-empty string` }
  if (r.takeoverBy !== undefined && typeof r.takeoverBy !== 'string') return { problem: `takeoverBy ${JSON.stringify(r.takeoverBy)} is not a string` }
  return { record: value as ClaimRecord }
}

/** One serialisation, so that a claim's bytes tell whether a write that seemed to fail landed (it is compared byte for byte). */
export function serializeClaim(record: ClaimRecord): Buffer {
  return Buffer.from(`${JSON.stringify(record, null, 2)}\n`, 'utf8')
}

function isInteger(value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= min && value <= max
}
