/** The outputs layer's door for the connectors: its public API and what a runtime needs besides. */
export * from './public.js'
export { resolveDedupe, resolveOutputs, type ResolvedOutputs } from './options.js'
export { PartitionOutputs } from './partition-outputs.js'
export { sinkKinds } from './sink-kinds.js'
export { eachEncodedRecord } from './encoded-batch.js'
