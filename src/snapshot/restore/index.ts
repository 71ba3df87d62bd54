export { restoreKeepingStore, restoreSnapshot } from './restore.js'
export { inspectLocal, type LocalState } from './install.js'
export { planRuns, type Run } from './download.js'
export type { RestoreEvent, RestoreOptions, RestoreProgress, RestoreResult, ReusableFile, SkippedSnapshot, SnapshotSummary, VerifiedFile } from './types.js'
