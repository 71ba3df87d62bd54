// A consumer group's moved partition with a warm standby copy restores over
// it while its claim is taken (src/runtime/partition-lifecycle.ts,
// #restoreAhead), and uses that store only if the listing it restored from
// was current for the claim: when the previous owner committed a hand-off
// snapshot after it, the start restores again and ends on the hand-off.
// The previous owner holds the claim until the test has seen the restore
// ahead end: without the change the restore waits for the claim, and the
// test never gets there (it times out).
import { describe, expect, it, onTestFinished } from 'vitest'
import { noopLogger, type Logger } from '../../src/logging/logger.js'
import { readClaim } from '../../src/ownership/claim.js'
import { PartitionLifecycle, type LifecycleStart } from '../../src/runtime/partition-lifecycle.js'
import { PartitionOutputs } from '../../src/outputs/partition-outputs.js'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { SnapshotFollower } from '../../src/snapshot/follow.js'
import type { PartitionStore } from '../../src/store/partition-store.js'
import { tempDir } from '../helpers/tmp.js'
import { readTotals, TOPIC, totals } from './fixtures/totals.js'

const none = (): void => undefined

function lifecycle(job: string, store: FsSnapshotStore, phases: string[] = [], standby?: SnapshotFollower, logger: Logger = noopLogger): PartitionLifecycle {
  const life = new PartitionLifecycle({
    job, key: 0, topic: TOPIC, partition: 0, path: `${tempDir()}/p0`, states: [totals], allowEmpty: true, logger,
    snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    claim: { kind: 'assigned', waitMs: 60_000 },
    outputs: new PartitionOutputs({ job, topic: TOPIC, partition: 0, outputs: undefined, dedupe: 'off' }),
    events: { restore: none, snapshot: none, snapshotFailed: none, snapshotter: none, ownership: none, stateSize: none, stateSizeExceeded: none, phase: (step) => phases.push(step) },
    ...(standby === undefined ? {} : { standby }),
  })
  onTestFinished(() => life.shutdown())
  return life
}

async function put(store: PartitionStore, keys: number, offset: bigint): Promise<void> {
  const tx = store.transaction()
  for (let k = 0; k < keys; k++) tx.value(totals).put(`k${k}`, Number(offset) * 1000 + k)
  await tx.commit({ topic: TOPIC, partition: 0, offset })
}

/**
 * The previous owner A with a snapshot at offset 0, holding the claim; the
 * next owner B with a standby copy of that snapshot, started. Resolves once
 * B's restore ahead ended (its standby copy is disposed of at the end of a
 * restore), with B's start still waiting for the claim.
 */
async function moving(job: string): Promise<{ a: PartitionLifecycle; started: Promise<LifecycleStart>; b: PartitionLifecycle; phases: string[]; store: FsSnapshotStore }> {
  const store = new FsSnapshotStore({ root: tempDir() })
  onTestFinished(() => store.close())
  const a = lifecycle(job, store)
  await a.start()
  await put(a.store!, 50, 0n)
  await a.snapshot()
  const standby = new SnapshotFollower({ snapshotStore: store, job, partition: 0, dir: tempDir() })
  await standby.sync()
  let restoredAhead!: () => void
  const ended = new Promise<void>((resolve) => { restoredAhead = resolve })
  const dispose = standby.dispose.bind(standby)
  standby.dispose = async () => {
    await dispose()
    restoredAhead()
  }
  const phases: string[] = []
  const b = lifecycle(job, store, phases, standby)
  const started = b.start()
  // Awaited by each test; a test that failed before leaves no unhandled rejection.
  started.catch(() => undefined)
  await ended
  // A still holds the claim, B holds nothing yet.
  expect((await readClaim(store, job, 0))?.record?.leaseUntil).not.toBe(0)
  expect(phases).not.toContain('claimed')
  expect(b.store).toBeUndefined()
  return { a, started, b, phases, store }
}

describe('PartitionLifecycle: a group\'s standby copy restored while the claim is taken', () => {
  it('uses the store restored ahead when no snapshot came after its listing', { timeout: 30_000 }, async () => {
    const { a, started, b, phases } = await moving('ahead-current')
    const expected = await readTotals(a.store!)
    await a.shutdown()
    const start = await started
    expect(start).toMatchObject({ source: 'snapshot', snapshot: '0000000001-000000000000' })
    expect(phases).not.toContain('restoring the hand-off')
    expect(phases).toContain('opened early')
    expect(await readTotals(b.store!)).toEqual(expected)
    expect(b.store!.position(TOPIC, 0)).toBe(0n)
  })

  it('restores again when the previous owner committed a hand-off after the listing', { timeout: 30_000 }, async () => {
    const { a, started, b, phases } = await moving('ahead-handoff')
    await put(a.store!, 80, 1n)
    const handoff = await a.snapshot()
    const expected = await readTotals(a.store!)
    await a.shutdown()
    const start = await started
    expect(start).toMatchObject({ source: 'snapshot', snapshot: handoff!.id })
    // The tables restored ahead are linked as they are, not hashed again as a local store's would be.
    expect(phases.find((p) => p.startsWith('restoring the hand-off'))).toMatch(/^restoring the hand-off, reusing [1-9]\d* files$/)
    expect(await readTotals(b.store!)).toEqual(expected)
    expect(b.store!.position(TOPIC, 0)).toBe(1n)
  })

  it('restores again after the claim when the restore ahead failed, and logs why', { timeout: 30_000 }, async () => {
    const store = new FsSnapshotStore({ root: tempDir() })
    onTestFinished(() => store.close())
    const job = 'ahead-failed'
    const a = lifecycle(job, store)
    await a.start()
    await put(a.store!, 50, 0n)
    await a.snapshot()
    const expected = await readTotals(a.store!)
    const standby = new SnapshotFollower({ snapshotStore: store, job, partition: 0, dir: tempDir() })
    await standby.sync()
    // The standby cannot be stopped: the restore ahead fails before it restores anything.
    standby.stop = () => Promise.reject(new Error('standby stop refused'))
    const warned: Array<{ fields: object; message: string }> = []
    const logger: Logger = { ...noopLogger, warn: (fields, message) => { warned.push({ fields, message }) } }
    const phases: string[] = []
    const b = lifecycle(job, store, phases, standby, logger)
    const started = b.start()
    started.catch(() => undefined)
    await a.shutdown()
    expect(await started).toMatchObject({ source: 'snapshot', snapshot: '0000000001-000000000000' })
    expect(phases).toContain('restoring again')
    expect(warned).toContainEqual(expect.objectContaining({ message: expect.stringMatching(/restore ahead of the claim failed/), fields: expect.objectContaining({ err: expect.objectContaining({ message: 'standby stop refused' }) }) }))
    expect(await readTotals(b.store!)).toEqual(expected)
  })
})
