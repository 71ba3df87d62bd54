import { TidemarkError } from '../errors.js'

/** Turns values into bytes and back. Must be deterministic and pure. */
export interface Codec<T> {
  readonly name: string
  encode(value: T): Uint8Array
  decode(bytes: Uint8Array): T
}

const textDecoder = new TextDecoder('utf-8', { fatal: true })

/** Codecs made by jsonCodec(): known by identity, since a custom codec may also call itself 'json'. */
const JSON_CODECS = new WeakSet<Codec<unknown>>()

/** True for a codec made by jsonCodec(), whose values the store may keep as JSON text. */
export function isJsonCodec(codec: Codec<unknown>): boolean {
  return JSON_CODECS.has(codec)
}

/** JSON text in UTF-8; the default codec. */
export function jsonCodec<T = unknown>(): Codec<T> {
  const codec: Codec<T> = {
    name: 'json',
    encode(value: T): Uint8Array {
      // JSON.stringify returns undefined for undefined, functions and symbols:
      // storing "nothing" silently would lose the write, so refuse it.
      const text = JSON.stringify(value)
      if (text === undefined) throw new TypeError(`value of type ${typeof value} has no JSON form`)
      return Buffer.from(text, 'utf8')
    },
    decode(bytes: Uint8Array): T {
      // Buffer's own UTF-8 decoding is several times cheaper than a fatal
      // TextDecoder on the read path; it replaces invalid sequences instead of
      // throwing, so check for the replacement character and only then take
      // the strict decoder to name the problem.
      const text = Buffer.isBuffer(bytes) ? bytes.toString('utf8') : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8')
      return JSON.parse(text.includes('\ufffd') ? textDecoder.decode(bytes) : text) as T
    },
  }
  JSON_CODECS.add(codec as Codec<unknown>)
  return codec
}

/** Bytes stored as they are. */
export function rawCodec(): Codec<Uint8Array> {
  return {
    name: 'raw',
    encode(value: Uint8Array): Uint8Array {
      if (!(value instanceof Uint8Array)) throw new TypeError(`raw codec takes a Uint8Array, got ${typeof value}`)
      return value
    },
    decode(bytes: Uint8Array): Uint8Array {
      return bytes
    },
  }
}

/** A user-supplied codec; checked once here so that a wrong shape fails at definition time. */
export function customCodec<T>(codec: { name?: string; encode(value: T): Uint8Array; decode(bytes: Uint8Array): T }): Codec<T> {
  if (codec === null || typeof codec !== 'object' || typeof codec.encode !== 'function' || typeof codec.decode !== 'function') {
    throw new TypeError('codec must be an object with encode(value) and decode(bytes) functions')
  }
  return { name: codec.name ?? 'custom', encode: (v) => codec.encode(v), decode: (b) => codec.decode(b) }
}

/** The error of a value that `codec` could not encode; `what` names the value (state and key, update, ...). */
export function encodeFailed(codec: { name: string }, what: string, cause: unknown): TidemarkError {
  return new TidemarkError('TIDEMARK_ENCODE_FAILED', `${what}: the ${codec.name} codec could not encode the value: ${(cause as Error)?.message ?? cause}`, { cause })
}

/** The error of stored bytes that `codec` could not decode. */
export function decodeFailed(codec: { name: string }, what: string, byteLength: number, cause: unknown, details?: Record<string, unknown>): TidemarkError {
  return new TidemarkError('TIDEMARK_DECODE_FAILED', `${what}: the ${codec.name} codec could not decode ${byteLength} stored bytes: ${(cause as Error)?.message ?? cause}`, details === undefined ? { cause } : { cause, details })
}

/** `what` is a thunk so that the hot path never formats a message it does not throw. */
export function encodeWith<T>(codec: Codec<T>, value: T, what: () => string): Buffer {
  let bytes: unknown
  try {
    bytes = codec.encode(value)
  } catch (cause) {
    throw encodeFailed(codec, what(), cause)
  }
  if (!(bytes instanceof Uint8Array)) {
    throw new TidemarkError('TIDEMARK_ENCODE_FAILED', `${what()}: the ${codec.name} codec returned ${typeof bytes}, not a Uint8Array`)
  }
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
}

export function decodeWith<T>(codec: Codec<T>, bytes: Uint8Array, what: () => string): T {
  try {
    return codec.decode(bytes)
  } catch (cause) {
    throw decodeFailed(codec, what(), bytes.byteLength, cause)
  }
}
