import { createRequire } from 'node:module'
import { afterEach, describe, expect, it, onTestFinished, vi } from 'vitest'
import { StatefulConsumer, type PartitionStarted } from '../../connectors/kafka/index.js'
import { isTidemarkError } from '../../src/errors.js'
import { readClaim } from '../../src/ownership/index.js'
import { TAKEOVER_GRACE_MS } from '../../src/ownership/assigned.js'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { tempDir } from '../helpers/tmp.js'
import { byPartition, committedThrough, consumerOptions, fold, groupFixture, produceWords, running, snapshotState, trickle, until, type Produced, type WordEvent } from './fixture.js'

afterEach(() => { vi.restoreAllMocks() })

const PARTITIONS = [0, 1, 2, 3]
/** The new owner's wait for the old owner's release before it marks the claim. */
const WAIT_MS = 1000
/** How long the old owner does not see its new assignment: past the new owner's forced take. */
const VIEW_DELAY_MS = WAIT_MS + TAKEOVER_GRACE_MS + 3000

const Emitter = createRequire(import.meta.url)('kafkajs/src/instrumentation/emitter.js') as { prototype: { emit(this: unknown, name: string, payload: { memberId?: string }): void } }

describe('StatefulConsumer: two owners for the length of a round', () => {
  // A member fetches through the group's round, so until it reads its new
  // assignment it goes on with a partition that moved (docs/ownership.md,
  // "Through a group round"). Here the old owner A does not see its
  // assignment for VIEW_DELAY_MS (its kafkajs GROUP_JOIN event is held back:
  // one wrapped call), while B, the new assignee, waits for a release that
  // does not come, marks the claim, and takes it by force a grace period
  // later. A must commit nothing of the partition after B took the claim:
  // its commits need a recent look at the claim, and its next look finds the
  // mark. The final state is exact.
  it('the old owner, blind to the move, commits nothing after the new owner took the claim', async () => {
    const { brokers, producer, topic, job, snapshotRoot } = await groupFixture('kc-overlap')
    const base = { brokers, job, topics: [topic], snapshotRoot }
    const a = new StatefulConsumer<WordEvent>(consumerOptions({ ...base, stateDir: tempDir() }, { handoff: { waitMs: WAIT_MS } }))
    const b = new StatefulConsumer<WordEvent>(consumerOptions({ ...base, stateDir: tempDir() }, { handoff: { waitMs: WAIT_MS } }))
    onTestFinished(async () => { await a.close() })
    onTestFinished(async () => { await b.close() })
    const first = await produceWords(producer, topic, PARTITIONS, 50)
    await a.start()
    await until([a], () => running(a) === 4)
    await committedThrough([a], first)

    // From now on A's view of the group's assignments comes VIEW_DELAY_MS late.
    const blind = a.memberId!
    const emit = Emitter.prototype.emit
    vi.spyOn(Emitter.prototype, 'emit').mockImplementation(function (this: unknown, name: string, payload: { memberId?: string }) {
      if (name === 'consumer.group_join' && payload?.memberId === blind) {
        setTimeout(() => emit.call(this, name, payload), VIEW_DELAY_MS) // ok: the injected delay of A's view, the fault under test
        return
      }
      emit.call(this, name, payload)
    })
    const commitsOfA: Array<{ partition: number; at: number }> = []
    a.on('commit', (c) => commitsOfA.push({ partition: c.partition, at: Date.now() }))
    const failedOnA: unknown[] = []
    a.on('partition-failed', (f) => failedOnA.push(f.error))
    const startsOfB: PartitionStarted[] = []
    b.on('partition-started', (s) => startsOfB.push(s))

    const produced: Produced[] = [...first]
    const trickling = trickle(producer, topic, PARTITIONS, 4, produced)
    await b.start()
    // The group splits the four partitions two and two (after B warmed its two: warm-up is on).
    await until([a, b], () => running(b) === 2 && startsOfB.length === 2)
    const store = new FsSnapshotStore({ root: snapshotRoot })
    onTestFinished(() => store.close())
    for (const started of startsOfB) {
      const moved = started.partition
      // B took the claim by force, after its wait and the grace period.
      expect(started.claimWaitMs, `partition ${moved}`).toBeGreaterThanOrEqual(WAIT_MS + TAKEOVER_GRACE_MS)
      const takenAt = (await readClaim(store, job, `${topic}-${moved}`))!.record!.takenAt
      const late = commitsOfA.filter((c) => c.partition === moved && c.at >= takenAt)
      expect(late, `A's commits of partition ${moved} at or after B's claim (taken at ${takenAt})`).toEqual([])
      // A kept committing the partition after the round (it fetches through it) until it found the mark.
      expect(commitsOfA.filter((c) => c.partition === moved).length, `partition ${moved}`).toBeGreaterThan(0)
    }
    expect(failedOnA.filter((e) => isTidemarkError(e, 'TIDEMARK_OWNERSHIP_LOST'))).toHaveLength(2)
    // Records keep coming until A has seen the move.
    await until([a, b], () => a.partitions().length === 2)
    await trickling.stop()

    await committedThrough([a, b], produced)
    await a.close()
    await b.close()
    const dir = tempDir()
    for (const [key, records] of byPartition(produced)) {
      const { state, position } = await snapshotState(store, job, topic, records[0]!.partition, dir)
      expect(position, key).toBe(records.at(-1)!.offset)
      expect(state, key).toEqual(fold(records))
    }
  })
})
