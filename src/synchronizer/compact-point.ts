import { crc32 } from 'node:zlib'

/**
 * What compaction needs from a snapshot store. The snapshot stores
 * (SnapshotStore from tidemark's snapshot-store layer, file system or S3)
 * satisfy it as they are; it is declared here so that a synchronizer can
 * also run on something smaller.
 */
export interface CompactPointStore {
  put(key: string, body: Uint8Array): Promise<unknown>
  get(key: string): Promise<AsyncIterable<Uint8Array>>
  list(prefix: string): AsyncIterable<{ key: string }>
  deleteMany(keys: readonly string[]): Promise<void>
}

/*
 * A compact point is the state at a revision, stored as one object:
 *
 *   0  4 bytes  magic 'TMCP'
 *   4  u8       format version (1)
 *   5  u64      revision of the last entry that took effect in this state
 *   13 u32      CRC-32 of the state bytes
 *   17          the state codec's bytes
 *
 * Its key is `<prefix><revision, 20 digits>-<writer id>.compact`: unique and
 * never overwritten (the snapshot store may not offer conditional writes),
 * ordered by revision when listed, and found by listing the prefix.
 */

const MAGIC = Buffer.from('TMCP', 'latin1')
const VERSION = 1
const HEADER_BYTES = 17
const KEY = /(\d{20})-([0-9a-f]+)\.compact$/

export interface CompactPointRef {
  key: string
  revision: bigint
}

export function compactPointKey(prefix: string, revision: bigint, writerId: string): string {
  return `${prefix}${revision.toString().padStart(20, '0')}-${writerId}.compact`
}

export function encodeCompactPoint(revision: bigint, state: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(HEADER_BYTES + state.byteLength)
  MAGIC.copy(out, 0)
  out[4] = VERSION
  out.writeBigUInt64LE(revision, 5)
  out.writeUInt32LE(crc32(state), 13)
  out.set(state, HEADER_BYTES)
  return out
}

/** The state bytes, or why the object is not a valid compact point of `revision`. */
export function decodeCompactPoint(body: Buffer, revision: bigint): { state: Uint8Array } | { problem: string } {
  if (body.length < HEADER_BYTES || !body.subarray(0, 4).equals(MAGIC)) return { problem: 'it is not a compact point' }
  if (body[4] !== VERSION) return { problem: `unknown format version ${body[4]}` }
  const stored = body.readBigUInt64LE(5)
  if (stored !== revision) return { problem: `it holds revision ${stored}, its key says ${revision}` }
  const state = body.subarray(HEADER_BYTES)
  if (crc32(state) !== body.readUInt32LE(13)) return { problem: 'its state fails its checksum' }
  return { state }
}

/** The compact points under `prefix`, newest first. */
export async function listCompactPoints(store: CompactPointStore, prefix: string): Promise<CompactPointRef[]> {
  const points: CompactPointRef[] = []
  for await (const { key } of store.list(prefix)) {
    const m = KEY.exec(key.slice(prefix.length))
    if (m !== null && key.slice(prefix.length).length === m[0].length) points.push({ key, revision: BigInt(m[1]!) })
  }
  return points.sort((a, b) => (a.revision > b.revision ? -1 : a.revision < b.revision ? 1 : a.key < b.key ? -1 : 1))
}

export async function readBody(store: CompactPointStore, key: string): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of await store.get(key)) chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))
  return Buffer.concat(chunks)
}
