import { randomBytes } from 'node:crypto'
import { crc32 } from 'node:zlib'
import { describe, expect, it } from 'vitest'
import { crc32Of } from '../../src/log/crc.js'

describe('crc32Of', () => {
  it("equals zlib's crc32 for every length from 0 to 400 bytes at every alignment, and for long ranges", () => {
    const b = randomBytes(4096)
    for (let n = 0; n <= 400; n++) {
      for (let at = 0; at < 8; at++) expect(crc32Of(b, at, at + n)).toBe(crc32(b.subarray(at, at + n)))
    }
    expect(crc32Of(b, 3, 4096)).toBe(crc32(b.subarray(3)))
    // Bytes that exercise every table entry's sign bit.
    const ff = Buffer.alloc(64, 0xff)
    expect(crc32Of(ff, 0, 64)).toBe(crc32(ff))
  })
})
