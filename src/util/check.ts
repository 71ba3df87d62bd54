import { describeValue } from './describe-value.js'

/** Throws a RangeError naming the first key of options that is not in known. */
export function checkKnown(options: Record<string, unknown>, known: readonly string[], what: string): void {
  for (const name of Object.keys(options)) {
    if (!known.includes(name)) throw new RangeError(`unknown ${what} option '${name}'; known options: ${known.join(', ')}`)
  }
}

/** An option that must be a safe integer in [min, max]; returns it. */
export function checkInt(value: unknown, name: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number') throw new TypeError(`${name} must be a number, got ${typeof value}`)
  if (!Number.isSafeInteger(value) || value < min || value > max) throw new RangeError(`${name} must be an integer from ${min} to ${max}, got ${value}`)
  return value
}

/**
 * The same check in the form the stores and connectors have always reported
 * ("name (value) must be an integer from min to max", or ">= min" without a
 * max): their messages are matched by users' tests and logs.
 */
export function checkIntegerOption(value: unknown, name: string, min: number, max?: number): number {
  if (typeof value !== 'number') throw new TypeError(`${name} must be a number, got ${describeValue(value)}`)
  if (!Number.isSafeInteger(value) || value < min || (max !== undefined && value > max)) {
    throw new RangeError(max === undefined ? `${name} (${value}) must be an integer >= ${min}` : `${name} (${value}) must be an integer from ${min} to ${max}`)
  }
  return value
}
