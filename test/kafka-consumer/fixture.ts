// Shared pieces of the consumer-group tests: the setup each test starts with
// (groupFixture, spawnWorker), a word-sum job, its independent fold,
// producing records to known partitions, and reading a partition's final
// state back from its newest snapshot.
import { Kafka, Partitioners, logLevel, type Producer } from 'kafkajs'
import { spawn, type ChildProcess } from 'node:child_process'
import { join } from 'node:path'
import { onTestFinished } from 'vitest'
import type { PartitionStarted, StatefulConsumer, StatefulConsumerOptions } from '../../connectors/kafka/index.js'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import type { SnapshotStore } from '../../src/snapshot-store/snapshot-store.js'
import { restoreSnapshot } from '../../src/snapshot/restore/index.js'
import { PartitionStore } from '../../src/store/partition-store.js'
import { valueState } from '../../src/store/state.js'
import type { Transaction } from '../../src/store/transaction.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'

export interface WordEvent {
  word: string
  n: number
}

/** Per record key (the word): the sum of n; under '#count' and '#offsets' the number of records and the sum of their offsets. */
export const sums = valueState<number>('sums')
export const states = [sums]

/** The job's handler: a fold in which a record applied twice or missed changes '#count' and '#offsets'. */
export function wordHandler(tx: Transaction, record: { value: WordEvent | null; offset: bigint }): void {
  const view = tx.value(sums)
  view.put('#count', (view.getSync('#count') ?? 0) + 1)
  view.put('#offsets', (view.getSync('#offsets') ?? 0) + Number(record.offset))
  if (record.value === null) return
  view.put(record.value.word, (view.getSync(record.value.word) ?? 0) + record.value.n)
}

export type Fold = Map<string, number>

/** The expected state of one partition, folded independently of Tidemark. */
export function fold(records: ReadonlyArray<{ offset: bigint; value: WordEvent | null }>): Fold {
  const out: Fold = new Map([['#count', 0], ['#offsets', 0]])
  for (const r of records) {
    out.set('#count', out.get('#count')! + 1)
    out.set('#offsets', out.get('#offsets')! + Number(r.offset))
    if (r.value !== null) out.set(r.value.word, (out.get(r.value.word) ?? 0) + r.value.n)
  }
  return out
}

export interface Produced {
  topic: string
  partition: number
  offset: bigint
  value: WordEvent | null
}

const WORDS = ['tide', 'mark', 'kafka', 'state', 'snap', 'shot', 'log', 'fold']

/** Produces `count` word events to each of `partitions` of `topic`, in sends of `perSend`; returns each with its offset. */
export async function produceWords(producer: Producer, topic: string, partitions: number[], count: number, perSend = 100, seed = 0): Promise<Produced[]> {
  const out: Produced[] = []
  for (const partition of partitions) {
    for (let i = 0; i < count; i += perSend) {
      const values: WordEvent[] = []
      for (let j = i; j < Math.min(count, i + perSend); j++) values.push({ word: WORDS[(j * 7 + partition + seed) % WORDS.length]!, n: (j % 13) + 1 })
      const [meta] = await producer.send({
        topic,
        acks: -1,
        messages: values.map((v) => ({ key: v.word, value: JSON.stringify(v), partition })),
      })
      const base = BigInt(meta!.baseOffset!)
      values.forEach((value, k) => out.push({ topic, partition, offset: base + BigInt(k), value }))
    }
  }
  return out
}

/**
 * Produces `perPartition` word events to each of `partitions` every 50 ms,
 * appending them to `produced`, until the returned stop() (which resolves
 * once the send in flight is done).
 */
export function trickle(producer: Producer, topic: string, partitions: number[], perPartition: number, produced: Produced[]): { stop(): Promise<void> } {
  let producing = true
  const done = (async () => {
    for (let seed = 1; producing; seed++) {
      produced.push(...await produceWords(producer, topic, partitions, perPartition, perPartition, seed))
      await new Promise((resolve) => setTimeout(resolve, 50)) // ok: a steady trickle of records, not a wait for an event
    }
  })()
  return {
    stop: async () => {
      producing = false
      await done
    },
  }
}

export async function openProducer(brokers: string[]): Promise<{ kafka: Kafka; producer: Producer }> {
  const kafka = new Kafka({ brokers, clientId: 'test', logLevel: logLevel.NOTHING })
  const producer = kafka.producer({ allowAutoTopicCreation: true, idempotent: false, createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  return { kafka, producer }
}

export interface GroupFixture {
  brokers: string[]
  kafka: Kafka
  producer: Producer
  /** A fresh topic, named after the test's prefix. */
  topic: string
  job: string
  /** A temp dir for the job's snapshots: for consumerOptions' snapshotRoot and worker processes. */
  snapshotRoot: string
  /** An FsSnapshotStore on snapshotRoot. */
  store: FsSnapshotStore
}

/**
 * What a consumer-group test sets up first: a connected producer to the test
 * Kafka, a fresh topic (`topicPrefix`) and job name, and a snapshot store in
 * a temp dir; closed when the test finishes. Call it inside a test.
 */
export async function groupFixture(topicPrefix: string): Promise<GroupFixture> {
  const { brokers } = kafkaService()
  const { kafka, producer } = await openProducer(brokers)
  onTestFinished(() => producer.disconnect())
  const topic = randomName(topicPrefix)
  const job = randomName('job')
  const snapshotRoot = tempDir()
  const store = new FsSnapshotStore({ root: snapshotRoot })
  onTestFinished(() => store.close())
  return { brokers, kafka, producer, topic, job, snapshotRoot, store }
}

/** fixtures/worker.ts in a child process, with a fresh state dir; SIGKILLed when the test finishes. */
export function spawnWorker(on: Pick<GroupFixture, 'brokers' | 'job' | 'topic' | 'snapshotRoot'>): ChildProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'worker.ts'), JSON.stringify(on.brokers), on.job, on.topic, tempDir(), on.snapshotRoot], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  onTestFinished(() => {
    child.kill('SIGKILL')
  })
  return child
}

/** Options that keep the mock's rebalances quick. */
export const FAST_GROUP = { sessionTimeout: 6000, heartbeatInterval: 300, maxWaitTimeInMs: 50, rebalanceTimeout: 10_000 } as const

export function consumerOptions(base: { brokers: string[]; job: string; topics: string[]; stateDir: string; snapshotRoot?: string }, extra: Partial<StatefulConsumerOptions<WordEvent>> = {}): StatefulConsumerOptions<WordEvent> {
  const { snapshotRoot, ...rest } = base
  return {
    ...rest,
    states,
    handler: wordHandler,
    consumer: FAST_GROUP,
    ...(snapshotRoot === undefined ? {} : { snapshots: { store: new FsSnapshotStore({ root: snapshotRoot }), schedule: { intervalMs: 0, everyEvents: 0 } } }),
    ...extra,
  }
}

/** Resolves when every listed partition's committed offset reached its last produced offset, across the consumers given. */
export function committedThrough(consumers: Array<StatefulConsumer<WordEvent>>, produced: readonly Produced[]): Promise<void> {
  const want = new Map<string, bigint>()
  for (const r of produced) {
    const key = `${r.topic}-${r.partition}`
    if ((want.get(key) ?? -1n) < r.offset) want.set(key, r.offset)
  }
  return new Promise((resolve) => {
    const check = (): void => {
      for (const c of consumers) {
        for (const p of c.partitions()) {
          const key = `${p.topic}-${p.partition}`
          if (want.has(key) && p.position !== undefined && p.position >= want.get(key)!) want.delete(key)
        }
      }
      if (want.size === 0) {
        for (const c of consumers) c.off('commit', check)
        resolve()
      }
    }
    for (const c of consumers) c.on('commit', check)
    check()
  })
}

/** A partition's state as its newest snapshot holds it. */
export async function snapshotState(store: SnapshotStore, job: string, topic: string, partition: number, dir: string): Promise<{ state: Fold; position: bigint | undefined }> {
  const target = join(dir, `${topic}-${partition}`)
  await restoreSnapshot({ snapshotStore: store, job, partition: `${topic}-${partition}`, target })
  const ps = await PartitionStore.open({ path: target, states, create: false })
  try {
    return { state: await readState(ps), position: ps.position(topic, partition) }
  } finally {
    await ps.close()
  }
}

export async function readState(store: PartitionStore): Promise<Fold> {
  const out: Fold = new Map()
  const tx = store.transaction()
  try {
    for await (const [key, value] of tx.value(sums).entries()) out.set(key, value)
  } finally {
    tx.abort()
  }
  return out
}

export function byPartition(produced: readonly Produced[]): Map<string, Produced[]> {
  const out = new Map<string, Produced[]>()
  for (const r of produced) {
    const key = `${r.topic}-${r.partition}`
    out.set(key, [...(out.get(key) ?? []), r])
  }
  return out
}

/** Partitions running on a consumer now. */
export function running(c: StatefulConsumer<WordEvent>): number {
  return c.partitions().filter((p) => p.state === 'running').length
}

/** Resolves when `ready()` holds, looking again after every event of the consumers that could change it. */
export function until(consumers: Array<StatefulConsumer<WordEvent>>, ready: () => boolean): Promise<void> {
  const events = ['assignment', 'partition-started', 'partition-closed', 'commit', 'snapshot', 'standby'] as const
  return new Promise((resolve) => {
    const check = (): void => {
      if (!ready()) return
      for (const c of consumers) for (const e of events) c.off(e, check)
      resolve()
    }
    for (const c of consumers) for (const e of events) c.on(e, check)
    check()
  })
}

/** Resolves with the next `count` partition-started events of a consumer. */
export function nextStarts(consumer: StatefulConsumer<WordEvent>, count: number): Promise<PartitionStarted[]> {
  return new Promise((resolve) => {
    const seen: PartitionStarted[] = []
    const on = (s: PartitionStarted): void => {
      seen.push(s)
      if (seen.length < count) return
      consumer.off('partition-started', on)
      resolve(seen)
    }
    consumer.on('partition-started', on)
  })
}
