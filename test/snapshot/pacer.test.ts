import { afterEach, describe, expect, it } from 'vitest'
import { defaultSnapshotPacer, PACER_DEFAULTS, SnapshotPacer, SnapshotScheduler, type SchedulerClock } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { fixture } from './helpers.js'

const open: Array<{ close(): Promise<void> } | SnapshotScheduler> = []
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await ('stop' in o ? o.stop() : o.close())
})

describe('SnapshotPacer', () => {
  it('lets `slots` time-based snapshots start within an interval, then one each time the oldest leaves it', () => {
    const pacer = new SnapshotPacer({ slots: 2 })
    const [a, b, c] = [{}, {}, {}]
    expect(pacer.request(a, 100, 0)).toBe(true)
    expect(pacer.request(b, 100, 10)).toBe(true)
    expect(pacer.request(c, 100, 20)).toBe(false)
    expect(pacer.waiting).toBe(1)
    expect(pacer.request(c, 100, 99)).toBe(false)
    // a's start (at 0) is an interval old at 100.
    expect(pacer.request(c, 100, 100)).toBe(true)
    expect(pacer.waiting).toBe(0)
    // The window is b's (10) and c's (100): a, due again, waits for 110.
    expect(pacer.request(a, 100, 105)).toBe(false)
    expect(pacer.request(a, 100, 110)).toBe(true)
  })

  it('gives a free slot to the waiting scheduler with the most bytes since its snapshot, the first come of equals', () => {
    const pacer = new SnapshotPacer({ slots: 1 })
    const [a, b, c, d] = [{}, {}, {}, {}]
    expect(pacer.request(a, 100, 0, 5)).toBe(true)
    expect(pacer.request(b, 100, 1, 10)).toBe(false)
    expect(pacer.request(c, 100, 2, 30)).toBe(false)
    expect(pacer.request(d, 100, 3, 30)).toBe(false)
    expect(pacer.waiting).toBe(3)
    // A slot is free at 100: c has the most (d as much, but came later).
    expect(pacer.request(b, 100, 100, 10)).toBe(false)
    expect(pacer.request(d, 100, 100, 30)).toBe(false)
    expect(pacer.request(c, 100, 100, 30)).toBe(true)
    // The next one at 200: d before b.
    expect(pacer.request(b, 100, 200, 10)).toBe(false)
    expect(pacer.request(d, 100, 200, 30)).toBe(true)
    expect(pacer.request(b, 100, 300, 10)).toBe(true)
    expect(pacer.waiting).toBe(0)
  })

  it('a scheduler that leaves (it snapshotted for bytes, or stopped) gives its turn to the next', () => {
    const pacer = new SnapshotPacer({ slots: 1 })
    const [a, b, c] = [{}, {}, {}]
    expect(pacer.request(a, 100, 0)).toBe(true)
    expect(pacer.request(b, 100, 1, 50)).toBe(false)
    expect(pacer.request(c, 100, 2, 10)).toBe(false)
    // At 100 the slot goes to b; b leaves before it asks again.
    expect(pacer.request(c, 100, 100, 10)).toBe(false)
    pacer.leave(b)
    expect(pacer.request(c, 100, 101, 10)).toBe(true)
    expect(pacer.waiting).toBe(0)
  })

  it('drops from the line a scheduler that stopped asking (10 s), so that it holds up nobody', () => {
    const pacer = new SnapshotPacer({ slots: 1 })
    const [a, gone, b] = [{}, {}, {}]
    expect(pacer.request(a, 100, 0)).toBe(true)
    expect(pacer.request(gone, 100, 1)).toBe(false)
    expect(pacer.request(b, 100, 2)).toBe(false)
    // At 100 the slot goes to the first come, which no longer asks; after 10 s without asking it is out of the line.
    expect(pacer.request(b, 100, 9_000)).toBe(false)
    expect(pacer.request(b, 100, 10_001)).toBe(true)
    expect(pacer.waiting).toBe(0)
  })

  it('validates its options once; the process default is one pacer of the default slots', () => {
    expect(() => new SnapshotPacer({ slots: 0 })).toThrow(RangeError)
    expect(() => new SnapshotPacer({ slots: 1.5 })).toThrow(RangeError)
    expect(() => new SnapshotPacer({ slot: 4 } as never)).toThrow(/unknown SnapshotPacer option 'slot'/)
    expect(() => new SnapshotPacer(null as never)).toThrow(TypeError)
    expect(new SnapshotPacer().slots).toBe(PACER_DEFAULTS.slots)
    expect(defaultSnapshotPacer()).toBe(defaultSnapshotPacer())
    expect(defaultSnapshotPacer().slots).toBe(16)
  })
})

/** A clock moved by hand: `advance(ms)` moves time and runs the interval callbacks once. */
function manualClock(): SchedulerClock & { advance(ms: number): void } {
  let now = 0
  const timers = new Map<number, () => void>()
  let next = 0
  return {
    now: () => now,
    every: (_ms, fn) => {
      const id = next++
      timers.set(id, fn)
      return () => { timers.delete(id) }
    },
    advance: (ms) => {
      now += ms
      for (const fn of [...timers.values()]) fn()
    },
  }
}

describe('SnapshotScheduler with a pacer', () => {
  it('takes turns for time-based snapshots; snapshots for bytes do not wait for one', async () => {
    const clock = manualClock()
    const pacer = new SnapshotPacer({ slots: 1 })
    // Made one after the other: their timers tick, and so they first ask, in this order.
    const schedulers: Array<{ name: string; scheduler: SnapshotScheduler; taken: (n: number) => Promise<void> }> = []
    for (const name of ['a', 'b', 'c']) {
      const f = await fixture(tempDir('tidemark-pacer-'), 100)
      open.push(f)
      let done = 0
      let wake: (() => void) | undefined
      const scheduler = new SnapshotScheduler(f.snapshotter, { intervalMs: 400, everyBytes: 1000, clock, pacer, onSnapshot: () => { done++; wake?.() } })
      open.push(scheduler)
      scheduler.start()
      /** Resolves once this scheduler has taken n snapshots. */
      const taken = async (n: number): Promise<void> => {
        while (done < n) await new Promise<void>((resolve) => { wake = resolve })
      }
      schedulers.push({ name, scheduler, taken })
    }
    const [a, b, c] = schedulers as [typeof schedulers[0], typeof schedulers[0], typeof schedulers[0]]
    // Which schedulers have a snapshot in flight (one starts synchronously when it is let go).
    const inFlight = (): string[] => schedulers.filter((s) => s.scheduler.inFlight).map((s) => s.name)
    for (const s of schedulers) s.scheduler.noteCommit(1, 10)
    // All three due by time at 400: one slot per 400 ms, in turn.
    clock.advance(400)
    expect(inFlight()).toEqual(['a'])
    expect(pacer.waiting).toBe(2)
    await a.taken(1)
    clock.advance(399)
    expect(inFlight()).toEqual([])
    clock.advance(1)
    expect(inFlight()).toEqual(['b'])
    await b.taken(1)
    // c crosses everyBytes: it snapshots at once, and leaves the line.
    c.scheduler.noteCommit(1, 1000)
    expect(inFlight()).toEqual(['c'])
    expect(pacer.waiting).toBe(0)
    await c.taken(1)
    // a, due again at 800, waits for b's slot to age (1200); b waits behind it.
    a.scheduler.noteCommit(1, 10)
    b.scheduler.noteCommit(1, 10)
    expect(inFlight()).toEqual([])
    clock.advance(400)
    expect(inFlight()).toEqual(['a'])
    expect(pacer.waiting).toBe(1)
    await a.taken(2)
    // A stopped scheduler leaves the line too.
    await b.scheduler.stop()
    expect(pacer.waiting).toBe(0)
  })

  it('refuses a pacer that is not a SnapshotPacer', async () => {
    const f = await fixture(tempDir('tidemark-pacer-'), 10)
    open.push(f)
    expect(() => new SnapshotScheduler(f.snapshotter, { pacer: { request: () => true } as never })).toThrow(/pacer must be a SnapshotPacer/)
  })
})
