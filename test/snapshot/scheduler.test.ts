import { afterEach, describe, expect, it } from 'vitest'
import { SnapshotScheduler, TidemarkError, type SchedulerClock, type SnapshotResult } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { fixture, type Fixture } from './helpers.js'

const open: Array<{ close(): Promise<void> } | SnapshotScheduler> = []
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await ('stop' in o ? o.stop() : o.close())
})

/** A clock moved by hand: `advance(ms)` moves time and runs the interval callbacks once. */
function manualClock(): SchedulerClock & { advance(ms: number): void; intervals: () => number[] } {
  let now = 0
  const timers = new Map<number, { ms: number; fn: () => void }>()
  let next = 0
  return {
    now: () => now,
    every: (ms, fn) => {
      const id = next++
      timers.set(id, { ms, fn })
      return () => { timers.delete(id) }
    },
    advance: (ms) => {
      now += ms
      for (const { fn } of [...timers.values()]) fn()
    },
    intervals: () => [...timers.values()].map((t) => t.ms),
  }
}

/** Calls of a callback, and a promise for the nth one. */
function calls<T>(): { list: T[]; push(value: T): void; nth(n: number): Promise<void> } {
  const list: T[] = []
  const waiting: Array<{ n: number; resolve: () => void }> = []
  return {
    list,
    push(value) {
      list.push(value)
      for (const w of waiting.filter((x) => list.length >= x.n)) {
        waiting.splice(waiting.indexOf(w), 1)
        w.resolve()
      }
    },
    nth: (n) => (list.length >= n ? Promise.resolve() : new Promise((resolve) => { waiting.push({ n, resolve }) })),
  }
}

async function setup(options: ConstructorParameters<typeof SnapshotScheduler>[1]): Promise<{ f: Fixture; scheduler: SnapshotScheduler; results: SnapshotResult[]; errors: unknown[]; snapshotted: (n: number) => Promise<void>; failed: (n: number) => Promise<void>; maxConcurrent: () => number }> {
  const f = await fixture(tempDir('tidemark-sched-'), 1000)
  open.push(f)
  // Counts how many snapshots overlap, through the one method the scheduler calls.
  let running = 0
  let max = 0
  const take = f.snapshotter.takeSnapshot.bind(f.snapshotter)
  f.snapshotter.takeSnapshot = async (o) => {
    max = Math.max(max, ++running)
    try {
      return await take(o)
    } finally {
      running--
    }
  }
  const results = calls<SnapshotResult>()
  const errors = calls<unknown>()
  const scheduler = new SnapshotScheduler(f.snapshotter, { onSnapshot: (r) => results.push(r), onError: (e) => errors.push(e), ...options })
  open.push(scheduler)
  return { f, scheduler, results: results.list, errors: errors.list, snapshotted: results.nth, failed: errors.nth, maxConcurrent: () => max }
}

describe('SnapshotScheduler', () => {
  it('snapshots when the events committed since the last one reach everyEvents', async () => {
    const { f, scheduler, results, snapshotted } = await setup({ everyEvents: 100, everyBytes: 0, intervalMs: 0 })
    scheduler.noteCommit(60, 6000)
    expect(scheduler.inFlight).toBe(false)
    expect(scheduler.pending).toEqual({ events: 60, bytes: 6000 })
    scheduler.noteCommit(50, 5000)
    expect(scheduler.inFlight).toBe(true)
    expect(scheduler.pending).toEqual({ events: 0, bytes: 0 })
    await snapshotted(1)
    expect(results[0]!.positions).toEqual(f.store.positions())
  })

  it('callbacks that throw: a snapshot stays a success, a failure is reported once, and the schedule goes on', async () => {
    // Nobody awaits a scheduled snapshot: an onError that threw was an unhandled rejection (it ends a Node
    // process), and an onSnapshot that threw was reported to onError as a failed snapshot.
    // The callbacks run after the scheduler let go of its snapshot: whoever
    // awaits their calls sees it idle.
    const taken = calls<SnapshotResult>()
    const failures = calls<unknown>()
    const { f, scheduler } = await setup({
      everyEvents: 100, everyBytes: 0, intervalMs: 0, retryDelayMs: 0,
      onSnapshot: (r) => { taken.push(r); throw new Error('onSnapshot bug') },
      onError: (e) => { failures.push(e); throw new Error('onError bug') },
    })
    scheduler.noteCommit(100, 1000)
    await taken.nth(1)
    expect(scheduler.inFlight).toBe(false)
    expect(failures.list).toEqual([])
    const take = f.snapshotter.takeSnapshot.bind(f.snapshotter)
    f.snapshotter.takeSnapshot = () => Promise.reject(new Error('injected snapshot failure'))
    scheduler.noteCommit(100, 1000)
    await failures.nth(1)
    expect(scheduler.inFlight).toBe(false)
    f.snapshotter.takeSnapshot = take
    await f.write(0, 10, 3)
    scheduler.noteCommit(100, 1000)
    await taken.nth(2)
    expect(scheduler.inFlight).toBe(false)
    expect(failures.list.map((e) => (e as Error).message)).toEqual(['injected snapshot failure'])
  })

  it('snapshots when the bytes committed reach everyBytes, one at a time however fast commits come', async () => {
    const { f, scheduler, results, errors, snapshotted, maxConcurrent } = await setup({ everyEvents: 0, everyBytes: 1000, intervalMs: 0 })
    let startedInFlight = 0
    for (let i = 0; i < 40; i++) {
      await f.write(i * 10, i * 10 + 10, 2)
      if (scheduler.inFlight) startedInFlight++
      scheduler.noteCommit(10, 600)
      // Halfway, the commits wait for the first snapshot to end; those that
      // follow cross the threshold again and start the next one.
      if (i === 19) await snapshotted(1)
    }
    await scheduler.stop()
    expect(startedInFlight).toBeGreaterThan(0) // commits did come while one was in flight
    expect(results.length).toBeGreaterThanOrEqual(2)
    expect(maxConcurrent()).toBe(1)
    expect(errors).toEqual([])
  })

  it('snapshots by time only when something was committed since the last snapshot', async () => {
    const clock = manualClock()
    const { scheduler, results, snapshotted } = await setup({ intervalMs: 40, everyBytes: 0, clock })
    scheduler.start()
    expect(clock.intervals()).toEqual([10]) // a quarter of intervalMs, at least 10 ms
    for (let i = 0; i < 20; i++) clock.advance(10)
    expect(scheduler.inFlight).toBe(false)
    scheduler.noteCommit(1, 10) // 200 ms since the start, and now something to snapshot
    expect(scheduler.inFlight).toBe(true)
    await snapshotted(1)
    // A commit right after: not due until intervalMs after the last start, then the timer starts it.
    scheduler.noteCommit(1, 10)
    clock.advance(30)
    expect(scheduler.inFlight).toBe(false)
    clock.advance(10)
    expect(scheduler.inFlight).toBe(true)
    await snapshotted(2)
    for (let i = 0; i < 20; i++) clock.advance(10)
    expect(scheduler.inFlight).toBe(false)
    expect(results).toHaveLength(2)
    await scheduler.stop()
    expect(clock.intervals()).toEqual([])
  })

  it('phase: the first time-based snapshot comes that part of intervalMs early, and the ones after keep the interval', async () => {
    const clock = manualClock()
    const { scheduler, snapshotted } = await setup({ intervalMs: 400, everyBytes: 0, clock, phase: 0.75 })
    expect(scheduler.phase).toBe(0.75)
    scheduler.start()
    scheduler.noteCommit(1, 10)
    clock.advance(90) // 390 ms of the interval counted: not due yet
    expect(scheduler.inFlight).toBe(false)
    clock.advance(10)
    expect(scheduler.inFlight).toBe(true)
    await snapshotted(1)
    scheduler.noteCommit(1, 10)
    clock.advance(390)
    expect(scheduler.inFlight).toBe(false)
    clock.advance(10)
    expect(scheduler.inFlight).toBe(true)
    await snapshotted(2)
  })

  it('refuses a phase outside [0, 1), and defaults it to 0', async () => {
    const { f, scheduler } = await setup({ intervalMs: 0 })
    expect(scheduler.phase).toBe(0)
    for (const phase of [1, -0.1, Number.NaN, '0.5', null]) {
      expect(() => new SnapshotScheduler(f.snapshotter, { phase: phase as number })).toThrow(RangeError)
    }
  })

  it('after a failure gives the counts back and waits retryDelayMs before trying again', async () => {
    const clock = manualClock()
    const { f, scheduler, errors, snapshotted, failed } = await setup({ everyEvents: 10, everyBytes: 0, intervalMs: 0, retryDelayMs: 300, clock })
    const take = f.snapshotter.takeSnapshot.bind(f.snapshotter)
    let failures = 1
    f.snapshotter.takeSnapshot = async (o) => {
      if (failures-- > 0) throw new TidemarkError('TIDEMARK_SNAPSHOT_UPLOAD_FAILED', 'injected')
      return take(o)
    }
    scheduler.noteCommit(10)
    await failed(1)
    expect(errors[0]).toMatchObject({ code: 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED' })
    expect(scheduler.pending.events).toBe(10)
    scheduler.noteCommit(5)
    expect(scheduler.inFlight).toBe(false)
    clock.advance(299)
    scheduler.noteCommit(1)
    expect(scheduler.inFlight).toBe(false)
    clock.advance(1)
    scheduler.noteCommit(1)
    expect(scheduler.inFlight).toBe(true)
    await snapshotted(1)
    expect(scheduler.pending.events).toBe(0)
  })

  it('stop() waits for the snapshot in flight; trigger() takes one now', async () => {
    const { scheduler, results } = await setup({ everyBytes: 0, intervalMs: 0 })
    const triggered = scheduler.trigger()
    // Nothing was committed since: the snapshot in flight, whose checkpoint comes later, covers this call too.
    const again = scheduler.trigger()
    await scheduler.stop()
    expect(results).toHaveLength(1)
    expect(await triggered).toBe(results[0])
    expect(await again).toBe(results[0])
    expect(() => new SnapshotScheduler(scheduler.snapshotter, { everyBytes: -1 })).toThrow(RangeError)
    expect(() => new SnapshotScheduler(scheduler.snapshotter, { clock: {} as SchedulerClock })).toThrow(/clock must be an object with now\(\) and every\(ms, fn\)/)
    expect(() => new SnapshotScheduler(scheduler.snapshotter, { clock: Date.now as unknown as SchedulerClock })).toThrow(TypeError)
  })

  it('trigger() while a snapshot uploads waits for it and then takes a new one that covers the commits made since its checkpoint', async () => {
    const { f, scheduler, results, maxConcurrent } = await setup({ everyBytes: 0, intervalMs: 0 })
    // Fault-injection style wrap of one call: the first put (a data object) waits until released.
    const put = f.dfs.put.bind(f.dfs)
    let putStarted!: () => void
    const started = new Promise<void>((resolve) => { putStarted = resolve })
    let release!: () => void
    const released = new Promise<void>((resolve) => { release = resolve })
    let calls = 0
    f.dfs.put = async (key, body, options) => {
      if (++calls === 1) {
        putStarted()
        await released
      }
      return put(key, body, options)
    }
    const first = scheduler.trigger()
    await started
    const checkpointed = f.store.positions()
    const last = await f.write(0, 100, 2) // committed while the first snapshot uploads
    const second = scheduler.trigger()
    const third = scheduler.trigger()
    release()
    expect((await first)?.positions).toEqual(checkpointed)
    expect((await second)?.positions).toEqual([{ topic: 'events', partition: 0, offset: last }])
    expect(await third).toBe(await second)
    expect(results).toHaveLength(2)
    expect(maxConcurrent()).toBe(1)
  })

  it('a trigger() waiting for a snapshot in flight takes none once stop() was called', async () => {
    const { f, scheduler, results } = await setup({ everyBytes: 0, intervalMs: 0 })
    // Fault-injection style wrap of one call: the first put waits until released.
    const put = f.dfs.put.bind(f.dfs)
    let putStarted!: () => void
    const started = new Promise<void>((resolve) => { putStarted = resolve })
    let release!: () => void
    const released = new Promise<void>((resolve) => { release = resolve })
    f.dfs.put = async (key, body, options) => {
      f.dfs.put = put
      putStarted()
      await released
      return put(key, body, options)
    }
    const first = scheduler.trigger()
    await started
    await f.write(0, 100, 2)
    const waiting = scheduler.trigger()
    const stopped = scheduler.stop()
    release()
    await stopped
    expect(await first).toBeDefined()
    expect(await waiting).toBeUndefined()
    expect(results).toHaveLength(1)
  })
})
