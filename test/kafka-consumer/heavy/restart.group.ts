// A restart that keeps its partitions (close({ leaveGroup: false })): the
// member closes without leaving the group, so nothing moves while it is
// away, and the process started again with the same stateDir gets its
// partitions back from its local stores, ahead of their standbys, in the
// one rebalance its join starts, under the member id it had.
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer, type PartitionStarted } from '../../../connectors/kafka/index.js'
import { tempDir } from '../../helpers/tmp.js'
import { byPartition, committedThrough, consumerOptions, FAST_GROUP, fold, groupFixture, nextStarts, produceWords, readState, running, until, type WordEvent } from '../fixture.js'

const PARTITIONS = [0, 1, 2, 3]

describe('StatefulConsumer: a restart that stays in the group', () => {
  it('gets its partitions back from its stores, downloading nothing, and no other member takes them meanwhile', async () => {
    const { brokers, producer, topic, job, store } = await groupFixture('kc-restart')
    const bDir = tempDir()
    const options = (stateDir: string) => consumerOptions({ brokers, job, topics: [topic], stateDir }, {
      snapshots: { store, schedule: { intervalMs: 0, everyEvents: 100 } },
      standbys: 1,
      standby: { intervalMs: 50 },
      // The restart must join before B's session ends, also on a loaded
      // machine (the mock holds each join round this long minus a second).
      consumer: { ...FAST_GROUP, sessionTimeout: 15_000, rebalanceTimeout: 20_000 },
    })
    const a = new StatefulConsumer<WordEvent>(options(tempDir()))
    onTestFinished(async () => { await a.close() })
    const b = new StatefulConsumer<WordEvent>(options(bDir))
    const aAssigned: number[][] = []
    a.on('assignment', ({ partitions }) => aAssigned.push(partitions.map((tp) => tp.partition)))

    const first = await produceWords(producer, topic, PARTITIONS, 200)
    await a.start()
    await b.start()
    await until([a, b], () => running(a) === 2 && running(b) === 2)
    await committedThrough([a, b], first)
    const bPartitions = b.partitions().map((p) => p.partition).sort()
    const aPartitions = a.partitions().map((p) => p.partition).sort()
    aAssigned.length = 0

    // B closes without leaving; A goes on processing its own partitions, without a rebalance in between.
    const bMemberId = b.memberId
    const closed = await b.close({ leaveGroup: false })
    expect(closed.partitions.map((p) => p.partition).sort()).toEqual(bPartitions)
    const during = await produceWords(producer, topic, PARTITIONS, 50, 50, 1)
    await committedThrough([a], during.filter((r) => aPartitions.includes(r.partition)))

    // B again, with its state dir: its partitions come back to it from its stores.
    const b2 = new StatefulConsumer<WordEvent>(options(bDir))
    onTestFinished(async () => { await b2.close() })
    const back = nextStarts(b2, 2)
    await b2.start()
    const starts: PartitionStarted[] = await back
    expect(starts.map((s) => s.partition).sort()).toEqual(bPartitions)
    for (const s of starts) expect(s).toMatchObject({ source: 'local', bytesDownloaded: 0, claimWaitMs: 0 })
    // It came back as the member it was: the group did not count a new member beside the old one.
    expect(b2.memberId).toBe(bMemberId)
    // A was never given B's partitions.
    for (const assignment of aAssigned) expect(assignment.filter((p) => bPartitions.includes(p))).toEqual([])

    await committedThrough([a, b2], during)
    const records = byPartition([...first, ...during])
    for (const p of PARTITIONS) expect(await readState((bPartitions.includes(p) ? b2 : a).store(topic, p)!)).toEqual(fold(records.get(`${topic}-${p}`)!))
  })
})
