import type { ClassicLevel } from 'classic-level'
import { TidemarkError } from '../errors.js'
import { decodeOffset, decodePositionKey, POSITIONS_PREFIX, prefixEnd, REGISTRY_PREFIX, registryKey } from './keys.js'
import { sourceId, type Position } from './position.js'
import type { StateDefinition } from './state.js'

// What a store reads when it opens: its positions and its registry of states.

const BUFFERS = Object.freeze({ keyEncoding: 'buffer' as const, valueEncoding: 'buffer' as const })
type StateRecord = { kind: 'value' | 'map' }

/** Every stored position, by sourceId. */
export async function loadPositions(db: ClassicLevel<string, string>, into: Map<string, Position>): Promise<void> {
  for await (const [key, value] of db.iterator<Buffer, Buffer>({ ...BUFFERS, gte: POSITIONS_PREFIX, lt: prefixEnd(POSITIONS_PREFIX)! })) {
    const { topic, partition } = decodePositionKey(key)
    into.set(sourceId(topic, partition), { topic, partition, offset: decodeOffset(value) })
  }
}

/** Records each state's kind so that reopening with a different kind is caught instead of misreading bytes. */
export async function registerStates(db: ClassicLevel<string, string>, states: Map<string, StateDefinition>, path: string, sync: boolean): Promise<void> {
  const stored = new Map<string, StateRecord>()
  for await (const [key, value] of db.iterator<Buffer, Buffer>({ ...BUFFERS, gte: REGISTRY_PREFIX, lt: prefixEnd(REGISTRY_PREFIX)! })) {
    stored.set(key.subarray(REGISTRY_PREFIX.length).toString('utf8'), JSON.parse(value.toString('utf8')) as StateRecord)
  }
  const ops: Array<{ type: 'put'; key: Buffer; value: Buffer }> = []
  for (const def of states.values()) {
    const record = stored.get(def.name)
    if (record === undefined) ops.push({ type: 'put', key: registryKey(def.name), value: Buffer.from(JSON.stringify({ kind: def.kind })) })
    else if (record.kind !== def.kind) {
      throw new TidemarkError('TIDEMARK_STATE_CONFLICT', `state ${JSON.stringify(def.name)} was created as a ${record.kind} state in ${path}; it cannot be opened as a ${def.kind} state`)
    }
  }
  if (ops.length > 0) await db.batch<Buffer, Buffer>(ops, { ...BUFFERS, sync })
}
