import { describeValue } from '../util/describe-value.js'

/**
 * A logger Tidemark can write to: pino's shape (and that of bunyan, and of
 * console-like wrappers), each method called with an object of fields first
 * and a message second, so `logger: pino()` plugs in as it is.
 */
export interface Logger {
  debug(fields: object, message: string): void
  info(fields: object, message: string): void
  warn(fields: object, message: string): void
  error(fields: object, message: string): void
}

const LEVELS = ['debug', 'info', 'warn', 'error'] as const

/** Logs nothing: what every component uses when it is given no logger. */
export const noopLogger: Logger = Object.freeze({
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
})

/**
 * Checks a `logger` option once, at construction: undefined gives the no-op
 * logger (nothing is logged by default); anything else must have the four
 * methods, or a TypeError names the argument. The logger returned never
 * throws: a logger's failure must not fail a commit, a snapshot or a restore.
 */
export function checkLogger(value: unknown, name = 'logger'): Logger {
  if (value === undefined || value === noopLogger) return noopLogger
  if (value === null || (typeof value !== 'object' && typeof value !== 'function')) {
    throw new TypeError(`${name} must be a logger with debug, info, warn and error methods (pino-compatible), got ${describeValue(value)}`)
  }
  const missing = LEVELS.filter((level) => typeof (value as Record<string, unknown>)[level] !== 'function')
  if (missing.length > 0) throw new TypeError(`${name} must be a logger with debug, info, warn and error methods (pino-compatible); it has no ${missing.join(', ')}`)
  if ((value as { [SAFE]?: true })[SAFE] === true) return value as Logger
  const logger = value as Logger
  // Methods are called on the logger itself: pino's need their `this`.
  const safe = {
    [SAFE]: true,
    debug: (fields: object, message: string) => call(logger, 'debug', fields, message),
    info: (fields: object, message: string) => call(logger, 'info', fields, message),
    warn: (fields: object, message: string) => call(logger, 'warn', fields, message),
    error: (fields: object, message: string) => call(logger, 'error', fields, message),
  }
  return Object.freeze(safe)
}

/** Marks a logger checkLogger already wrapped, so that a component handing its logger down does not wrap it twice. */
const SAFE = Symbol('tidemark.safeLogger')

function call(logger: Logger, level: (typeof LEVELS)[number], fields: object, message: string): void {
  try {
    logger[level](fields, message)
  } catch {
    // A logger that throws loses that line, nothing else.
  }
}

/** The fields of an error worth a log line: pino serializes `err` (type, message, stack, code). */
export function errorFields(error: unknown): { err: unknown; code?: string } {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'string' ? { err: error, code } : { err: error }
}

/** An offset for a log line, as text: JSON has no BigInt, and a logger whose serializer throws on one would lose the line. */
export function offsetField(offset: bigint | undefined): string | undefined {
  return offset === undefined ? undefined : offset.toString()
}
