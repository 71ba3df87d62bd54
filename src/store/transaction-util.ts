import { decodeFailed, encodeFailed } from './codec.js'

/** Runs a read and turns a synchronous result or throw into a promise, without an async function's extra tick. */
export function settle<T>(read: () => T | Promise<T>): Promise<T> {
  try {
    const r = read()
    return r instanceof Promise ? r : Promise.resolve(r)
  } catch (err) {
    return Promise.reject(err)
  }
}

// The JSON paths take the description and its subject apart, so that the
// hot path allocates no closure for a message it does not throw.

const JSON_FORMAT = { name: 'json' }

/** JSON.parse of stored text, failing the way decodeWith does. */
export function parseJson<V, Q>(text: string, what: (q: Q) => () => string, q: Q): V {
  try {
    return JSON.parse(text) as V
  } catch (cause) {
    throw decodeFailed(JSON_FORMAT, what(q)(), Buffer.byteLength(text), cause)
  }
}

/** JSON.stringify, failing the way encodeWith does. */
export function jsonText<Q>(value: unknown, what: (q: Q) => () => string, q: Q): string {
  let text: string | undefined
  try {
    text = JSON.stringify(value)
  } catch (cause) {
    throw encodeFailed(JSON_FORMAT, what(q)(), cause)
  }
  if (text === undefined) throw encodeFailed(JSON_FORMAT, what(q)(), new TypeError(`value of type ${typeof value} has no JSON form`))
  return text
}

/** A value that JSON turns back into itself, so a read of a pending write can skip the decode. */
export function jsonExact(v: unknown): boolean {
  return typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v) && !Object.is(v, -0))
}

/** The smallest key greater than b: b followed by a zero byte. */
export function successor(b: Buffer): Buffer {
  return Buffer.concat([b, Buffer.of(0)])
}

export function describeKey(key: unknown): string {
  if (typeof key === 'string') return JSON.stringify(key.length > 64 ? `${key.slice(0, 64)}…` : key)
  if (key instanceof Uint8Array) return `0x${Buffer.from(key.subarray(0, 32)).toString('hex')}${key.length > 32 ? '…' : ''}`
  return String(key)
}
