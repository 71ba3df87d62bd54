/** What a value is, for a TypeError's "got ...": 'null', or its typeof ('undefined', 'number', 'object', ...). */
export function typeName(value: unknown): string {
  return value === null ? 'null' : typeof value
}
