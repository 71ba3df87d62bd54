/**
 * Every entry of one state, decoded by its definition: what an offline
 * transform reads (src/transform/). A Transaction reads one key, or the keys
 * of one value state or of one map key; this reads a whole state, map
 * states included, in key order.
 */
import { decodeWith } from './codec.js'
import { prefixEnd } from './keys.js'
import type { PartitionStore } from './partition-store.js'
import type { StateDefinition } from './state.js'
import { decodeVersioned } from './versioning.js'

/** One entry of a state: a value state's key and value, or a map state's key, sub-key and value. */
export interface ScannedEntry {
  key: string | Uint8Array
  /** Map states only. */
  subKey?: string | Uint8Array
  value: unknown
}

/**
 * The stored bytes of a value of `def`, decoded by its codec and, for a
 * versioned state, upgraded to its current version (the read path of a
 * Transaction, for bytes that did not come from one).
 */
export function decodeStateValue(def: StateDefinition, bytes: Buffer, what: () => string): unknown {
  return def.versioning === undefined ? decodeWith(def.codec, bytes, what) : decodeVersioned(def, def.versioning, bytes, what)
}

const utf8 = new TextDecoder('utf-8', { fatal: true })

/**
 * A key as its state's key type gives it: a string, or the bytes. A string
 * state's key that is not UTF-8 (a Transaction takes bytes for any state)
 * comes as its bytes, so that writing it back writes the same key.
 */
function asKey(bytes: Buffer, type: 'string' | 'bytes'): string | Uint8Array {
  if (type === 'string') {
    try {
      return utf8.decode(bytes)
    } catch {
      // Not UTF-8: the bytes below.
    }
  }
  return Buffer.from(bytes)
}

/**
 * The entries of `def`, a state the store was opened with, in key order:
 * keys as the definition's key types give them (a string, or the bytes),
 * values decoded and upgraded as a Transaction reads them.
 */
export async function* scanState(store: PartitionStore, def: StateDefinition): AsyncGenerator<ScannedEntry> {
  store.checkState(def)
  const base = def.prefix.length
  for await (const [k, bytes] of store.scan({ gte: def.prefix, lt: prefixEnd(def.prefix), reverse: false })) {
    const rest = k.subarray(base)
    const what = (): string => `state ${def.name} key 0x${rest.toString('hex')}`
    if (def.kind === 'value') {
      yield { key: asKey(rest, def.keyType), value: decodeStateValue(def, bytes, what) }
      continue
    }
    const length = rest.readUInt16BE(0)
    yield { key: asKey(rest.subarray(2, 2 + length), def.keyType), subKey: asKey(rest.subarray(2 + length), def.subKeyType), value: decodeStateValue(def, bytes, what) }
  }
}

/** How many entries `def`, a state the store was opened with, holds now. */
export async function countState(store: PartitionStore, def: StateDefinition): Promise<number> {
  store.checkState(def)
  let n = 0
  for await (const _ of store.scan({ gte: def.prefix, lt: prefixEnd(def.prefix), reverse: false })) n++
  return n
}
