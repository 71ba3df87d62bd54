/** The transform layer's door: offline state transforms and bootstraps (Tidemark's State Processor API). */
export { transformState } from './transform-state.js'
export { bootstrapState } from './bootstrap-state.js'
export { readStateRecords } from './records-file.js'
export { TRANSFORM_DEFAULTS } from './options.js'
export type {
  BootstrapStateOptions, KeyTransform, SourceState, StateEntry, StateTransform, TargetOptions, TargetReader, TargetWriter,
  TransformOutput, TransformProgress, TransformResult, TransformSource, TransformStateOptions, TransformTarget,
} from './types.js'
