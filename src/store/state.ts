import { jsonCodec, type Codec } from './codec.js'
import { statePrefix } from './keys.js'

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
    throw new TypeError(`options must be an object ({ codec?, keyType? }), got ${options === null ? 'null' : Array.isArray(options) ? 'an array' : typeof options}`)
  }
}

export interface ValueStateOptions<V, T extends KeyType> {
  codec?: Codec<V>
  keyType?: T
}

export function valueState<V = unknown, T extends KeyType = 'string'>(name: string, options: ValueStateOptions<V, T> = {}): ValueState<V, KeyOf<T>> {
  checkOptions(options)
  return Object.freeze({
    kind: 'value' as const,
    name: checkName(name),
    codec: checkCodec(options.codec),
    keyType: checkKeyType(options.keyType ?? 'string', 'keyType'),
    prefix: statePrefix(name),
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
  return Object.freeze({
    kind: 'map' as const,
    name: checkName(name),
    codec: checkCodec(options.codec),
    keyType: checkKeyType(options.keyType ?? 'string', 'keyType'),
    subKeyType: checkKeyType(options.subKeyType ?? 'string', 'subKeyType'),
    prefix: statePrefix(name),
  })
}
