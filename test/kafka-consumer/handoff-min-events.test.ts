// handoff.minEvents: a partition whose store is only a few events past its
// last snapshot is handed off without a new one (its claim released at
// once); the next owner restores that snapshot and replays the few events.
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer, type PartitionClosed, type PartitionStarted } from '../../connectors/kafka/index.js'
import { tempDir } from '../helpers/tmp.js'
import { byPartition, committedThrough, consumerOptions, fold, groupFixture, produceWords, readState, type WordEvent } from './fixture.js'

const PARTITIONS = [0, 1, 2, 3]

describe('StatefulConsumer: handoff.minEvents', () => {
  it('hands off without a snapshot below minEvents, and the next owner replays what followed the last one', async () => {
    const { brokers, producer, topic, job, store } = await groupFixture('kc-minevents')
    const options = consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir() }, {
      snapshots: { store, schedule: { intervalMs: 0, everyEvents: 100 } },
      handoff: { minEvents: 50 },
    })
    const a = new StatefulConsumer<WordEvent>(options)
    const snapshotAt = new Map<number, bigint>()
    const snapshotted = new Promise<void>((resolve) => {
      a.on('snapshot', (s) => {
        snapshotAt.set(s.partition, s.result.positions[0]!.offset)
        if (snapshotAt.size === PARTITIONS.length) resolve()
      })
    })
    const first = await produceWords(producer, topic, PARTITIONS, 100)
    await a.start()
    await committedThrough([a], first)
    await snapshotted
    // Every partition's snapshot at offset 99, then 20 events past it.
    const tail = await produceWords(producer, topic, PARTITIONS, 20, 20, 1)
    await committedThrough([a], tail)
    expect([...snapshotAt.values()]).toEqual(PARTITIONS.map(() => 99n))
    const closed: PartitionClosed[] = (await a.close()).partitions
    for (const c of closed) {
      expect(c.handoff).toBeUndefined()
      expect(c.handoffFailed).toBeUndefined()
      expect(c.handoffSkipped).toEqual({ eventsSinceSnapshot: 20 })
    }

    // A new member with an empty state dir restores the snapshot at 99 and replays 100..119.
    const bDir = tempDir()
    const b = new StatefulConsumer<WordEvent>({ ...options, stateDir: bDir })
    onTestFinished(async () => { await b.close() })
    const starts: PartitionStarted[] = []
    b.on('partition-started', (s) => starts.push(s))
    await b.start()
    await committedThrough([b], tail)
    expect(starts.map((s) => [s.partition, s.source, s.position])).toEqual(expect.arrayContaining(PARTITIONS.map((p) => [p, 'snapshot', 99n])))
    const records = byPartition([...first, ...tail])
    for (const p of PARTITIONS) expect(await readState(b.store(topic, p)!)).toEqual(fold(records.get(`${topic}-${p}`)!))

    // b never took a snapshot of its own: the 20 it replayed count from the one it restored.
    for (const c of (await b.close()).partitions) {
      expect(c.handoff).toBeUndefined()
      expect(c.handoffSkipped).toEqual({ eventsSinceSnapshot: 20 })
    }
    // A restart on b's state dir finds its stores at 119, 20 past the snapshot, and commits nothing new: still 20.
    const c = new StatefulConsumer<WordEvent>({ ...options, stateDir: bDir })
    onTestFinished(async () => { await c.close() })
    const restarted: PartitionStarted[] = []
    const allStarted = new Promise<void>((resolve) => c.on('partition-started', (s) => { if (restarted.push(s) === PARTITIONS.length) resolve() }))
    await c.start()
    await allStarted
    expect(restarted.map((s) => [s.partition, s.source, s.position])).toEqual(expect.arrayContaining(PARTITIONS.map((p) => [p, 'local', 119n])))
    for (const closedAgain of (await c.close()).partitions) {
      expect(closedAgain.handoff).toBeUndefined()
      expect(closedAgain.handoffSkipped).toEqual({ eventsSinceSnapshot: 20 })
    }
  })
})
