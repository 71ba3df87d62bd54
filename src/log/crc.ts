import { crc32 } from 'node:zlib'

/**
 * zlib's CRC-32 of b[start, end). Short ranges (a record header, most
 * records of a stream) are computed here, eight bytes a step
 * (slicing-by-8): zlib.crc32 costs a view and a call into C++ per range,
 * which was most of a small record's checksum, once per record written and
 * once per record read. Longer ranges go to zlib, which is faster there.
 */
export function crc32Of(b: Uint8Array, start: number, end: number): number {
  if (end - start > SHORT) return crc32(b.subarray(start, end))
  let c = -1
  let i = start
  for (; i + 8 <= end; i += 8) {
    const a = c ^ (b[i]! | (b[i + 1]! << 8) | (b[i + 2]! << 16) | (b[i + 3]! << 24))
    c = T[1792 + (a & 0xff)]! ^ T[1536 + ((a >>> 8) & 0xff)]! ^ T[1280 + ((a >>> 16) & 0xff)]! ^ T[1024 + (a >>> 24)]!
      ^ T[768 + b[i + 4]!]! ^ T[512 + b[i + 5]!]! ^ T[256 + b[i + 6]!]! ^ T[b[i + 7]!]!
  }
  for (; i < end; i++) c = T[(c ^ b[i]!) & 0xff]! ^ (c >>> 8)
  return (c ^ -1) >>> 0
}

/** Past this many bytes zlib's call is cheaper than the loop (measured on Node 20, x64). */
const SHORT = 192

/** T[k * 256 + n]: the CRC-32 table advanced k bytes (the slicing-by-8 tables). */
const T = (() => {
  const t = new Int32Array(256 * 8)
  for (let n = 0; n < 256; n++) {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    t[n] = c
  }
  for (let n = 0; n < 256; n++) {
    let c = t[n]!
    for (let k = 1; k < 8; k++) {
      c = t[c & 0xff]! ^ (c >>> 8)
      t[k * 256 + n] = c
    }
  }
  return t
})()
