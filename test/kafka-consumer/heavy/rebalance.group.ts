// Issue 8's rebalance acceptance: three worker processes in one group over
// 8 partitions (two topics of 4) while 100,000 records are produced; one is
// SIGKILLed mid-stream, a fourth joins later, one leaves with SIGTERM. Every
// partition's final state (its newest snapshot) equals an independent fold of
// its records: each record applied exactly once in the committed state.
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { expect, it, onTestFinished } from 'vitest'
import { FsSnapshotStore } from '../../../src/snapshot-store/fs-store.js'
import { kafkaService } from '../../helpers/services.js'
import { randomName, tempDir } from '../../helpers/tmp.js'
import { byPartition, fold, openProducer, produceWords, snapshotState, type Produced } from '../fixture.js'

const ROUNDS = 20
const PER_PARTITION_PER_ROUND = 625 // 20 rounds x 8 partitions x 625 = 100,000 records
const PARTITIONS = [0, 1, 2, 3]

interface Worker { name: string; child: ChildProcess; exited: Promise<unknown>; ready: Promise<void>; failures: string[]; counts: boolean }

it('3 workers, 8 partitions, 100,000 records: one SIGKILLed, one joining, one leaving with SIGTERM; every partition ends exact', async () => {
  const { brokers } = kafkaService()
  const { producer } = await openProducer(brokers)
  onTestFinished(() => producer.disconnect())
  const topics = [randomName('kc-rb-a'), randomName('kc-rb-b')]
  const job = randomName('job')
  const snapshotRoot = tempDir()
  // Highest offset committed per partition by a worker that was not SIGKILLed,
  // and by any worker (to pace the producer, so that the kill lands mid-stream).
  const committed = new Map<string, bigint>()
  const anyCommitted = new Map<string, bigint>()
  const waiters: Array<() => void> = []

  const start = (name: string, counts: boolean): Worker => {
    // A dead owner never releases its claims: new owners force them after 3 s.
    const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '..', 'fixtures', 'worker.ts'), JSON.stringify(brokers), job, topics.join(','), tempDir(), snapshotRoot, '3000'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    onTestFinished(() => { child.kill('SIGKILL') })
    let ready!: () => void
    const worker: Worker = { name, child, exited: once(child, 'exit'), ready: new Promise<void>((resolve) => { ready = resolve }), failures: [], counts }
    const lines = createInterface({ input: child.stdout! })
    lines.on('line', (line) => {
      const event = JSON.parse(line) as { ready?: boolean; commit?: string; offset?: string; failed?: string; code?: string }
      if (event.ready === true) ready()
      if (event.failed !== undefined) worker.failures.push(`${event.failed}:${event.code}`)
      if (event.commit !== undefined) {
        const offset = BigInt(event.offset!)
        if ((anyCommitted.get(event.commit) ?? -1n) < offset) anyCommitted.set(event.commit, offset)
        if (worker.counts && (committed.get(event.commit) ?? -1n) < offset) committed.set(event.commit, offset)
        for (const wake of waiters.splice(0)) wake()
      }
    })
    return worker
  }
  const allCommitted = (want: Map<string, bigint>, by = committed): Promise<void> => new Promise((resolve) => {
    const check = (): void => {
      if ([...want].every(([key, offset]) => (by.get(key) ?? -1n) >= offset)) resolve()
      else waiters.push(check)
    }
    check()
  })

  const w1 = start('w1', false)
  const w2 = start('w2', true)
  const w3 = start('w3', true)
  let w4: Worker | undefined
  await Promise.all([w1.ready, w2.ready, w3.ready])
  const produced: Produced[] = []
  let previous = new Map<string, bigint>()
  for (let round = 0; round < ROUNDS; round++) {
    for (const topic of topics) produced.push(...(await produceWords(producer, topic, PARTITIONS, PER_PARTITION_PER_ROUND, PER_PARTITION_PER_ROUND, round)))
    // The workers stay at most one round behind the producer.
    await allCommitted(previous, anyCommitted)
    previous = new Map(produced.slice(-PER_PARTITION_PER_ROUND * 8).map((r) => [`${r.topic}-${r.partition}`, r.offset]))
    if (round === 5) {
      w1.child.kill('SIGKILL')
      await w1.exited
    }
    if (round === 10) w4 = start('w4', true)
    if (round === 15) {
      w2.child.kill('SIGTERM')
      const [code] = (await w2.exited) as [number | null]
      expect(code, 'w2 leaves cleanly on SIGTERM').toBe(0)
    }
  }
  expect(produced).toHaveLength(ROUNDS * PER_PARTITION_PER_ROUND * 8)
  const last = new Map<string, bigint>()
  for (const r of produced) last.set(`${r.topic}-${r.partition}`, r.offset)
  await allCommitted(last)
  // The two left leave one after the other; each hands its partitions off.
  for (const w of [w3, w4!]) {
    w.child.kill('SIGTERM')
    const [code] = (await w.exited) as [number | null]
    expect(code, `${w.name} leaves cleanly on SIGTERM`).toBe(0)
  }
  for (const w of [w2, w3, w4!]) expect(w.failures, w.name).toEqual([])

  const store = new FsSnapshotStore({ root: snapshotRoot })
  const dir = tempDir()
  for (const [key, records] of byPartition(produced)) {
    const { state, position } = await snapshotState(store, job, records[0]!.topic, records[0]!.partition, dir)
    expect(position, key).toBe(records.at(-1)!.offset)
    expect(state, key).toEqual(fold(records))
  }
})
