import type { ClassicLevel } from 'classic-level'
import { decodeOffset, decodePositionKey, POSITIONS_PREFIX, prefixEnd, REGISTRY_PREFIX, registryKey } from './keys.js'
import { sourceId, type Position } from './position.js'
import type { StateDefinition } from './state.js'
import { checkDeclaredStates, decodeStateRecord, encodeStateRecord, type StateRecord } from './state-registry.js'

// What a store reads when it opens: its positions and its registry of states.

const BUFFERS = Object.freeze({ keyEncoding: 'buffer' as const, valueEncoding: 'buffer' as const })

/** Every stored position, by sourceId. */
export async function loadPositions(db: ClassicLevel<string, string>, into: Map<string, Position>): Promise<void> {
  for await (const [key, value] of db.iterator<Buffer, Buffer>({ ...BUFFERS, gte: POSITIONS_PREFIX, lt: prefixEnd(POSITIONS_PREFIX)! })) {
    const { topic, partition } = decodePositionKey(key)
    into.set(sourceId(topic, partition), { topic, partition, offset: decodeOffset(value) })
  }
}

/**
 * Reads the registry of states into `records`, and records each declared
 * state's kind (and version) so that reopening with a different kind is
 * caught instead of misreading bytes, and a state that a newer program wrote
 * at a higher version is refused (TIDEMARK_STATE_VERSION_AHEAD) before
 * anything is written.
 */
export async function registerStates(db: ClassicLevel<string, string>, states: Map<string, StateDefinition>, path: string, sync: boolean, records: Map<string, StateRecord>): Promise<void> {
  for await (const [key, value] of db.iterator<Buffer, Buffer>({ ...BUFFERS, gte: REGISTRY_PREFIX, lt: prefixEnd(REGISTRY_PREFIX)! })) {
    records.set(key.subarray(REGISTRY_PREFIX.length).toString('utf8'), decodeStateRecord(value))
  }
  const added = await checkDeclaredStates(records, states, path, (def) => hasValues(db, def))
  if (added.size === 0) return
  const ops = [...added].map(([name, record]) => ({ type: 'put' as const, key: registryKey(name), value: encodeStateRecord(record) }))
  await db.batch<Buffer, Buffer>(ops, { ...BUFFERS, sync })
  for (const [name, record] of added) records.set(name, record)
}

/** Whether a state holds at least one value: one seek. */
async function hasValues(db: ClassicLevel<string, string>, def: StateDefinition): Promise<boolean> {
  const it = db.iterator<Buffer, Buffer>({ ...BUFFERS, gte: def.prefix, lt: prefixEnd(def.prefix)!, limit: 1, values: false })
  try {
    return (await it.next()) !== undefined
  } finally {
    await it.close()
  }
}
