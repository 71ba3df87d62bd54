// Warm-up before the move (options.warmup): a member that joins is first
// given the partitions it should take as warm-ups; their owner keeps
// processing them while it follows their snapshots, and the partitions move
// once its copies are warm, by a rebalance it asks for itself, one warm-up
// at a time here (maxWarmups: 1). The new owner restores from its copy.
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer, type TopicPartition } from '../../../connectors/kafka/index.js'
import type { SnapshotStore } from '../../../src/index.js'
import { tempDir } from '../../helpers/tmp.js'
import { byPartition, committedThrough, consumerOptions, fold, groupFixture, produceWords, readState, running, until, type WordEvent } from '../fixture.js'

const PARTITIONS = [0, 1, 2, 3]

/** `store` whose listings wait until open() is called: the joining member's followers cannot sync before the test lets them. */
function gatedListings(store: SnapshotStore): { store: SnapshotStore; open(): void } {
  let open!: () => void
  const gate = new Promise<void>((resolve) => { open = resolve })
  const gated = new Proxy(store, {
    get(target, key) {
      if (key === 'list') {
        return async function* list(prefix: string, options?: Parameters<SnapshotStore['list']>[1]) {
          await gate
          yield* target.list(prefix, options)
        }
      }
      const value: unknown = Reflect.get(target, key)
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
  return { store: gated, open }
}

describe('StatefulConsumer: warm-up before the move', () => {
  it('a joining member warms a copy while the owner keeps processing, then takes the partition from it; one warm-up at a time', async () => {
    const { brokers, producer, topic, job, store } = await groupFixture('kc-warmup')
    const options = (snapshots: SnapshotStore) => consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir() }, {
      snapshots: { store: snapshots, schedule: { intervalMs: 0, everyEvents: 100 } },
      standby: { intervalMs: 50 },
      warmup: { maxWarmups: 1 },
    })
    const a = new StatefulConsumer<WordEvent>(options(store))
    onTestFinished(async () => { await a.close() })
    const gated = gatedListings(store)
    const b = new StatefulConsumer<WordEvent>(options(gated.store))
    onTestFinished(async () => { await b.close() })
    const revokedFromA: TopicPartition[] = []
    a.on('assignment', ({ revoked }) => revokedFromA.push(...revoked))
    const bAssignments: Array<{ partitions: TopicPartition[]; warmups: TopicPartition[] }> = []
    b.on('assignment', ({ partitions, warmups }) => bAssignments.push({ partitions, warmups }))
    const bStarts = new Map<number, { source: string; bytesDownloaded: number }>()
    b.on('partition-started', (s) => bStarts.set(s.partition, s))
    const synced = new Map<number, number>()
    b.on('standby', (s) => {
      if (s.event.type === 'synced') synced.set(s.partition, (synced.get(s.partition) ?? 0) + s.event.bytesDownloaded)
    })

    const first = await produceWords(producer, topic, PARTITIONS, 200)
    await a.start()
    await committedThrough([a], first)
    // B joins: two partitions should move to it; they warm first, one at a time.
    await b.start()
    expect(bAssignments).toHaveLength(1)
    expect(bAssignments[0]!.partitions).toEqual([])
    expect(bAssignments[0]!.warmups).toHaveLength(1)
    const warming = bAssignments[0]!.warmups[0]!.partition
    // While B's copy cannot sync, A keeps every partition and processes them.
    const during = await produceWords(producer, topic, PARTITIONS, 100, 100, 1)
    await committedThrough([a], during)
    expect(running(a)).toBe(4)
    expect(revokedFromA).toEqual([])

    // B's copy syncs; B asks for the rebalance that moves the partition, then warms and takes the second.
    gated.open()
    await until([a, b], () => running(a) === 2 && running(b) === 2)
    const moved = revokedFromA.map((tp) => tp.partition).sort()
    expect(moved).toHaveLength(2)
    expect(moved).toContain(warming)
    // Each partition came to B as a warm-up first, and only after its copy had synced.
    for (const p of moved) {
      const firstActive = bAssignments.findIndex((x) => x.partitions.some((tp) => tp.partition === p))
      expect(firstActive).toBeGreaterThan(0)
      expect(bAssignments[firstActive - 1]!.warmups.map((tp) => tp.partition)).toContain(p)
      expect(synced.get(p)).toBeGreaterThan(0)
      // Restored from the copy: only the hand-off snapshot's new files were downloaded.
      expect(bStarts.get(p)!.source).toBe('snapshot')
      expect(bStarts.get(p)!.bytesDownloaded).toBeLessThan(synced.get(p)!)
    }
    const starts = b.partitions().map((s) => s.partition).sort()
    expect(starts).toEqual(moved)

    const last = await produceWords(producer, topic, PARTITIONS, 50, 50, 2)
    await committedThrough([a, b], last)
    const records = byPartition([...first, ...during, ...last])
    for (const p of PARTITIONS) {
      const owner = moved.includes(p) ? b : a
      expect(await readState(owner.store(topic, p)!)).toEqual(fold(records.get(`${topic}-${p}`)!))
    }
  })
})
