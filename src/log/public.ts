export { NO_REVISION, AbstractRevisionedLog } from './revisioned-log.js'
export type { LogEntry, ReadOptions, RevisionedLog } from './revisioned-log.js'
export { FileLog, openFileLog, FILE_LOG_DEFAULTS } from './file-log/index.js'
export type { FileLogOptions } from './file-log/index.js'
