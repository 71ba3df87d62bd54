// The crossing logic of a partition's soft limit on its state size, with
// sizes given: a real store's size does not go down on demand (deleted keys
// leave its files until a compaction), so going back below is driven here.
import { describe, expect, it } from 'vitest'
import { SoftLimit } from '../../src/runtime/state-size.js'

describe('the soft limit on a partition\'s state size', () => {
  it('reports the measure that goes above it, not the ones that stay above, and again after one at or below it', () => {
    const limit = new SoftLimit(1000)
    const sizes = [10, 999, 1000, 1001, 5000, 1001, 1000, 2000, 2500, 3, 1001]
    expect(sizes.map((bytes) => limit.crossed(bytes))).toEqual([false, false, false, true, false, false, false, true, false, false, true])
  })

  it('a first measure above it is a crossing (a partition restored above its limit says so at its start)', () => {
    const limit = new SoftLimit(1)
    expect(limit.crossed(2)).toBe(true)
    expect(limit.crossed(2)).toBe(false)
  })
})
