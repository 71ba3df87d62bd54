import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import type { AssignmentInfo } from '../../connectors/kafka/consumer/assignor-metadata.js'
import { LocalState } from '../../connectors/kafka/consumer/local-state.js'
import { TransferPriority } from '../../connectors/kafka/consumer/transfer-priority.js'
import { FsSnapshotStore, type SnapshotStore } from '../../src/index.js'
import { noopLogger } from '../../src/logging/logger.js'
import { ManualClock, until } from '../helpers/manual-clock.js'

const WAIT_MS = 3000
const P = { topic: 'src', partition: 1 }
const Q = { topic: 'src', partition: 2 }

/** A member's LocalState in a fresh stateDir; `options` and `clock` for the standby tests. */
async function localState(options: { snapshots?: { store: SnapshotStore }; standby?: Partial<{ intervalMs: number; syncsPerInterval: number }> } = {}, clock?: ManualClock): Promise<LocalState> {
  const stateDir = await mkdtemp(join(tmpdir(), 'tidemark-local-state-'))
  onTestFinished(() => rm(stateDir, { recursive: true, force: true }))
  return new LocalState({
    job: 'job',
    stateDir,
    topics: ['src'],
    logger: noopLogger,
    snapshots: options.snapshots,
    standby: { intervalMs: 500, maxBytesPerSecond: 0, maxDiskBytes: 0, syncsPerInterval: 16, ...options.standby },
    handoff: { snapshot: true, timeoutMs: 10_000, waitMs: WAIT_MS, minEvents: 0 },
    warmup: undefined,
  }, new TransferPriority(), () => undefined, () => undefined, clock)
}

function info(generation: number, orphaned: Array<typeof P> = []): AssignmentInfo {
  return { generation, standbys: [], warmups: [], orphaned, memberId: 'm' }
}

describe('LocalState: how long a new task waits for the previous owner', () => {
  it('an orphan takes its claim at once; any other partition waits handoff.waitMs', async () => {
    const local = await localState()
    local.assigned(info(1, [P]), [P, Q], () => false)
    expect(local.taskStart(P).waitMs).toBe(0)
    expect(local.taskStart(Q).waitMs).toBe(WAIT_MS)
  })

  it('an orphan assigned here again at the next round is still one (the leader saw this member own it)', async () => {
    const local = await localState()
    local.assigned(info(1, [P]), [P], () => false)
    // A kafkajs crash-restart: the member rejoins, advertises P as owned, and the leader orphans nothing.
    local.assigned(info(2), [P], () => false)
    expect(local.taskStart(P).waitMs).toBe(0)
    local.assigned(info(3), [P], () => false)
    expect(local.taskStart(P).waitMs).toBe(0)
  })

  it('the orphan is forgotten once another round may have given it a live owner', async () => {
    const skipped = await localState()
    skipped.assigned(info(1, [P]), [P], () => false)
    // Generation 2 ran without this member: P may have had another owner since.
    skipped.assigned(info(3), [P], () => false)
    expect(skipped.taskStart(P).waitMs).toBe(WAIT_MS)

    const movedAway = await localState()
    movedAway.assigned(info(1, [P]), [P], () => false)
    movedAway.assigned(info(2), [Q], () => false)
    movedAway.assigned(info(3), [P, Q], () => false)
    expect(movedAway.taskStart(P).waitMs).toBe(WAIT_MS)
  })
})

describe('LocalState: standby copies and their listings', () => {
  const INTERVAL_MS = 1000
  const SLOTS = 4

  /** A member keeping `copies` standby copies on a manual clock; counts the snapshot store's listings. */
  async function member(copies: number): Promise<{ local: LocalState; clock: ManualClock; listings: () => number; settled: () => Promise<void> }> {
    const dfs = await mkdtemp(join(tmpdir(), 'tidemark-local-state-dfs-'))
    onTestFinished(() => rm(dfs, { recursive: true, force: true }))
    const store: SnapshotStore = new FsSnapshotStore({ root: dfs })
    let listed = 0
    let open = 0
    const list = store.list.bind(store)
    // One wrapped call: each listing counted from its start to its end.
    store.list = (prefix, options) => {
      listed++
      open++
      return (async function* () {
        try {
          yield* list(prefix, options)
        } finally {
          open--
        }
      })()
    }
    const clock = new ManualClock()
    const local = await localState({ snapshots: { store }, standby: { intervalMs: INTERVAL_MS, syncsPerInterval: SLOTS } }, clock)
    const standbys = Array.from({ length: copies }, (_, i) => ({ topic: 'src', partition: i }))
    local.assigned({ generation: 1, standbys, warmups: [], orphaned: [], memberId: 'm' }, [], () => false)
    onTestFinished(() => local.assigned({ generation: 2, standbys: [], warmups: [], orphaned: [], memberId: 'm' }, [], () => false))
    // Every follower idle: no listing open, and each waits on one timer of the clock (its next sync or its next ask).
    const settled = () => until(() => open === 0 && clock.pending === copies)
    await settled()
    return { local, clock, listings: () => listed, settled }
  }

  /** Listings in `intervals` intervals after the first, the clock moved 100 ms at a time. */
  async function listingsOver(m: Awaited<ReturnType<typeof member>>, intervals: number): Promise<number> {
    const before = m.listings()
    for (let t = 0; t < intervals * 10; t++) {
      m.clock.advance(INTERVAL_MS / 10)
      await m.settled()
    }
    return m.listings() - before
  }

  it('syncs each of few copies every intervalMs', async () => {
    const m = await member(2)
    expect(m.listings()).toBe(2)
    expect(await listingsOver(m, 10)).toBe(20)
  })

  it('starts at most syncsPerInterval syncs per intervalMs, however many copies it keeps', async () => {
    const eight = await member(8)
    const many = await member(64)
    // The first turns: SLOTS at once, not one per copy.
    expect(eight.listings()).toBe(SLOTS)
    expect(many.listings()).toBe(SLOTS)
    const a = await listingsOver(eight, 10)
    const b = await listingsOver(many, 10)
    expect(a).toBeLessThanOrEqual(SLOTS * 10)
    expect(b).toBeLessThanOrEqual(SLOTS * 10)
    // Still syncing at the full rate, not starved.
    expect(a).toBeGreaterThanOrEqual(SLOTS * 9)
    expect(b).toBeGreaterThanOrEqual(SLOTS * 9)
  })
})
