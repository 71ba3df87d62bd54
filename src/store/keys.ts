import { describeValue } from '../util/describe-value.js'
/**
 * The byte layout of a partition store. Every LevelDB key starts with one
 * namespace byte, so that state keys and the store's own metadata can never
 * collide whatever the user's keys are:
 *
 *   0x00 'p' u16 topicLen topic u32 partition   -> u64 offset       (positions)
 *   0x00 's' name                               -> JSON definition  (state registry)
 *   0x00 'm' name                               -> JSON             (metadata)
 *   0x01 u16 nameLen name key                   -> value            (value state)
 *   0x01 u16 nameLen name u16 keyLen key sub    -> value            (map state)
 *
 * Names and map keys are length-prefixed, so no state's key range is a prefix
 * of another's; the last component is left bare so that it sorts as its bytes
 * do, which is what ordered range scans need.
 */
export const META = 0x00
export const STATE = 0x01
export const MAX_KEY_BYTES = 0xffff

const POSITION_TAG = 0x70 // 'p'
const REGISTRY_TAG = 0x73 // 's'
const METADATA_TAG = 0x6d // 'm'

export type KeyInput = string | Uint8Array

export function keyBytes(key: KeyInput, what: string, maxBytes: number): Buffer {
  let bytes: Buffer
  if (typeof key === 'string') bytes = Buffer.from(key, 'utf8')
  else if (key instanceof Uint8Array) bytes = Buffer.from(key.buffer, key.byteOffset, key.byteLength)
  else throw new TypeError(`${what} must be a string or a Uint8Array, got ${describeValue(key)}`)
  if (bytes.length === 0) throw new RangeError(`${what} must not be empty`)
  if (bytes.length > maxBytes) throw new RangeError(`${what} is ${bytes.length} bytes; the limit is ${maxBytes}`)
  return bytes
}

function u16(n: number): Buffer {
  const b = Buffer.allocUnsafe(2)
  b.writeUInt16BE(n)
  return b
}

export function statePrefix(name: string): Buffer {
  const nameBytes = Buffer.from(name, 'utf8')
  return Buffer.concat([Buffer.of(STATE), u16(nameBytes.length), nameBytes])
}

export function mapKeyPrefix(statePrefixBytes: Buffer, key: Buffer): Buffer {
  return Buffer.concat([statePrefixBytes, u16(key.length), key])
}

/** The smallest key greater than every key that starts with `prefix`, or undefined if none exists. */
export function prefixEnd(prefix: Buffer): Buffer | undefined {
  const end = Buffer.from(prefix)
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]! += 1
      return end.subarray(0, i + 1)
    }
  }
  return undefined
}

export function positionKey(topic: string, partition: number): Buffer {
  const t = Buffer.from(topic, 'utf8')
  const b = Buffer.allocUnsafe(2 + 2 + t.length + 4)
  b[0] = META
  b[1] = POSITION_TAG
  b.writeUInt16BE(t.length, 2)
  t.copy(b, 4)
  b.writeUInt32BE(partition, 4 + t.length)
  return b
}

export const POSITIONS_PREFIX = Buffer.of(META, POSITION_TAG)
export const REGISTRY_PREFIX = Buffer.of(META, REGISTRY_TAG)

export function decodePositionKey(key: Buffer): { topic: string; partition: number } {
  const len = key.readUInt16BE(2)
  return { topic: key.toString('utf8', 4, 4 + len), partition: key.readUInt32BE(4 + len) }
}

export function encodeOffset(offset: bigint): Buffer {
  const b = Buffer.allocUnsafe(8)
  b.writeBigUInt64BE(offset)
  return b
}

export function decodeOffset(bytes: Buffer): bigint {
  return bytes.readBigUInt64BE(0)
}

export function registryKey(name: string): Buffer {
  return Buffer.concat([REGISTRY_PREFIX, Buffer.from(name, 'utf8')])
}

/** A metadata document's name, checked (PartitionStore.getMetadata, setMetadata). */
export function checkMetaName(name: unknown): string {
  if (typeof name !== 'string' || name.length === 0) throw new TypeError(`metadata name must be a non-empty string, got ${JSON.stringify(name)}`)
  return name
}

export function metadataKey(name: string): Buffer {
  return Buffer.concat([Buffer.of(META, METADATA_TAG), Buffer.from(name, 'utf8')])
}
