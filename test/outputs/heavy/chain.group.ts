// Issue 9's "chain under fire": stage 1 (counts per key, emits every change
// through its outbox) -> a Kafka topic -> stage 2 (sums the changes with
// dedupe: 'tidemark-ids'), on the Kafka mock with file-system snapshots.
// 50,000 source records; stage 1 and stage 2 run at the same time, each as a
// worker process that is SIGKILLed again and again (at random moments, and
// in stage 1 also right after a send to Kafka succeeded, before the outbox
// confirmed it: between commit and delivery). Then each stage runs once more
// to the end. Stage 2's state must equal the independent fold, the counts
// topic must hold duplicates (the kills after a send), and stage 2 must have
// applied each id exactly once.
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { Kafka, logLevel, Partitioners } from 'kafkajs'
import { expect, it, onTestFinished } from 'vitest'
import { PartitionStore } from '../../../src/store/partition-store.js'
import { DEDUPE_STATE, OUTBOX_STATE } from '../../../src/outputs/states.js'
import { kafkaService } from '../../helpers/services.js'
import { randomName, tempDir } from '../../helpers/tmp.js'
import { applied, totals, type ChainWorkerConfig } from '../fixtures/chain.js'

const EVENTS = 50_000
const KEYS = 100
const seed = Number(process.env.CHAIN_SEED ?? Date.now() % 1_000_000)
let rng = seed
const random = (): number => {
  rng = (rng * 1_103_515_245 + 12_345) % 2 ** 31
  return rng / 2 ** 31
}

interface Worker { child: ChildProcess; exited: Promise<unknown>; started: Promise<void>; done: Promise<void> }

function startWorker(config: ChainWorkerConfig): Worker {
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '..', 'fixtures', 'chain-worker.ts'), JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'inherit'] })
  onTestFinished(() => { child.kill('SIGKILL') })
  let started!: () => void
  let done!: () => void
  const seen = new Set<string>()
  const worker: Worker = {
    child,
    exited: once(child, 'exit'),
    started: new Promise((resolve) => { started = resolve }),
    done: new Promise((resolve) => { done = resolve }),
  }
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const event = JSON.parse(line) as { started?: string; done?: boolean; failed?: string; error?: string }
    if (event.started !== undefined) {
      seen.add(event.started)
      if (seen.size === 4) started()
    }
    if (event.done === true) done()
    if (event.failed !== undefined) process.stderr.write(`chain worker ${config.stage}: ${event.failed} failed: ${event.error}\n`)
  })
  return worker
}

it('chain under fire: 50,000 records, over 20 SIGKILLs in both stages (some between commit and delivery); stage 2 equals the fold and applied each id once', async () => {
  process.stderr.write(`chain under fire: CHAIN_SEED=${seed}\n`)
  const { brokers } = kafkaService()
  const source = randomName('chain-src')
  const counts = randomName('chain-counts')
  const job = randomName('chain')
  const snapshotRoot = tempDir()
  const stateDirs = { count: tempDir(), sum: tempDir() }
  const kafka = new Kafka({ brokers, clientId: 'chain-test', logLevel: logLevel.NOTHING })

  // The source and its independent fold.
  const producer = kafka.producer({ allowAutoTopicCreation: true, createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  const fold: Record<string, number> = {}
  for (let i = 0; i < EVENTS; i += 1000) {
    const messages = []
    for (let j = i; j < i + 1000; j++) {
      const k = `k${Math.floor(random() * KEYS)}`
      fold[k] = (fold[k] ?? 0) + 1
      messages.push({ key: String(j), value: JSON.stringify({ k }) })
    }
    await producer.send({ topic: source, messages })
  }
  await producer.disconnect()

  const config = (stage: 'count' | 'sum', more: Partial<ChainWorkerConfig> = {}): ChainWorkerConfig => ({
    stage, brokers, job: stage === 'count' ? job : `${job}-sum`, source, counts, stateDir: stateDirs[stage], snapshotRoot, ...more,
  })
  const kills = { count: 0, sum: 0, afterSend: 0 }
  // Each run is killed: at a random moment after it started all 4 partitions,
  // or (kind 'send') by itself right after its Nth successful send.
  const underFire = async (stage: 'count' | 'sum', plan: Array<'random' | 'send'>): Promise<void> => {
    for (const kind of plan) {
      const w = startWorker(config(stage, kind === 'send' ? { killAfterSend: 1 + Math.floor(random() * 3) } : {}))
      // A worker that cannot start its partitions fails the test instead of stalling it.
      let stall: NodeJS.Timeout | undefined
      await Promise.race([w.started, w.exited, new Promise((_, reject) => { stall = setTimeout(() => reject(new Error(`${stage} worker did not start its 4 partitions in 90 s`)), 90_000) })])
      clearTimeout(stall)
      const delay = kind === 'send' ? 8000 : 300 + random() * 1500
      let timer: NodeJS.Timeout | undefined
      const fallback = new Promise<void>((resolve) => { timer = setTimeout(resolve, delay) })
      await Promise.race([fallback, w.exited])
      clearTimeout(timer)
      if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL')
      else if (kind === 'send' && w.child.signalCode === 'SIGKILL') kills.afterSend++
      await w.exited
      // Only a SIGKILL counts (a worker that failed otherwise is no kill).
      expect(w.child.signalCode, `${stage} worker ended by ${w.child.signalCode ?? `exit ${w.child.exitCode}`}`).toBe('SIGKILL')
      kills[stage]++
    }
  }
  const t0 = performance.now()
  await Promise.all([
    underFire('count', ['send', 'random', 'random', 'send', 'random', 'random', 'send', 'random', 'random', 'random']),
    underFire('sum', ['random', 'random', 'random', 'random', 'random', 'random', 'random', 'random', 'random', 'random']),
  ])
  process.stderr.write(`chain under fire: kills ${JSON.stringify(kills)} in ${Math.round(performance.now() - t0)} ms\n`)
  expect(kills.count + kills.sum).toBeGreaterThanOrEqual(20)
  expect(kills.afterSend).toBeGreaterThan(0)

  // Each stage to the end, without faults: stage 1 first (its outbox
  // delivered), then stage 2 up to the counts topic's end.
  for (const stage of ['count', 'sum'] as const) {
    const w = startWorker(config(stage, { exitWhenCaughtUp: true }))
    let stall: NodeJS.Timeout | undefined
    await Promise.race([w.done, w.exited, new Promise((_, reject) => { stall = setTimeout(() => reject(new Error(`the final ${stage} run did not finish in 180 s`)), 180_000) })])
    clearTimeout(stall)
    const [code] = await w.exited as [number | null]
    expect(code, `final ${stage} run`).toBe(0)
  }

  // Stage 2's state, from its partition stores.
  const sums: Record<string, number> = {}
  const ids = new Map<string, number>()
  for (const name of (await readdir(stateDirs.sum)).filter((n) => /^.+-\d+$/.test(n))) {
    const store = await PartitionStore.open({ path: join(stateDirs.sum, name), states: [totals, applied, OUTBOX_STATE, DEDUPE_STATE], create: false })
    for await (const [k, n] of store.transaction().value(totals).entries()) sums[k] = (sums[k] ?? 0) + n
    for await (const [id, n] of store.transaction().value(applied).entries()) ids.set(id, (ids.get(id) ?? 0) + n)
    await store.close()
  }
  expect(sums).toEqual(fold)
  expect(ids.size).toBe(EVENTS)
  expect([...ids.values()].filter((n) => n !== 1)).toEqual([])

  // The counts topic: every id at least once, some more than once.
  const admin = kafka.admin()
  await admin.connect()
  const ends = new Map((await admin.fetchTopicOffsets(counts)).map((o) => [o.partition, Number(o.high)]))
  await admin.disconnect()
  const total = [...ends.values()].reduce((a, b) => a + b, 0)
  const reader = kafka.consumer({ groupId: randomName('chain-reader') })
  await reader.connect()
  await reader.subscribe({ topics: [counts], fromBeginning: true })
  const delivered = new Map<string, number>()
  let read = 0
  await new Promise<void>((resolve) => {
    void reader.run({
      eachBatch: async ({ batch }) => {
        for (const m of batch.messages) {
          const id = String(m.headers?.['tidemark-id'])
          delivered.set(id, (delivered.get(id) ?? 0) + 1)
          read++
        }
        if (read >= total) resolve()
      },
    })
  })
  await reader.disconnect()
  expect(delivered.size).toBe(EVENTS)
  expect(read).toBeGreaterThan(EVENTS)
  process.stderr.write(`chain under fire: counts topic holds ${read} records for ${EVENTS} ids (${read - EVENTS} duplicates)\n`)
})
