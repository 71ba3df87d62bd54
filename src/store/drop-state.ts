/**
 * Removing, on purpose, a state the program no longer lists: a store keeps
 * every state it ever held until then (docs/state-evolution.md).
 */
import { TidemarkError } from '../errors.js'
import { checkInt } from '../util/index.js'
import { metadataKey, prefixEnd, registryKey, statePrefix } from './keys.js'
import { MIGRATE_METADATA_PREFIX } from './migrate.js'
import type { PartitionStore } from './partition-store.js'
import type { PendingWrite } from './transaction-types.js'

export interface DropStateResult {
  state: string
  /** Keys deleted. */
  deleted: number
}

const DELETE: Omit<PendingWrite, 'ascii'> = { value: undefined, decoded: undefined, exact: false, cache: true, header: '' }

/**
 * Deletes every key of state `name` and its registry record, in commits of
 * `batchSize` keys without a source position. The state must not be one the
 * store was opened with (a RangeError): only a state the program no longer
 * lists can go. The registry record goes last, so a drop stopped halfway
 * leaves the state listed, and running it again finishes it.
 */
export async function dropState(store: PartitionStore, name: string, options: { batchSize?: number } = {}): Promise<DropStateResult> {
  if (typeof name !== 'string' || name === '') throw new TypeError(`name must be a non-empty state name, got ${JSON.stringify(name)}`)
  const batchSize = checkInt(options.batchSize ?? 10_000, 'batchSize', 1, 1_000_000)
  const record = store.recordedStates().find((s) => s.name === name)
  if (record === undefined) throw new TidemarkError('TIDEMARK_UNKNOWN_STATE', `state ${JSON.stringify(name)} is not one of the states of ${store.path} (${store.recordedStates().map((s) => s.name).join(', ') || 'none'})`)
  if (store.isDeclared(name)) throw new RangeError(`state ${JSON.stringify(name)} is one of the states the store was opened with; open it without that state to drop it`)
  const prefix = statePrefix(name)
  let deleted = 0
  for (;;) {
    const writes = new Map<string, PendingWrite>()
    for await (const [key] of store.scan({ gte: prefix, lt: prefixEnd(prefix), reverse: false })) {
      writes.set(key.toString('latin1'), { ...DELETE, ascii: false })
      if (writes.size === batchSize) break
    }
    const last = writes.size < batchSize
    deleted += writes.size
    if (last) {
      writes.set(registryKey(name).toString('latin1'), { ...DELETE, cache: false, ascii: false })
      writes.set(metadataKey(`${MIGRATE_METADATA_PREFIX}${name}`).toString('latin1'), { ...DELETE, cache: false, ascii: false })
    }
    await store.commitBatch(writes, [], {})
    if (last) break
  }
  store.forgetState(name)
  return { state: name, deleted }
}
