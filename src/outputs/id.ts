import { TidemarkError } from '../errors.js'
import type { RecordId } from './types.js'

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
  return `${upstreamKey(id.job, id.topic, id.partition)}:${id.offset}:${id.index}`
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
