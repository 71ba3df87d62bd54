/**
 * The versioned value layout (docs/state-evolution.md, docs/formats.md).
 *
 * A state declared with `version` stores each value as a header and then the
 * codec's bytes:
 *
 *   0x01 <version in ASCII decimal, 1-5 digits> 0x3a (':') <codec bytes>
 *
 * The header is ASCII, so a JSON state's value stays UTF-8 text, and a read at
 * the current version is one startsWith() and one slice() more than a read of
 * an unversioned value. A JSON state's value without a header (written before
 * the state had a version) is a version 1 value: JSON.stringify never writes a
 * leading control character, so the two cannot be confused. Other codecs may
 * write any bytes, so a versioned state of another codec holds headers only.
 * States declared without a version keep the plain layout: the codec's bytes.
 */
import { TidemarkError } from '../errors.js'
import { decodeWith, type Codec } from './codec.js'

/** The first byte of every versioned value. */
export const VERSION_TAG = 0x01
const TAG_CHAR = '\u0001'
const END = 0x3a
/** Highest version a state may declare. */
export const MAX_STATE_VERSION = 65535

/** A state's version and upgrades, made once by valueState()/mapState(). */
export interface Versioning {
  readonly version: number
  /** The current version's header as text ('\u00013:') and as bytes. */
  readonly header: string
  readonly headerBytes: Buffer
  /** upgrades[v] turns a version v value into a version v + 1 value. */
  readonly upgrades: ReadonlyArray<((value: unknown) => unknown) | undefined>
  /** The state's codec is jsonCodec(): a value without a header is a version 1 value. */
  readonly json: boolean
}

export function versionHeader(version: number): string {
  return `${TAG_CHAR}${version}:`
}

/** The version of a versioned value and where its codec bytes start; undefined when it has no (valid) header. */
export function readHeader(bytes: Uint8Array): { version: number; start: number } | undefined {
  if (bytes.length < 3 || bytes[0] !== VERSION_TAG) return undefined
  let version = 0
  for (let i = 1; i < bytes.length && i <= 6; i++) {
    const c = bytes[i]!
    if (c === END) return i > 1 && version >= 1 ? { version, start: i + 1 } : undefined
    if (c < 0x30 || c > 0x39) return undefined
    version = version * 10 + (c - 0x30)
  }
  return undefined
}

/** readHeader for a value LevelDB handed over as text (ASCII header, so offsets agree). */
export function readTextHeader(text: string): { version: number; start: number } | undefined {
  if (text.charCodeAt(0) !== VERSION_TAG) return undefined
  const end = text.indexOf(':', 1)
  if (end < 2 || end > 6) return undefined
  let version = 0
  for (let i = 1; i < end; i++) {
    const c = text.charCodeAt(i)
    if (c < 0x30 || c > 0x39) return undefined
    version = version * 10 + (c - 0x30)
  }
  return version >= 1 ? { version, start: end + 1 } : undefined
}

function headerMissing(name: string, what: string): TidemarkError {
  return new TidemarkError('TIDEMARK_DECODE_FAILED', `${what}: the stored value has no version header, which every value of the versioned state ${JSON.stringify(name)} has`)
}

/** The version of a stored value, or the error of one that has none. */
function versionOf(ver: Versioning, header: { version: number } | undefined, name: string, what: () => string): number {
  if (header !== undefined) return header.version
  if (ver.json) return 1
  throw headerMissing(name, what())
}

/**
 * Runs the upgrades from `from` to the current version, one step at a time.
 * A value of a higher version than the program's is refused: the store's
 * version record makes open fail before, so this is a value that got there
 * some other way (a copy of keys between stores).
 */
export function upgradeValue(ver: Versioning, name: string, from: number, value: unknown, what: () => string): unknown {
  if (from === ver.version) return value
  if (from > ver.version) {
    throw new TidemarkError('TIDEMARK_STATE_VERSION_AHEAD', `${what()}: the value is at version ${from}, newer than the version this program declares for state ${JSON.stringify(name)} (${ver.version})`, { details: { state: name, storedVersion: from, declaredVersion: ver.version } })
  }
  let v = value
  for (let step = from; step < ver.version; step++) {
    try {
      v = ver.upgrades[step]!(v)
    } catch (cause) {
      throw new TidemarkError('TIDEMARK_STATE_UPGRADE_FAILED', `${what()}: upgrade ${step} -> ${step + 1} of state ${JSON.stringify(name)} failed: ${(cause as Error)?.message ?? cause}`, { cause, details: { state: name, fromVersion: step } })
    }
  }
  return v
}

/** Decodes a versioned value's bytes and upgrades it to the current version. */
export function decodeVersioned<V>(def: { name: string; codec: Codec<V> }, ver: Versioning, bytes: Buffer, what: () => string): V {
  const header = readHeader(bytes)
  const from = versionOf(ver, header, def.name, what)
  const value = decodeWith(def.codec, header === undefined ? bytes : bytes.subarray(header.start), what)
  return upgradeValue(ver, def.name, from, value, what) as V
}

/**
 * A JSON state's stored text that is not at the current version (the current
 * one is sliced by the caller): its version and its JSON text.
 */
export function splitText(ver: Versioning, name: string, text: string, what: () => string): { version: number; json: string } {
  const header = readTextHeader(text)
  const version = versionOf(ver, header, name, what)
  return { version, json: header === undefined ? text : text.slice(header.start) }
}
