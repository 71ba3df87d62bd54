export { FileLog, onAppendHere, openFileLog } from './handle.js'
export { FILE_LOG_DEFAULTS, type FileLogOptions } from './options.js'
