/**
 * A file of state records, one JSON object per line, as `tidemark state
 * dump` prints them: {"state","key","value"}, map states with "subKey",
 * keys that are not UTF-8 as "keyBase64" / "subKeyBase64" (written as
 * those bytes), values of a codec other than JSON as "valueBase64" (the
 * codec's bytes), and "version" for the version a versioned state's value
 * is at. What
 * bootstrapState reads a job's state from (docs/state-evolution.md).
 */
import { createReadStream } from 'node:fs'
import { createInterface } from 'node:readline'
import { TidemarkError } from '../errors.js'
import { decodeStateValue, isJsonCodec, versionHeader, type StateDefinition } from '../store/index.js'
import { describeValue } from '../util/index.js'
import type { StateEntry } from './types.js'

const FIELDS = ['state', 'key', 'keyBase64', 'subKey', 'subKeyBase64', 'value', 'valueBase64', 'version']
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/
const utf8 = new TextDecoder('utf-8', { fatal: true })

/**
 * The records of a JSON lines file as entries of `states` (the target
 * program's definitions), each value decoded by its state's codec and, for
 * a versioned state, upgraded from the record's `version` to the current
 * one. A line that is not a record of one of the states fails with
 * TIDEMARK_TRANSFORM_ENTRY_INVALID (details.line); blank lines are skipped.
 */
export async function* readStateRecords(path: string, states: readonly StateDefinition[]): AsyncGenerator<StateEntry> {
  if (typeof path !== 'string' || path === '') throw new TypeError(`path must be a non-empty string, got ${describeValue(path)}`)
  if (!Array.isArray(states)) throw new TypeError(`states must be an array of state definitions, got ${describeValue(states)}`)
  const byName = new Map(states.map((s) => [s.name, s]))
  const input = createReadStream(path, 'utf8')
  const lines = createInterface({ input, crlfDelay: Infinity })
  let line = 0
  try {
    for await (const text of lines) {
      line++
      if (text.trim() === '') continue
      yield parseRecord(text, byName, `${path} line ${line}`, line)
    }
  } finally {
    lines.close()
    input.destroy()
  }
}

/** One line as an entry; `where` names it in errors. */
export function parseRecord(text: string, byName: ReadonlyMap<string, StateDefinition>, where: string, line: number): StateEntry {
  const bad = (reason: string, message: string, state?: string): TidemarkError =>
    new TidemarkError('TIDEMARK_TRANSFORM_ENTRY_INVALID', `${where}: ${message}`, { details: { reason, line, ...(state === undefined ? {} : { state }) } })
  let doc: unknown
  try {
    doc = JSON.parse(text)
  } catch (err) {
    throw bad('not-a-record', `not JSON (${(err as Error).message})`)
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) throw bad('not-a-record', `a record is a JSON object { state, key, value }, got ${describeValue(doc)}`)
  const r = doc as Record<string, unknown>
  const unknown = Object.keys(r).find((k) => !FIELDS.includes(k))
  if (unknown !== undefined) throw bad('not-a-record', `unknown field ${JSON.stringify(unknown)}; a record has ${FIELDS.join(', ')}`)
  const def = typeof r.state === 'string' ? byName.get(r.state) : undefined
  if (def === undefined) throw bad('unknown-state', `state ${describeValue(r.state)} is not one of the target's states (${[...byName.keys()].join(', ') || 'none'})`)
  const state = def.name

  const keyOf = (name: 'key' | 'subKey', type: 'string' | 'bytes'): string | Uint8Array | undefined => {
    const plain = r[name]
    const encoded = r[`${name}Base64`]
    if (plain !== undefined && encoded !== undefined) throw bad(name === 'key' ? 'key' : 'sub-key', `give ${name} or ${name}Base64, not both`, state)
    if (plain === undefined && encoded === undefined) return undefined
    if (plain !== undefined) {
      if (typeof plain !== 'string') throw bad(name === 'key' ? 'key' : 'sub-key', `${name} must be a string, got ${describeValue(plain)}`, state)
      return type === 'string' ? plain : Buffer.from(plain, 'utf8')
    }
    const bytes = base64(encoded, `${name}Base64`)
    if (type === 'bytes') return bytes
    // A string state's key that is not UTF-8 is written as the bytes it was (state dump prints it so).
    try {
      return utf8.decode(bytes)
    } catch {
      return bytes
    }
  }
  const base64 = (value: unknown, field: string): Buffer => {
    if (typeof value !== 'string' || !BASE64.test(value)) throw bad('not-a-record', `${field} must be base64 text, got ${describeValue(value)}`, state)
    return Buffer.from(value, 'base64')
  }

  const key = keyOf('key', def.keyType)
  if (key === undefined) throw bad('key', 'the record has no key (key or keyBase64)', state)
  const subKey = def.kind === 'map' ? keyOf('subKey', def.subKeyType) : undefined
  if (def.kind === 'map' && subKey === undefined) throw bad('sub-key', `state ${JSON.stringify(state)} is a map state: the record needs a subKey (or subKeyBase64)`, state)
  if (def.kind === 'value' && (r.subKey !== undefined || r.subKeyBase64 !== undefined)) throw bad('sub-key', `state ${JSON.stringify(state)} is a value state: the record must have no subKey`, state)

  if ((r.value === undefined) === (r.valueBase64 === undefined)) throw bad('value', 'the record needs exactly one of value and valueBase64', state)
  let version: number | undefined
  if (r.version !== undefined) {
    if (typeof r.version !== 'number' || !Number.isInteger(r.version) || r.version < 1 || r.version > 65535) throw bad('version', `version must be an integer from 1 to 65535, got ${describeValue(r.version)}`, state)
    if (def.version === undefined) throw bad('version', `state ${JSON.stringify(state)} declares no version, and the record's value is at version ${r.version}`, state)
    version = r.version
  } else if (def.version !== undefined) {
    // Neither "the current shape" nor "version 1" can be assumed without corrupting the other.
    throw bad('version', `state ${JSON.stringify(state)} is versioned (version ${def.version}): give the version its value is at ("version": ${def.version} for the current shape)`, state)
  }
  const what = (): string => `${where} (state ${state})`
  let value: unknown
  if (r.valueBase64 === undefined && isJsonCodec(def.codec) && (version === undefined || version === def.version)) {
    // A JSON value in its current shape: as it is.
    value = r.value
  } else {
    const bytes = r.valueBase64 === undefined ? Buffer.from(JSON.stringify(r.value), 'utf8') : base64(r.valueBase64, 'valueBase64')
    value = decodeStateValue(def, version === undefined ? bytes : Buffer.concat([Buffer.from(versionHeader(version), 'latin1'), bytes]), what)
  }
  return { state, key, ...(subKey === undefined ? {} : { subKey }), value }
}
