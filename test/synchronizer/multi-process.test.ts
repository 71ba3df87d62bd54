// Acceptance: 4 processes × 500 updates of one counter at the same time, on
// the file log and on the Kafka log; every client ends in the same state.
// The same 4 processes run the updateState() race on one log and then the
// updateStateUnconditionally() race on another, so each log kind pays for its
// process starts (and on Kafka its consumer-group joins) once.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openKafkaLog } from '../../connectors/kafka/index.js'
import { openFileLog, type RevisionedLog } from '../../src/log/index.js'
import { createStateSynchronizer, type StateSynchronizer } from '../../src/synchronizer/index.js'
import { kafkaService } from '../helpers/services.js'
import { makeTempDir, randomName, type TempDir } from '../helpers/tmp.js'
import { spawnScript } from '../log/child.js'
import { applyCounter, type Counter, type CounterUpdate, type LogSpec } from './fixtures/counter.js'

const PROCESSES = 4
const UPDATES = 500

interface Outcome {
  /** What each process holds after its final fetchUpdates(). */
  results: Array<{ state: Counter; revision: string }>
  /** A client in this process that started while the processes wrote and read everything at the end. */
  observer: Counter
}

type Mode = 'conditional' | 'unconditional'

async function race(specs: Record<Mode, LogSpec>, observed: Record<Mode, RevisionedLog>, cleanups: Array<() => void>): Promise<{ outcomes: Record<Mode, Outcome>; attempts: number }> {
  const workers = Array.from({ length: PROCESSES }, (_, k) =>
    spawnScript('test/synchronizer/fixtures/counter-worker.ts', [JSON.stringify({ ...specs, count: UPDATES, name: `p${k}` })], (c) => cleanups.push(c)),
  )
  await Promise.all(workers.map((w) => w.waitFor((line) => line === 'ready')))
  const observers = {} as Record<Mode, StateSynchronizer<Counter, CounterUpdate>>
  for (const mode of ['conditional', 'unconditional'] as const) {
    observers[mode] = createStateSynchronizer<Counter, CounterUpdate>({ log: observed[mode], apply: applyCounter })
    // Its first read overlaps with the race (and hides a Kafka group join).
    const started = observers[mode].fetchUpdates()
    const from = workers.map((w) => w.lines.length)
    for (const w of workers) w.send(`go ${mode}`)
    await Promise.all(workers.map((w, i) => w.waitFor((line) => line === 'done', from[i])))
    await started
  }
  for (const w of workers) w.send('fetch')
  const printed = await Promise.all(workers.map(async (w) => JSON.parse(await w.waitFor((line) => line.startsWith('{')))))
  const outcomes = {} as Record<Mode, Outcome>
  for (const mode of ['conditional', 'unconditional'] as const) {
    await observers[mode].fetchUpdates()
    outcomes[mode] = { results: printed.map((p) => p[mode]), observer: observers[mode].getState() }
  }
  return { outcomes, attempts: printed.reduce((sum, p) => sum + (p.attempts as number), 0) }
}

function expectConverged({ results, observer }: Outcome): void {
  expect(results.map((r) => r.state.count)).toEqual(Array(PROCESSES).fill(PROCESSES * UPDATES))
  expect(new Set(results.map((r) => r.state.digest)).size).toBe(1)
  expect(new Set(results.map((r) => r.revision)).size).toBe(1)
  expect(observer).toEqual(results[0]!.state)
}

describe.each([
  { kind: 'file' as const },
  { kind: 'kafka' as const },
])('4 processes × 500 updates of one counter on the $kind log', ({ kind }) => {
  let ran: Awaited<ReturnType<typeof race>>
  const dirs: TempDir[] = []
  const logs: RevisionedLog[] = []
  const cleanups: Array<() => void> = []

  beforeAll(async () => {
    const specs = {} as Record<Mode, LogSpec>
    const observed = {} as Record<Mode, RevisionedLog>
    for (const mode of ['conditional', 'unconditional'] as const) {
      if (kind === 'file') {
        const dir = makeTempDir()
        dirs.push(dir)
        specs[mode] = { kind, dir: dir.path }
        observed[mode] = await openFileLog(dir.path)
      } else {
        specs[mode] = { kind, brokers: kafkaService().brokers, topic: randomName('counter') }
        observed[mode] = await openKafkaLog({ brokers: kafkaService().brokers, topic: specs[mode].topic, fetchWaitMs: 5 })
      }
      logs.push(observed[mode])
    }
    ran = await race(specs, observed, cleanups)
  })

  afterAll(async () => {
    for (const cleanup of cleanups) cleanup()
    await Promise.all(logs.map((l) => l.close()))
    await Promise.all(dirs.map((d) => d.cleanup()))
  })

  it('updateState(): no update is lost, and every client holds the same state', () => {
    // The generators really raced: some ran again after a conflict.
    expect(ran.attempts).toBeGreaterThan(PROCESSES * UPDATES)
    expectConverged(ran.outcomes.conditional)
  })

  it('updateStateUnconditionally(): every client converges to the same state', () => {
    expectConverged(ran.outcomes.unconditional)
  })
})
