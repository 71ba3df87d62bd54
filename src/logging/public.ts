export { checkLogger, errorFields, noopLogger, offsetField } from './logger.js'
export type { Logger } from './logger.js'
