/** The runtime layer's door for the connectors: its public API and the partition lifecycle a runtime is built on. */
export * from './public.js'
export { checkClaimStore } from './claim-store.js'
export { PartitionLifecycle } from './partition-lifecycle.js'
export { checkStateSizeLimit } from './state-size.js'
