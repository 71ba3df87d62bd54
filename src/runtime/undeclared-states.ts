import type { Logger } from '../logging/logger.js'
import type { PartitionStore } from '../store/partition-store.js'
import type { RecordedState } from '../store/state-registry.js'

/**
 * States the store holds and the program does not list: kept, and said once
 * per start (a warn line and `report`), before anything is processed.
 */
export function reportUndeclaredStates(store: PartitionStore, logger: Logger, labels: { job: string; topic: string; partition: number }, report?: (states: RecordedState[]) => void): void {
  const undeclared = store.recordedStates().filter((s) => !store.isDeclared(s.name))
  if (undeclared.length === 0) return
  logger.warn({ ...labels, states: undeclared.map((s) => s.name) }, 'the store holds states the program does not list; they are kept (remove one on purpose with tidemark state drop)')
  report?.(undeclared)
}
