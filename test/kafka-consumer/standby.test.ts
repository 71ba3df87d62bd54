// Warm standbys (options.standbys): a member keeps copies of the partitions
// it is standby for by following their snapshots, and when one of them is
// assigned to it, restores from that copy: only what came after its last
// sync is downloaded (here nothing: the copy is at the newest snapshot).
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { tempDir } from '../helpers/tmp.js'
import { byPartition, committedThrough, consumerOptions, fold, groupFixture, nextStarts, produceWords, readState, running, until, type WordEvent } from './fixture.js'

const PARTITIONS = [0, 1, 2, 3]

describe('StatefulConsumer: standbys', () => {
  it('a standby restores a partition it takes over from its warm copy, downloading nothing', async () => {
    const { brokers, producer, topic, job, store } = await groupFixture('kc-standby')
    const options = (handoff: boolean) => consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir() }, {
      // Every 100 records, and 50 ms after a commit that no threshold
      // covered: the records after the last multiple of 100 a batch ended on
      // are in a snapshot too, however the fetches cut the batches (the
      // test waits for the one at offset 399).
      snapshots: { store, schedule: { intervalMs: 50, everyEvents: 100 } },
      standbys: 1,
      standby: { intervalMs: 50 },
      handoff: { snapshot: handoff },
    })
    const a = new StatefulConsumer<WordEvent>(options(false))
    onTestFinished(async () => { await a.close() })
    const b = new StatefulConsumer<WordEvent>(options(true))
    onTestFinished(async () => { await b.close() })
    const first = await produceWords(producer, topic, PARTITIONS, 200)
    await a.start()
    await committedThrough([a], first)
    // B joins: two partitions move to it, and each member is standby for the other's.
    await b.start()
    await until([a, b], () => running(a) === 2 && running(b) === 2)
    // A's partitions' newest snapshots (the last one at the end, offset 399), and B's copies of them.
    const aPartitions = a.partitions().map((p) => p.partition)
    const newest = new Map<number, string>()
    a.on('snapshot', (s) => {
      if (s.result.positions[0]?.offset === 399n) newest.set(s.partition, s.result.id)
    })
    const synced = new Map<number, string>()
    b.on('standby', (s) => {
      if (s.event.type === 'synced') synced.set(s.partition, s.event.snapshot.id)
    })
    const more = await produceWords(producer, topic, PARTITIONS, 200, 100, 1)
    await committedThrough([a, b], more)
    await until([a, b], () => aPartitions.every((p) => newest.has(p) && synced.get(p) === newest.get(p)))
    // A leaves without a hand-off snapshot: B takes its partitions from its copies.
    const taken = nextStarts(b, 2)
    await a.close()
    const starts = await taken
    expect(starts.map((s) => s.partition).sort()).toEqual([...aPartitions].sort())
    for (const s of starts) expect(s).toMatchObject({ source: 'snapshot', snapshot: newest.get(s.partition), bytesDownloaded: 0 })
    const last = await produceWords(producer, topic, PARTITIONS, 50, 50, 2)
    await committedThrough([b], last)
    const records = byPartition([...first, ...more, ...last])
    for (const p of PARTITIONS) expect(await readState(b.store(topic, p)!)).toEqual(fold(records.get(`${topic}-${p}`)!))
  })
})
