// The assignment handler with real partition tasks (no Kafka client): what
// it does when the client throws while it restarts, and when a partition is
// revoked while its task still waits for the previous owner's release.
import { join } from 'node:path'
import { expect, it, onTestFinished } from 'vitest'
import { AssignmentHandler } from '../../connectors/kafka/consumer/assignments.js'
import { resolveConsumerOptions } from '../../connectors/kafka/consumer/options.js'
import { PartitionTask, type PartitionClosed, type PartitionStarted, type TaskServices, type TopicPartition } from '../../connectors/kafka/consumer/partition-task.js'
import { acquireClaim, FsSnapshotStore } from '../../src/index.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { tempDir } from '../helpers/tmp.js'
import { states, wordHandler, type WordEvent } from './fixture.js'

const tp: TopicPartition = { topic: 't', partition: 0 }

function services(): TaskServices {
  const none = (): void => undefined
  return {
    watermarks: async () => ({ low: 0n, high: 0n }),
    groupOffset: async () => undefined,
    deadLetter: async () => undefined,
    pause: none,
    resumeAt: none,
    events: { restore: none, snapshot: none, snapshotFailed: none, snapshotter: none, commit: none, skipped: none, truncated: none, outputs: none, ownership: none, stateSizeExceeded: none },
  }
}

function handler(extra: { store?: FsSnapshotStore; waitMs?: number; resume?: () => void }): {
  handler: AssignmentHandler<WordEvent>; started: PartitionStarted[]; failed: unknown[]; closed: Promise<PartitionClosed>
} {
  const options = resolveConsumerOptions<WordEvent>({
    job: 'job', brokers: ['127.0.0.1:1'], topics: [tp.topic], stateDir: tempDir(), states, handler: wordHandler,
    ...(extra.store === undefined ? {} : { snapshots: { store: extra.store }, handoff: { waitMs: extra.waitMs ?? 10_000 } }),
  })
  const started: PartitionStarted[] = []
  const failed: unknown[] = []
  let closedWith: (c: PartitionClosed) => void = () => undefined
  const closed = new Promise<PartitionClosed>((resolve) => { closedWith = resolve })
  const none = (): void => undefined
  const h = new AssignmentHandler<WordEvent>({
    createTask: (p) => new PartitionTask<WordEvent>(p, options, services()),
    pause: none,
    resume: extra.resume ?? none,
    seek: none,
    priority: () => none,
    started: (info) => started.push(info),
    failed: (_p, error) => failed.push(error),
    closed: (info) => closedWith(info),
  }, { handoff: extra.store !== undefined })
  onTestFinished(() => h.closeAll().then(() => h.drained()))
  return { handler: h, started, failed, closed }
}

it('a resume that throws (the Kafka client restarting after a crash) fails no partition, and its start is reported', async () => {
  let resumes = 0
  const { handler: h, started, failed } = handler({
    resume: () => {
      if (resumes++ === 0) throw new Error('Consumer group was not initialized, consumer#run must be called first')
    },
  })
  h.assign([tp])
  await expect.poll(() => started.length + failed.length).toBe(1)
  expect(failed).toEqual([])
  expect(started[0]).toMatchObject({ topic: 't', partition: 0, source: 'empty' })
  expect(h.running('t', 0)?.state).toBe('running')
})

it('a partition revoked while its task waits for the previous owner\'s release: the wait ends at once, no claim is taken, no failure is reported', async () => {
  const store = new FsSnapshotStore({ root: join(tempDir(), 'snapshots') })
  onTestFinished(() => store.close())
  const previous = await acquireClaim({ store, job: 'job', partition: 't-0', leaseMs: null })
  // The wait looks at the claim with HEADs: the first says the task is waiting.
  const claimKey = new SnapshotLayout('job', 't-0').claimKey
  const head = store.head.bind(store)
  let waiting: () => void = () => undefined
  const watched = new Promise<void>((resolve) => { waiting = resolve })
  store.head = async (key) => {
    if (key === claimKey) waiting()
    return head(key)
  }
  const { handler: h, failed, closed } = handler({ store, waitMs: 3000 })
  h.assign([tp])
  await watched
  h.assign([])
  const result = await closed
  expect(result).toMatchObject({ reason: 'failed' })
  expect(failed).toEqual([])
  // The previous owner's claim stands: nothing forced it.
  await expect(previous.check()).resolves.toBeUndefined()
})
