import { logLevel, type logCreator } from 'kafkajs'
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { tempDir } from '../helpers/tmp.js'
import { byPartition, committedThrough, consumerOptions, fold, groupFixture, produceWords, running, snapshotState, trickle, until, type Produced, type WordEvent } from './fixture.js'

const PARTITIONS = [0, 1, 2, 3]
/** kafkajs's runner logs this (warn) when a heartbeat finds a round under way: the member's round starts. */
const ROUND_STARTS = 'The group is rebalancing, re-joining'

describe('StatefulConsumer: a group round', () => {
  // A member's partitions that stay its own go on through the group's
  // round (docs/consumer-group.md, "Rebalances stop only what moves"). The
  // mock holds a round open until every member rejoined or the rebalance
  // timeout, at least sessionTimeout - 1 s (../shared/design.md): B's
  // JoinGroup opens it, A rejoins once a heartbeat tells it, and the round
  // ends with A's next assignment. Under kafkajs's own consumer A fetched
  // nothing in between; here every partition A keeps commits records
  // produced while the round is open, and the state stays exact.
  it('a partition that stays commits while the round is open; the final state is exact', async () => {
    const { brokers, producer, topic, job, snapshotRoot } = await groupFixture('kc-round')
    const base = { brokers, job, topics: [topic], snapshotRoot }
    let roundStart: number | undefined
    const onLog: logCreator = () => ({ log }) => {
      if (log.message === ROUND_STARTS && roundStart === undefined) roundStart = performance.now()
    }
    const a = new StatefulConsumer<WordEvent>(consumerOptions({ ...base, stateDir: tempDir() }, { kafka: { logLevel: logLevel.WARN, logCreator: onLog } }))
    const b = new StatefulConsumer<WordEvent>(consumerOptions({ ...base, stateDir: tempDir() }))
    onTestFinished(async () => { await a.close() })
    onTestFinished(async () => { await b.close() })
    const first = await produceWords(producer, topic, PARTITIONS, 100)
    await a.start()
    await until([a], () => running(a) === 4)
    await committedThrough([a], first)

    // Commits of A, timed; and records produced all along, until B runs its share.
    const commits: Array<{ partition: number; at: number }> = []
    a.on('commit', (c) => commits.push({ partition: c.partition, at: performance.now() }))
    let roundEnd: number | undefined
    a.on('assignment', () => { roundEnd ??= performance.now() })
    const produced: Produced[] = [...first]
    const trickling = trickle(producer, topic, PARTITIONS, 5, produced)
    await b.start()
    await until([a, b], () => running(a) === 2 && running(b) === 2)
    await trickling.stop()

    expect(roundStart).toBeDefined()
    expect(roundEnd).toBeDefined()
    // The round was held open for a while (the mock's JoinGroup wait), so
    // that "nothing committed in it" would show.
    expect(roundEnd! - roundStart!).toBeGreaterThan(2000)
    const kept = a.partitions().map((p) => p.partition)
    expect(kept).toHaveLength(2)
    for (const p of kept) {
      const inRound = commits.filter((c) => c.partition === p && c.at > roundStart! && c.at < roundEnd!)
      expect(inRound.length, `partition ${p}: commits while the round was open`).toBeGreaterThan(1)
    }

    await committedThrough([a, b], produced)
    await a.close()
    await b.close()
    const store = new FsSnapshotStore({ root: snapshotRoot })
    onTestFinished(() => store.close())
    const dir = tempDir()
    for (const [key, records] of byPartition(produced)) {
      const { state, position } = await snapshotState(store, job, topic, records[0]!.partition, dir)
      expect(position, key).toBe(records.at(-1)!.offset)
      expect(state, key).toEqual(fold(records))
    }
  })
})
