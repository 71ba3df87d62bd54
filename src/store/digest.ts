import { createHash } from 'node:crypto'
import { prefixEnd } from './keys.js'
import type { PartitionStore } from './partition-store.js'
import type { StateDefinition } from './state.js'

/** The format tag hashed first: a digest of another layout must never compare equal. */
const DIGEST_FORMAT = 'tidemark-state-digest/1'
const ENTRY = Buffer.of(1)
const END = Buffer.of(0)

/**
 * A SHA-256 (hex) over the committed contents of `states`: for each state,
 * in byte order of its name, its kind and name, then every key and value as
 * stored (the codec's bytes), in key order. Each part is length-prefixed,
 * so no two different contents hash alike by shifting bytes between parts.
 *
 * Two stores with equal digests hold the same state whatever the order in
 * which `states` is listed, how the stores were built (a replay, a restored
 * snapshot) or how LevelDB laid out its files. Positions, metadata and
 * states not listed (an outbox that drains as it is delivered) are not part
 * of it. Pending writes of open transactions are not seen.
 */
export async function stateDigest(store: PartitionStore, states: readonly StateDefinition[]): Promise<string> {
  if (store === null || typeof store !== 'object' || typeof store.scan !== 'function') throw new TypeError('store must be an open PartitionStore')
  if (!Array.isArray(states)) throw new TypeError('states must be an array of state definitions')
  const hash = createHash('sha256')
  part(hash, Buffer.from(DIGEST_FORMAT, 'utf8'))
  const sorted = [...states].sort((a, b) => Buffer.compare(a.prefix, b.prefix))
  for (const def of sorted) {
    // Checks that the store knows the state (TIDEMARK_UNKNOWN_STATE otherwise).
    store.checkState(def)
    part(hash, Buffer.from(def.kind, 'utf8'))
    part(hash, Buffer.from(def.name, 'utf8'))
    for await (const [key, value] of store.scan({ gte: def.prefix, lt: prefixEnd(def.prefix), reverse: false })) {
      hash.update(ENTRY)
      // The key without the state's prefix: the same state under another
      // layout version would otherwise hash differently for no reason.
      part(hash, key.subarray(def.prefix.length))
      part(hash, value)
    }
    // Marks the end of the state, so that entries cannot move between states.
    hash.update(END)
  }
  return hash.digest('hex')
}

function part(hash: ReturnType<typeof createHash>, bytes: Uint8Array): void {
  const length = Buffer.allocUnsafe(4)
  length.writeUInt32BE(bytes.byteLength)
  hash.update(length)
  hash.update(bytes)
}
