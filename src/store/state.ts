import { isJsonCodec, jsonCodec, type Codec } from './codec.js'
import { statePrefix } from './keys.js'
import { MAX_STATE_VERSION, versionHeader, type Versioning } from './versioning.js'

export type KeyType = 'string' | 'bytes'
type KeyOf<T extends KeyType> = T extends 'bytes' ? Uint8Array : string

interface StateBase<V, K> {
  readonly name: string
  readonly codec: Codec<V>
  readonly keyType: KeyType
  /** Encoded name: every key of the state starts with it. */
  readonly prefix: Buffer
  /** Phantom field that carries the key type for inference; never set. */
  readonly __key?: K
  /** @internal Set by uncachedState(): the store's value cache never holds this state's values. */
  readonly uncached?: true
  /** The schema version values are read and written at; undefined: an unversioned state (values are the codec's bytes). */
  readonly version?: number
  /** @internal The version's header and upgrades (src/store/versioning.ts); set with `version`. */
  readonly versioning?: Versioning
}

/** key -> value. Keys of one state scan in byte order. */
export interface ValueState<V, K extends string | Uint8Array = string> extends StateBase<V, K> {
  readonly kind: 'value'
}

/** key -> sub-key -> value. Sub-keys of one key scan in byte order. */
export interface MapState<V, K extends string | Uint8Array = string, S extends string | Uint8Array = string> extends StateBase<V, K> {
  readonly kind: 'map'
  readonly subKeyType: KeyType
  readonly __subKey?: S
}

export type StateDefinition = ValueState<unknown, string | Uint8Array> | MapState<unknown, string | Uint8Array, string | Uint8Array>

const MAX_NAME_BYTES = 255

/**
 * @internal The same state with the store's value cache off. For Tidemark's
 * own states whose keys are written once and deleted soon (the outbox): their
 * writes and deletes would cost a cache entry each and push the hot keys of
 * the job's states out. Which definition the store was opened with decides.
 */
export function uncachedState<D extends StateDefinition>(def: D): D {
  const copy: D = { ...def, uncached: true }
  return Object.freeze(copy)
}

function checkName(name: unknown): string {
  if (typeof name !== 'string' || name.length === 0 || Buffer.byteLength(name) > MAX_NAME_BYTES) {
    throw new TypeError(`state name must be a non-empty string of at most ${MAX_NAME_BYTES} bytes, got ${JSON.stringify(name)}`)
  }
  return name
}

function checkKeyType(value: unknown, field: string): KeyType {
  if (value !== 'string' && value !== 'bytes') throw new TypeError(`${field} must be 'string' or 'bytes', got ${JSON.stringify(value)}`)
  return value
}

function checkCodec<V>(codec: Codec<V> | undefined): Codec<V> {
  if (codec === undefined) return jsonCodec<V>()
  if (codec === null || typeof codec.encode !== 'function' || typeof codec.decode !== 'function') {
    throw new TypeError('codec must have encode(value) and decode(bytes) functions (see customCodec)')
  }
  return codec
}

function checkOptions(options: unknown): void {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TypeError(`options must be an object ({ codec?, keyType?, version?, upgrade? }), got ${options === null ? 'null' : Array.isArray(options) ? 'an array' : typeof options}`)
  }
}

/** Upgrade functions by the version they upgrade from: `upgrade[v]` turns a version v value into a version v + 1 value. */
export type StateUpgrades = Readonly<Record<number, (value: never) => unknown>>

/** The versioning of a definition, or undefined for an unversioned state; checked once here. */
function checkVersioning(options: { version?: unknown; upgrade?: unknown }, codec: Codec<unknown>): { version?: number; versioning?: Versioning } {
  const { version, upgrade } = options
  if (version === undefined) {
    if (upgrade !== undefined) throw new TypeError('options.upgrade needs options.version: the version the upgrades lead to')
    return {}
  }
  if (typeof version !== 'number' || !Number.isInteger(version) || version < 1 || version > MAX_STATE_VERSION) {
    throw new RangeError(`options.version must be an integer from 1 to ${MAX_STATE_VERSION}, got ${JSON.stringify(version)}`)
  }
  const given = upgrade ?? {}
  if (typeof given !== 'object' || given === null || Array.isArray(given)) throw new TypeError(`options.upgrade must be an object of functions by version ({ 1: (v) => ... }), got ${given === null ? 'null' : Array.isArray(given) ? 'an array' : typeof given}`)
  const table = given as Record<string, unknown>
  for (const key of Object.keys(table)) {
    const n = Number(key)
    if (!Number.isInteger(n) || n < 1 || n >= version) throw new RangeError(`options.upgrade has a function for version ${JSON.stringify(key)}; with version ${version} it takes versions 1 to ${version - 1}`)
  }
  const upgrades: Array<((value: unknown) => unknown) | undefined> = [undefined]
  for (let v = 1; v < version; v++) {
    const fn = table[v]
    if (typeof fn !== 'function') throw new TypeError(`options.upgrade[${v}] must be a function that turns a version ${v} value into a version ${v + 1} value, got ${typeof fn}`)
    upgrades.push(fn as (value: unknown) => unknown)
  }
  const header = versionHeader(version)
  return {
    version,
    versioning: Object.freeze({ version, header, headerBytes: Buffer.from(header, 'latin1'), upgrades: Object.freeze(upgrades), json: isJsonCodec(codec) }),
  }
}

export interface ValueStateOptions<V, T extends KeyType> {
  codec?: Codec<V>
  keyType?: T
  /**
   * The schema version of the state's values (an integer from 1). Values are
   * read at this version, older ones upgraded on read, and written at it.
   * Without it the state is unversioned: its values are the codec's bytes,
   * as they always were. See docs/state-evolution.md.
   */
  version?: number
  /** With `version`: for each older version v, the function that turns a version v value into a version v + 1 value. */
  upgrade?: StateUpgrades
}

export function valueState<V = unknown, T extends KeyType = 'string'>(name: string, options: ValueStateOptions<V, T> = {}): ValueState<V, KeyOf<T>> {
  checkOptions(options)
  const codec = checkCodec(options.codec)
  return Object.freeze({
    kind: 'value' as const,
    name: checkName(name),
    codec,
    keyType: checkKeyType(options.keyType ?? 'string', 'keyType'),
    prefix: statePrefix(name),
    ...checkVersioning(options, codec as Codec<unknown>),
  })
}

export interface MapStateOptions<V, T extends KeyType, ST extends KeyType> extends ValueStateOptions<V, T> {
  subKeyType?: ST
}

export function mapState<V = unknown, T extends KeyType = 'string', ST extends KeyType = 'string'>(
  name: string,
  options: MapStateOptions<V, T, ST> = {},
): MapState<V, KeyOf<T>, KeyOf<ST>> {
  checkOptions(options)
  const codec = checkCodec(options.codec)
  return Object.freeze({
    kind: 'map' as const,
    name: checkName(name),
    codec,
    keyType: checkKeyType(options.keyType ?? 'string', 'keyType'),
    subKeyType: checkKeyType(options.subKeyType ?? 'string', 'subKeyType'),
    prefix: statePrefix(name),
    ...checkVersioning(options, codec as Codec<unknown>),
  })
}
