export { createStateSynchronizer } from './state-synchronizer.js'
export type { StateSynchronizer, StateSynchronizerOptions, UpdateGenerator } from './state-synchronizer.js'
export type { CompactPointStore } from './compact-point.js'
