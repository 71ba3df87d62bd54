import { DEDUPE_STATE, OUTBOX_STATE } from '../outputs/states.js'
import type { PartitionStore } from '../store/partition-store.js'
import type { StateDefinition } from '../store/state.js'

/** The states of the outputs that a replay's store holds beside the handler's (as the processor opens it with outputs). */
export function outputStates(): StateDefinition[] {
  return [OUTBOX_STATE as StateDefinition, DEDUPE_STATE as StateDefinition]
}

/**
 * Drops every entry of the outbox in one batch that moves no position: a
 * start snapshot of another job may hold records that job had not
 * delivered, which are its outputs under its ids, not the replay's.
 */
export async function clearOutbox(store: PartitionStore): Promise<number> {
  const tx = store.transaction()
  const view = tx.value(OUTBOX_STATE)
  let cleared = 0
  for await (const [key] of view.entries()) {
    view.delete(key)
    cleared++
  }
  if (cleared === 0) {
    tx.abort()
    return 0
  }
  await tx.commitWithoutPosition()
  return cleared
}
