import { TidemarkError } from '../errors.js'

/*
 * How the synchronizer frames what it writes to the log. One log entry is
 * either the initial state or the updates of one generator call, which take
 * effect together or not at all:
 *
 *   0  u8   format version (1)
 *   1  u8   kind: 1 initial state, 2 updates
 *   kind 1: the state codec's bytes
 *   kind 2: u32 count, then per update a u32 length and the update codec's bytes
 */

const VERSION = 1
const KIND_INIT = 1
const KIND_UPDATES = 2

export type SyncEntry = { kind: 'init'; state: Uint8Array } | { kind: 'updates'; updates: Uint8Array[] }

export function encodeInit(state: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(2 + state.byteLength)
  out[0] = VERSION
  out[1] = KIND_INIT
  out.set(state, 2)
  return out
}

export function encodeUpdates(updates: readonly Uint8Array[]): Buffer {
  let size = 6
  for (const u of updates) size += 4 + u.byteLength
  const out = Buffer.allocUnsafe(size)
  out[0] = VERSION
  out[1] = KIND_UPDATES
  out.writeUInt32LE(updates.length, 2)
  let pos = 6
  for (const u of updates) {
    out.writeUInt32LE(u.byteLength, pos)
    out.set(u, pos + 4)
    pos += 4 + u.byteLength
  }
  return out
}

/** Fails with TIDEMARK_DECODE_FAILED naming the entry's revision. */
export function decodeEntry(data: Uint8Array, revision: bigint, where: string): SyncEntry {
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength)
  const fail = (problem: string): TidemarkError =>
    new TidemarkError('TIDEMARK_DECODE_FAILED', `the log entry at revision ${revision} of ${where} is not a synchronizer entry: ${problem}`, {
      details: { revision },
    })
  if (bytes.length < 2) throw fail(`it is ${bytes.length} bytes long`)
  if (bytes[0] !== VERSION) throw fail(`unknown format version ${bytes[0]}`)
  if (bytes[1] === KIND_INIT) return { kind: 'init', state: bytes.subarray(2) }
  if (bytes[1] !== KIND_UPDATES) throw fail(`unknown kind ${bytes[1]}`)
  if (bytes.length < 6) throw fail('its update count is cut off')
  const count = bytes.readUInt32LE(2)
  const updates: Uint8Array[] = []
  let pos = 6
  for (let i = 0; i < count; i++) {
    if (pos + 4 > bytes.length) throw fail(`update ${i} of ${count} is cut off`)
    const length = bytes.readUInt32LE(pos)
    if (pos + 4 + length > bytes.length) throw fail(`update ${i} of ${count} is cut off`)
    updates.push(bytes.subarray(pos + 4, pos + 4 + length))
    pos += 4 + length
  }
  if (pos !== bytes.length) throw fail(`${bytes.length - pos} bytes follow the last update`)
  return { kind: 'updates', updates }
}
