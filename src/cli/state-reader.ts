/**
 * Reads a partition store's states without their definitions, for
 * `tidemark state`. The store's registry names each state and its kind
 * (value or map); codecs are the program's and unknown here, so values are
 * shown as JSON when their bytes are JSON (the default codec) and as base64
 * otherwise, and keys as text when they are UTF-8, base64 otherwise. A
 * versioned state's value is shown without its header, with its `version`.
 */
import { TidemarkError } from '../errors.js'
import { mapKeyPrefix, prefixEnd, REGISTRY_PREFIX, statePrefix } from '../store/keys.js'
import type { PartitionStore } from '../store/partition-store.js'
import { readHeader } from '../store/versioning.js'

export type StateKind = 'value' | 'map'

/** One stored entry, as `state get` and `state dump` print it (one JSON line each). */
export interface StateRecord {
  state: string
  key?: string
  keyBase64?: string
  subKey?: string
  subKeyBase64?: string
  value?: unknown
  valueBase64?: string
  /** The version of a versioned state's value (its header, docs/formats.md#versioned-values); the value is shown without it. */
  version?: number
}

const utf8 = new TextDecoder('utf-8', { fatal: true })

function text(bytes: Buffer): string | undefined {
  try {
    return utf8.decode(bytes)
  } catch {
    return undefined
  }
}

function keyField(name: 'key' | 'subKey', bytes: Buffer): Partial<StateRecord> {
  const t = text(bytes)
  return t === undefined ? { [`${name}Base64`]: bytes.toString('base64') } : { [name]: t }
}

/** `versioned`: the store records a version for the state, so its values may carry a version header. */
function valueField(stored: Buffer, versioned: boolean): Partial<StateRecord> {
  const header = versioned ? readHeader(stored) : undefined
  const bytes = header === undefined ? stored : stored.subarray(header.start)
  const t = text(bytes)
  if (t !== undefined) {
    try {
      return { ...(header === undefined ? {} : { version: header.version }), value: JSON.parse(t) as unknown }
    } catch {
      // Not JSON: another codec's bytes.
    }
  }
  return { ...(header === undefined ? {} : { version: header.version }), valueBase64: bytes.toString('base64') }
}

/** Every state the store registered, by name. */
export async function storeStates(store: PartitionStore): Promise<Map<string, StateKind>> {
  const states = new Map<string, StateKind>()
  for await (const [key, value] of store.scan({ gte: REGISTRY_PREFIX, lt: prefixEnd(REGISTRY_PREFIX), reverse: false })) {
    states.set(key.subarray(REGISTRY_PREFIX.length).toString('utf8'), (JSON.parse(value.toString('utf8')) as { kind: StateKind }).kind)
  }
  return states
}

function kindOf(states: Map<string, StateKind>, name: string, store: PartitionStore): StateKind {
  const kind = states.get(name)
  if (kind === undefined) {
    throw new TidemarkError('TIDEMARK_UNKNOWN_STATE', `state ${JSON.stringify(name)} is not one of the states of ${store.path} (${[...states.keys()].join(', ') || 'none'})`)
  }
  return kind
}

/**
 * The entries of one state (or of all) whose key starts with `prefix`, in
 * key order; for a map state, `key` selects one key's sub-keys.
 */
export async function* readState(
  store: PartitionStore,
  options: { state?: string; prefix?: Buffer; key?: Buffer; subKey?: Buffer },
): AsyncGenerator<StateRecord> {
  const states = await storeStates(store)
  const versioned = new Set(store.recordedStates().filter((r) => r.version !== undefined).map((r) => r.name))
  const names = options.state === undefined ? [...states.keys()].sort() : [options.state]
  for (const name of names) {
    const kind = kindOf(states, name, store)
    const base = statePrefix(name)
    let from = base
    if (options.key !== undefined) from = kind === 'map' ? mapKeyPrefix(base, options.key) : Buffer.concat([base, options.key])
    else if (options.prefix !== undefined && kind === 'value') from = Buffer.concat([base, options.prefix])
    if (options.key !== undefined && options.subKey !== undefined) from = Buffer.concat([from, options.subKey])
    // A value state's exact key is a point read; everything else is a range.
    const exact = options.key !== undefined && (kind === 'value' || options.subKey !== undefined)
    const end = exact ? Buffer.concat([from, Buffer.of(0)]) : prefixEnd(from)
    for await (const [k, v] of store.scan({ gte: from, lt: end, reverse: false })) {
      const rest = k.subarray(base.length)
      if (kind === 'value') {
        yield { state: name, ...keyField('key', rest), ...valueField(v, versioned.has(name)) }
        continue
      }
      const length = rest.readUInt16BE(0)
      const key = rest.subarray(2, 2 + length)
      // A map's prefix filters its keys, which are length-prefixed in the store.
      if (options.prefix !== undefined && options.key === undefined && !key.subarray(0, options.prefix.length).equals(options.prefix)) continue
      yield { state: name, ...keyField('key', key), ...keyField('subKey', rest.subarray(2 + length)), ...valueField(v, versioned.has(name)) }
    }
  }
}
