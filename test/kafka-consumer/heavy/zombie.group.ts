import type { ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import { expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer, type PartitionStarted } from '../../../connectors/kafka/index.js'
import { FsSnapshotStore } from '../../../src/snapshot-store/fs-store.js'
import { listManifests, readValidManifests } from '../../../src/snapshot/catalog.js'
import { SnapshotLayout } from '../../../src/snapshot/layout.js'
import { tempDir } from '../../helpers/tmp.js'
import { byPartition, committedThrough, consumerOptions, fold, groupFixture, produceWords, snapshotState, spawnWorker, type WordEvent } from '../fixture.js'

const PARTITIONS = [0, 1, 2, 3]

interface WorkerEvent {
  started?: string
  commit?: string
  snapshot?: string
  offset?: string
  failed?: string
  code?: string
  closed?: string
  reason?: string
  handoff?: string
  handoffFailed?: string
}

/** The worker's JSON lines as events; `until` resolves once `done` holds for one that comes after the call. */
function watch(child: ChildProcess): { until(done: (e: WorkerEvent) => boolean): Promise<void> } {
  const waiters = new Set<{ done: (e: WorkerEvent) => boolean; resolve: () => void }>()
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const event = JSON.parse(line) as WorkerEvent
    for (const w of waiters) {
      if (w.done(event)) {
        waiters.delete(w)
        w.resolve()
      }
    }
  })
  return {
    until: (done) => new Promise((resolve) => {
      waiters.add({ done, resolve })
    }),
  }
}

it('a worker stalled (SIGSTOP) past the session timeout: the group moves its partitions; resumed (SIGCONT), it stops processing those its claims were taken from, no snapshot of it wins, and the final state is exact', async () => {
  const { brokers, producer, topic, job, snapshotRoot } = await groupFixture('kc-zombie')
  const produced = await produceWords(producer, topic, PARTITIONS, 300)
  const worker = spawnWorker({ brokers, job, topic, snapshotRoot })
  const events = watch(worker)
  const committed = new Map<string, bigint>()
  const snapshotted = new Set<string>()
  await events.until((e) => {
    if (e.commit !== undefined) committed.set(e.commit, BigInt(e.offset!))
    if (e.snapshot !== undefined) snapshotted.add(e.snapshot)
    return PARTITIONS.every((p) => committed.get(`${topic}-${p}`) === 299n && snapshotted.has(`${topic}-${p}`))
  })
  worker.kill('SIGSTOP')

  // B joins; the group waits for the stalled worker until its session times out, then gives B everything.
  const b = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir(), snapshotRoot }, { handoff: { waitMs: 500 } }))
  onTestFinished(async () => {
    await b.close()
  })
  const starts = new Map<number, PartitionStarted>()
  b.on('partition-started', (s) => starts.set(s.partition, s))
  await b.start()
  await new Promise<void>((resolve) => {
    const check = (): void => {
      if (starts.size === 4) resolve()
    }
    b.on('partition-started', check)
    check()
  })
  const more = await produceWords(producer, topic, PARTITIONS, 100, 50, 1)
  await committedThrough([b], more)

  // The worker resumes: every task it still runs lost its claim to B. At
  // its rejoin it replaces the tasks the group gives it back (the new ones
  // wait for B's release and restore B's hand-off), and the others stop.
  const failures: string[] = []
  const staleCloses: WorkerEvent[] = []
  let terminated = false
  void events.until((e) => {
    if (e.failed !== undefined) failures.push(`${e.failed}:${e.code}`)
    if (e.closed !== undefined && !terminated) staleCloses.push(e)
    return false
  })
  worker.kill('SIGCONT')
  // It rejoins: the group gives it partitions back, for which it starts new tasks (after B's release).
  await events.until((e) => e.started !== undefined)
  // Its stale tasks (claims taken by B) closed without a hand-off snapshot.
  expect(staleCloses.length).toBeGreaterThan(0)
  for (const c of staleCloses) expect(c.handoff, JSON.stringify(c)).toBeUndefined()
  // It leaves with SIGTERM (hand-off snapshots of what it holds now); B takes everything back.
  terminated = true
  worker.kill('SIGTERM')
  const [code] = await once(worker, 'exit')
  expect(code).toBe(0)
  expect(failures.every((f) => f.endsWith(':TIDEMARK_OWNERSHIP_LOST') || f.endsWith(':TIDEMARK_SNAPSHOT_FENCED')), failures.join()).toBe(true)
  await new Promise<void>((resolve) => {
    const check = (): void => {
      if (b.partitions().filter((p) => p.state === 'running').length === 4) resolve()
    }
    b.on('partition-started', check)
    b.on('assignment', check)
    check()
  })
  const last = await produceWords(producer, topic, PARTITIONS, 50, 25, 2)
  await committedThrough([b], last)
  await b.close()
  // Whoever ended up with each partition handed it off on close; the newest snapshot is exact.
  const store = new FsSnapshotStore({ root: snapshotRoot })
  const dir = tempDir()
  for (const [key, records] of byPartition([...produced, ...more, ...last])) {
    const { state, position } = await snapshotState(store, job, topic, records[0]!.partition, dir)
    expect(position, key).toBe(records.at(-1)!.offset)
    expect(state, key).toEqual(fold(records))
    // No object of a kept snapshot was deleted, by either owner's GC.
    const layout = new SnapshotLayout(job, `${topic}-${records[0]!.partition}`)
    const { valid } = await readValidManifests(store, layout, await listManifests(store, layout))
    expect(valid.length, key).toBeGreaterThan(0)
    for (const { manifest } of valid) {
      for (const object of manifest.objects) expect((await store.head(layout.dataKey(object.key)))?.size, `${key} ${manifest.id} ${object.key}`).toBe(object.size)
    }
  }
})
