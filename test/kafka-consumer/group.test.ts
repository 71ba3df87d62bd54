import type { ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer, type PartitionClosed, type PartitionStarted } from '../../connectors/kafka/index.js'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { tempDir } from '../helpers/tmp.js'
import { byPartition, committedThrough, consumerOptions, fold, groupFixture, nextStarts, produceWords, running, snapshotState, spawnWorker, until, type Produced, type WordEvent } from './fixture.js'

const PARTITIONS = [0, 1, 2, 3]

async function expectExactState(snapshotRoot: string, job: string, produced: readonly Produced[]): Promise<void> {
  const store = new FsSnapshotStore({ root: snapshotRoot })
  const dir = tempDir()
  for (const [key, records] of byPartition(produced)) {
    const { topic, partition } = records[0]!
    const { state, position } = await snapshotState(store, job, topic, partition, dir)
    expect(position, key).toBe(records.at(-1)!.offset)
    expect(state, key).toEqual(fold(records))
  }
}

describe('StatefulConsumer: two members of one group', () => {
  it('splits the partitions; when one member closes, the other restores its hand-off snapshots (no replay) and the final state is exact', async () => {
    const { brokers, producer, topic, job, snapshotRoot } = await groupFixture('kc-group')
    const produced = await produceWords(producer, topic, PARTITIONS, 200)
    const base = { brokers, job, topics: [topic], snapshotRoot }
    const a = new StatefulConsumer<WordEvent>(consumerOptions({ ...base, stateDir: tempDir() }))
    const b = new StatefulConsumer<WordEvent>(consumerOptions({ ...base, stateDir: tempDir() }))
    onTestFinished(async () => { await a.close() })
    onTestFinished(async () => { await b.close() })
    const starts = { a: new Map<number, PartitionStarted>(), b: new Map<number, PartitionStarted>() }
    a.on('partition-started', (s) => starts.a.set(s.partition, s))
    b.on('partition-started', (s) => starts.b.set(s.partition, s))
    const revokedFromA = new Map<number, PartitionClosed>()
    a.on('partition-closed', (c) => {
      if (c.reason === 'revoked') revokedFromA.set(c.partition, c)
    })
    await a.start()
    await until([a, b], () => running(a) === 4)
    await committedThrough([a], produced)

    // B joins: the group splits the four partitions, two each (the mock may
    // take a few rebalances to get there). B's come from A's revocation
    // hand-off snapshots or older ones plus a replay; either way exact.
    await b.start()
    await until([a, b], () => running(a) === 2 && running(b) === 2)
    const onB = b.partitions().map((p) => p.partition)
    // kafkajs tells A of the revocation only after the rejoin, when B has
    // its assignment too; B waits for A's claim release (after A's hand-off
    // snapshot), so it restores that snapshot rather than replay.
    for (const p of onB) {
      const revoked = revokedFromA.get(p)
      expect(revoked?.handoff, `partition ${p}`).toBeDefined()
      expect(starts.b.get(p)).toMatchObject({ source: 'snapshot', snapshot: revoked!.handoff!.id, position: revoked!.position })
    }
    const more = await produceWords(producer, topic, PARTITIONS, 100, 50, 1)
    await committedThrough([a, b], more)

    // A closes: it hands off with a snapshot before it leaves, so B restores
    // exactly where A stopped and replays nothing.
    const onA = a.partitions().map((p) => p.partition).sort()
    const { partitions: handedOff } = await a.close()
    expect(handedOff.map((c) => c.partition).sort()).toEqual(onA)
    await until([b], () => running(b) === 4)
    for (const h of handedOff) {
      const s = starts.b.get(h.partition)!
      expect(h.handoff?.positions[0]?.offset, `${h.topic}-${h.partition}`).toBe(h.position)
      expect(s.source).toBe('snapshot')
      expect(s.snapshot).toBe(h.handoff!.id)
      expect(s.position).toBe(h.position)
    }
    const last = await produceWords(producer, topic, PARTITIONS, 50, 50, 2)
    await committedThrough([b], last)
    await b.close()
    await expectExactState(snapshotRoot, job, [...produced, ...more, ...last])
  })

  it('a SIGKILLed worker process: its partitions move to the other member, which restores and replays; the final state is exact', async () => {
    const { brokers, producer, topic, job, snapshotRoot } = await groupFixture('kc-kill')
    const produced = await produceWords(producer, topic, PARTITIONS, 400)
    const child = spawnWorker({ brokers, job, topic, snapshotRoot })
    // Waits until the worker committed every record of every partition and snapshotted each.
    await childCommitted(child, new Map(PARTITIONS.map((p) => [`${topic}-${p}`, 399n])))
    child.kill('SIGKILL')
    await once(child, 'exit')

    // More records, then a member that finds the dead one's partitions once
    // the group expires it (session timeout).
    const more = await produceWords(producer, topic, PARTITIONS, 100, 50, 1)
    // The dead worker never releases its claims: B takes them by force after handoff.waitMs.
    const b = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir(), snapshotRoot }, { handoff: { waitMs: 500 } }))
    onTestFinished(async () => { await b.close() })
    const started = nextStarts(b, 4)
    await b.start()
    const starts = await started
    // Restored from what the worker's scheduled snapshots left (every 150 records), then replayed.
    expect(starts.map((s) => `${s.partition}:${s.source}`).sort()).toEqual(PARTITIONS.map((p) => `${p}:snapshot`))
    await committedThrough([b], more)
    await b.close()
    await expectExactState(snapshotRoot, job, [...produced, ...more])
  })

  it('a SIGKILLed member that the group has expired: a member that already runs takes its partitions without waiting for a release', async () => {
    const { brokers, producer, topic, job, snapshotRoot } = await groupFixture('kc-dead')
    const produced = await produceWords(producer, topic, PARTITIONS, 300)
    const child = spawnWorker({ brokers, job, topic, snapshotRoot })
    await childCommitted(child, new Map(PARTITIONS.map((p) => [`${topic}-${p}`, 299n])))
    // B joins while the worker lives: it gets two of the four (the worker hands them off).
    // handoff.waitMs is long: a member that waited for the dead one's release would wait it out.
    const b = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir(), snapshotRoot }, { handoff: { waitMs: 40_000 } }))
    onTestFinished(async () => { await b.close() })
    const firstTwo = nextStarts(b, 2)
    await b.start()
    const first = await firstTwo
    const mine = new Set(first.map((s) => s.partition))
    child.kill('SIGKILL')
    await once(child, 'exit')
    // The group expires the worker after its session timeout and gives B the other two.
    const lastTwo = await nextStarts(b, 2)
    expect(lastTwo.map((s) => s.partition).sort()).toEqual(PARTITIONS.filter((p) => !mine.has(p)))
    for (const s of lastTwo) expect(s).toMatchObject({ source: 'snapshot', claimWaitMs: 0 })
    const more = await produceWords(producer, topic, PARTITIONS, 50, 50, 2)
    await committedThrough([b], more)
    await b.close()
    await expectExactState(snapshotRoot, job, [...produced, ...more])
  })
})

/** Resolves when the child reported a commit at or past each partition's offset, and a snapshot of each. */
async function childCommitted(child: ChildProcess, want: Map<string, bigint>): Promise<void> {
  const snapshots = new Set(want.keys())
  const lines = createInterface({ input: child.stdout! })
  for await (const line of lines) {
    const event = JSON.parse(line) as { commit?: string; snapshot?: string; offset?: string }
    if (event.commit !== undefined && want.has(event.commit) && BigInt(event.offset!) >= want.get(event.commit)!) want.delete(event.commit)
    if (event.snapshot !== undefined) snapshots.delete(event.snapshot)
    if (want.size === 0 && snapshots.size === 0) break
  }
  lines.close()
}
