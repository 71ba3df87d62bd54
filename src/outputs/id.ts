import { TidemarkError } from '../errors.js'
import type { RecordId } from './types.js'
import { describeValue } from '../util/describe-value.js'

/** The header that carries a record's id (its string form, UTF-8) on every delivered record. */
export const RECORD_ID_HEADER = 'tidemark-id'

/** Version tag of the string form; a new form gets a new tag, and old ids keep parsing. */
const TAG = 'tm1'
const DIGITS = /^(0|[1-9][0-9]*)$/
const MAX_U32 = 2 ** 32 - 1
const MAX_OFFSET = 2n ** 63n - 1n

/**
 * `tm1:<job>:<topic>:<partition>:<offset>:<index>`, job and topic escaped with
 * encodeURIComponent (so no ':' inside them), numbers in base 10 without
 * leading zeros: one text per id, so a replay produces byte-identical ids.
 */
export function formatRecordId(id: RecordId): string {
  // Only what parseRecordId takes back: a text no parse accepts is no id.
  if (id === null || typeof id !== 'object') throw new TypeError(`formatRecordId(id): id must be { job, topic, partition, offset, index }, got ${describeValue(id)}`)
  const { job, topic, partition, offset, index } = id
  for (const [name, v] of [['job', job], ['topic', topic]] as const) {
    if (typeof v !== 'string' || v === '') throw new TypeError(`formatRecordId(id): id.${name} must be a non-empty string, got ${JSON.stringify(v)}`)
  }
  if (!Number.isInteger(partition) || partition < 0 || partition > MAX_U32) throw new RangeError(`formatRecordId(id): id.partition must be an integer from 0 to 2^32-1, got ${String(partition)}`)
  if (typeof offset !== 'bigint') throw new TypeError(`formatRecordId(id): id.offset must be a bigint, got ${typeof offset}`)
  if (offset < 0n || offset > MAX_OFFSET) throw new RangeError(`formatRecordId(id): id.offset must be from 0 to 2^63-1, got ${offset}`)
  if (!Number.isInteger(index) || index < 0 || index > MAX_U32) throw new RangeError(`formatRecordId(id): id.index must be an integer from 0 to 2^32-1, got ${String(index)}`)
  let key: string
  try {
    key = upstreamKey(job, topic, partition)
  } catch (err) {
    // encodeURIComponent refuses a lone surrogate.
    if (err instanceof URIError) throw new RangeError(`formatRecordId(id): id.job and id.topic must be well-formed UTF-16 (no lone surrogates)`, { cause: err })
    throw err
  }
  return `${key}:${offset}:${index}`
}

/**
 * The id's first three fields, `tm1:<job>:<topic>:<partition>`: the upstream
 * source partition, the unit of dedupe (ids of one upstream partition are
 * emitted in (offset, index) order).
 */
export function upstreamKey(job: string, topic: string, partition: number): string {
  return `${TAG}:${encodeURIComponent(job)}:${encodeURIComponent(topic)}:${partition}`
}

/** Parses a string-form id (or its UTF-8 bytes); anything else fails with TIDEMARK_OUTPUT_ID_INVALID. */
export function parseRecordId(text: string | Uint8Array): RecordId {
  if (typeof text !== 'string' && !(text instanceof Uint8Array)) throw new TypeError(`parseRecordId(text): text must be a string or a Uint8Array, got ${describeValue(text)}`)
  const s = typeof text === 'string' ? text : Buffer.from(text.buffer, text.byteOffset, text.byteLength).toString('utf8')
  const parts = s.split(':')
  const bad = (why: string): TidemarkError =>
    new TidemarkError('TIDEMARK_OUTPUT_ID_INVALID', `${JSON.stringify(s.length > 200 ? `${s.slice(0, 200)}...` : s)} is not a Tidemark record id (${why}); expected tm1:<job>:<topic>:<partition>:<offset>:<index>`, { details: { id: s.slice(0, 200) } })
  if (parts.length !== 6 || parts[0] !== TAG) throw bad(parts[0] !== TAG ? 'unknown tag' : 'wrong number of fields')
  const [, job, topic, partition, offset, index] = parts as [string, string, string, string, string, string]
  let decodedJob: string
  let decodedTopic: string
  try {
    decodedJob = decodeURIComponent(job)
    decodedTopic = decodeURIComponent(topic)
  } catch {
    throw bad('bad escape')
  }
  if (decodedJob === '' || decodedTopic === '') throw bad('empty job or topic')
  // Exactly one text per id: a parse of a re-escaped or padded form would let
  // two texts stand for one id, and dedupe compares the numbers, not the text.
  if (encodeURIComponent(decodedJob) !== job || encodeURIComponent(decodedTopic) !== topic) throw bad('not canonically escaped')
  if (!DIGITS.test(partition) || !DIGITS.test(offset) || !DIGITS.test(index)) throw bad('not a canonical number')
  const p = Number(partition)
  const i = Number(index)
  const o = BigInt(offset)
  if (p > MAX_U32 || i > MAX_U32 || o > MAX_OFFSET) throw bad('number out of range')
  return { job: decodedJob, topic: decodedTopic, partition: p, offset: o, index: i }
}
