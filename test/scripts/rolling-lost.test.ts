// bench/rolling.ts: Tidemark's part of a rolling restart counts the partitions
// an assignment gave to a member, not those it ran on through the round.
import { describe, expect, it } from 'vitest'
import type { GroupEvent } from '../../bench/_group.js'
import { keptRunning, tidemarkSecondsLost } from '../../bench/rolling.js'

const assignment = (at: number, member: string, partitions: number[]): GroupEvent => ({ t: 'assignment', at, member, partitions, warmups: [], standbys: [] })
const commit = (at: number, member: string, partition: number, offset: number): GroupEvent => ({ t: 'commit', at, member, partition, offset: String(offset) })
const closed = (at: number, member: string, partition: number): GroupEvent => ({ t: 'closed', at, member, partition, reason: 'shutdown' })

describe('bench rolling: Tidemark\'s part', () => {
  // b ran 1 through the round; a restarted (closed 0, then got it back); b got 2 from elsewhere.
  const events: GroupEvent[] = [
    assignment(0, 'a', [0]),
    assignment(0, 'b', [1]),
    commit(100, 'a', 0, 10),
    commit(100, 'b', 1, 10),
    closed(1000, 'a', 0),
    assignment(5000, 'a', [0]),
    assignment(5000, 'b', [1, 2]),
    commit(5300, 'b', 1, 11),
    commit(5400, 'a', 0, 11),
    commit(5700, 'b', 2, 11),
  ]

  it('tells a partition that ran on from one that started', () => {
    expect(keptRunning(events, 6, 1)).toBe(true)
    expect(keptRunning(events, 6, 2)).toBe(false)
    // In a's previous assignment, but closed at the restart.
    expect(keptRunning(events, 5, 0)).toBe(false)
    // A member's first assignment keeps nothing.
    expect(keptRunning(events, 0, 0)).toBe(false)
  })

  it('sums the waits of the partitions that started, from the assignment', () => {
    // a's 0: 400 ms; b's 2: 700 ms; b's 1 ran on (its 300 ms is its pipeline's latency).
    expect(tidemarkSecondsLost(events, 2000)).toBeCloseTo(1.1, 6)
  })

  it('counts a kept partition that closed and started again within the round', () => {
    const again = [...events.slice(0, 6), closed(5001, 'b', 1), assignment(5002, 'b', [1, 2]), ...events.slice(7)]
    expect(keptRunning(again, 7, 1)).toBe(false)
    expect(tidemarkSecondsLost(again, 2000)).toBeCloseTo(0.4 + 0.298 + 0.698, 6)
  })
})
