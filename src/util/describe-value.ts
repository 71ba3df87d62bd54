/**
 * What a value is, for a TypeError's "got ...": 'null', a string quoted with
 * its control characters escaped (it may be anyone's bytes, and ends up in a
 * log line), a bigint with its n, an object's constructor name, else its
 * type and value ('number 5', 'symbol Symbol(x)'); a function by its name.
 */
export function describeValue(value: unknown): string {
  if (value === null) return 'null'
  if (value === undefined) return 'undefined'
  if (typeof value === 'string') return `'${printable(value)}'`
  if (typeof value === 'bigint') return `${value}n`
  if (typeof value === 'object') return value.constructor?.name ?? 'object'
  // Its name, not its source (which String() gives, all of it).
  if (typeof value === 'function') return `function ${value.name === '' ? '(anonymous)' : value.name}`
  return `${typeof value} ${String(value)}`
}

/** `text` with its control characters as \uXXXX escapes, for a message or a log line. */
export function printable(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}
