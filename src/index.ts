export { TidemarkError, ERROR_CODES, isTidemarkError } from './errors.js'
export type { ErrorCode, TidemarkErrorOptions } from './errors.js'
export * from './store/index.js'
