import { setTimeout as sleep } from 'node:timers/promises'
import { afterEach, describe, expect, it } from 'vitest'
import { SnapshotScheduler, TidemarkError, type SnapshotResult } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { fixture, type Fixture } from './helpers.js'

const open: Array<{ close(): Promise<void> } | SnapshotScheduler> = []
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await ('stop' in o ? o.stop() : o.close())
})

async function setup(options: ConstructorParameters<typeof SnapshotScheduler>[1]): Promise<{ f: Fixture; scheduler: SnapshotScheduler; results: SnapshotResult[]; errors: unknown[]; maxConcurrent: () => number }> {
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
  const results: SnapshotResult[] = []
  const errors: unknown[] = []
  const scheduler = new SnapshotScheduler(f.snapshotter, { onSnapshot: (r) => results.push(r), onError: (e) => errors.push(e), ...options })
  open.push(scheduler)
  return { f, scheduler, results, errors, maxConcurrent: () => max }
}

async function until(condition: () => boolean, ms = 10_000): Promise<void> {
  const deadline = performance.now() + ms
  while (!condition()) {
    if (performance.now() > deadline) throw new Error('condition not met in time')
    await sleep(10)
  }
}

describe('SnapshotScheduler', () => {
  it('snapshots when the events committed since the last one reach everyEvents', async () => {
    const { f, scheduler, results } = await setup({ everyEvents: 100, everyBytes: 0, intervalMs: 0 })
    scheduler.noteCommit(60, 6000)
    expect(scheduler.inFlight).toBe(false)
    expect(scheduler.pending).toEqual({ events: 60, bytes: 6000 })
    scheduler.noteCommit(50, 5000)
    expect(scheduler.inFlight).toBe(true)
    expect(scheduler.pending).toEqual({ events: 0, bytes: 0 })
    await until(() => results.length === 1)
    expect(results[0]!.positions).toEqual(f.store.positions())
  })

  it('callbacks that throw: a snapshot stays a success, a failure is reported once, and the schedule goes on', async () => {
    // Nobody awaits a scheduled snapshot: an onError that threw was an unhandled rejection (it ends a Node
    // process), and an onSnapshot that threw was reported to onError as a failed snapshot.
    let taken = 0
    const failures: unknown[] = []
    const { f, scheduler } = await setup({
      everyEvents: 100, everyBytes: 0, intervalMs: 0, retryDelayMs: 0,
      onSnapshot: () => { taken++; throw new Error('onSnapshot bug') },
      onError: (e) => { failures.push(e); throw new Error('onError bug') },
    })
    scheduler.noteCommit(100, 1000)
    await until(() => taken === 1 && !scheduler.inFlight)
    expect(failures).toEqual([])
    const take = f.snapshotter.takeSnapshot.bind(f.snapshotter)
    f.snapshotter.takeSnapshot = () => Promise.reject(new Error('injected snapshot failure'))
    scheduler.noteCommit(100, 1000)
    await until(() => failures.length === 1 && !scheduler.inFlight)
    f.snapshotter.takeSnapshot = take
    await f.write(0, 10, 3)
    scheduler.noteCommit(100, 1000)
    await until(() => taken === 2 && !scheduler.inFlight)
    expect(failures.map((e) => (e as Error).message)).toEqual(['injected snapshot failure'])
  })

  it('snapshots when the bytes committed reach everyBytes, one at a time however fast commits come', async () => {
    const { f, scheduler, results, errors, maxConcurrent } = await setup({ everyEvents: 0, everyBytes: 1000, intervalMs: 0 })
    for (let i = 0; i < 40; i++) {
      await f.write(i * 10, i * 10 + 10, 2)
      scheduler.noteCommit(10, 600)
      await sleep(5)
    }
    await scheduler.stop()
    expect(results.length).toBeGreaterThanOrEqual(2)
    expect(maxConcurrent()).toBe(1)
    expect(errors).toEqual([])
  })

  it('snapshots by time only when something was committed since the last snapshot', async () => {
    const { scheduler, results } = await setup({ intervalMs: 40, everyBytes: 0 })
    scheduler.start()
    await sleep(200)
    expect(results).toEqual([])
    scheduler.noteCommit(1, 10)
    await until(() => results.length === 1)
    await sleep(200)
    expect(results).toHaveLength(1)
  })

  it('after a failure gives the counts back and waits retryDelayMs before trying again', async () => {
    const { f, scheduler, results, errors } = await setup({ everyEvents: 10, everyBytes: 0, intervalMs: 0, retryDelayMs: 300 })
    const take = f.snapshotter.takeSnapshot.bind(f.snapshotter)
    let failures = 1
    f.snapshotter.takeSnapshot = async (o) => {
      if (failures-- > 0) throw new TidemarkError('TIDEMARK_SNAPSHOT_UPLOAD_FAILED', 'injected')
      return take(o)
    }
    scheduler.noteCommit(10)
    await until(() => errors.length === 1)
    expect(errors[0]).toMatchObject({ code: 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED' })
    expect(scheduler.pending.events).toBe(10)
    scheduler.noteCommit(5)
    await sleep(100)
    expect(scheduler.inFlight).toBe(false)
    await sleep(250)
    scheduler.noteCommit(1)
    await until(() => results.length === 1)
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
