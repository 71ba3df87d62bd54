// The group chaos test: StatefulConsumer worker processes with standbys,
// warm-up and outputs on, over 8 partitions (two topics of 4) under steady
// input, through a scale-out, a SIGKILL, a SIGSTOP past the session timeout
// (the member is fenced and rejoins), a scale-in by SIGTERM, a restart that
// stays in the group (same stateDir) and another SIGKILL. Each step waits
// for what the workers report, bounded by a timeout. At the end one consumer
// takes every partition: its state must equal an independent fold of the
// records produced (a sum, so a record lost or applied twice shows), and the
// output topic must hold every output id (at least once).
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { setTimeout as delay } from 'node:timers/promises' // ok: the producer's pace, see its one use
import { expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer, kafkaSink } from '../../../connectors/kafka/index.js'
import { kafkaService } from '../../helpers/services.js'
import { randomName, tempDir } from '../../helpers/tmp.js'
import { chaosOptions } from '../fixtures/chaos-job.js'
import { readOutputTopic } from '../fixtures/output-topic.js'
import { byPartition, fold, openProducer, produceWords, readState, running, until, type Produced, type WordEvent } from '../fixture.js'

const PARTITIONS = [0, 1, 2, 3]
const PER_ROUND = 15 // records per partition per round of the producer
const ROUND_MS = 250
const AHEAD = 40 // rounds the producer may run ahead of the slowest partition
const STEP_MS = 180_000 // a scale-out took 68 s in one run, through 8 kafkajs crash-restarts on the mock

interface WorkerEvent {
  ready?: boolean
  assignment?: string[]
  standbys?: string[]
  warmups?: string[]
  started?: string
  source?: string
  claimWaitMs?: number
  bytes?: number
  commit?: string
  offset?: string
  closed?: string
  reason?: string
  handoff?: string
  handoffFailed?: string
  failed?: string
  code?: string
  message?: string
  snapshotFailed?: string
  crash?: string
}

interface Worker {
  name: string
  stateDir: string
  child: ChildProcess
  exited: Promise<unknown[]>
  alive: boolean
  ready: boolean
  running: Set<string>
  assignments: number
  failures: string[]
  /** Set for the SIGSTOPped member once resumed: how its stale tasks ended. */
  stale?: string[]
}

it('workers with standbys, warm-up and outputs through scale-out, SIGKILL, SIGSTOP, scale-in and a restart: state exact, every output id delivered', async () => {
  const t0 = performance.now()
  const { brokers } = kafkaService()
  const { kafka, producer } = await openProducer(brokers)
  onTestFinished(() => producer.disconnect())
  const topics = [randomName('kc-chaos-a'), randomName('kc-chaos-b')]
  const keys = topics.flatMap((t) => PARTITIONS.map((p) => `${t}-${p}`))
  const outTopic = randomName('kc-chaos-out')
  const job = randomName('job')
  const snapshotRoot = tempDir()

  // What the workers reported: the current owner of each partition (the last
  // worker that started it and has not closed it), the highest offset each
  // worker committed, every start after the first assignment.
  const owner = new Map<string, string>()
  const committedBy = new Map<string, Map<string, bigint>>()
  const anyCommitted = new Map<string, bigint>()
  const starts: Array<{ worker: string; key: string; source: string; step: string; claimWaitMs: number; bytes: number }> = []
  const notes: string[] = []
  // Per partition: the highest offset produced, since when records have been
  // waiting without a commit that advanced, and the longest such wait (a
  // figure of the run, not asserted: it depends on the machine's load).
  const producedEnd = new Map<string, bigint>()
  const waitingSince = new Map<string, number>()
  const longestWait = new Map<string, { ms: number; step: string }>()
  let step = 'start'
  const waiters = new Set<() => void>()
  const wake = (): void => {
    for (const w of [...waiters]) w()
  }
  const label = (k: string): string => `${topics.findIndex((t) => k.startsWith(`${t}-`))}/${k.slice(k.lastIndexOf('-') + 1)}`
  const describeOwners = (): string => keys.map((k) => `${label(k)}:${owner.get(k) ?? '-'}@${anyCommitted.get(k) ?? '-'}`).join(' ')
  /** Resolves once `cond` holds, looking again after every worker event; rejects after `ms` with what the workers hold. */
  const when = (what: string, cond: () => boolean, ms = STEP_MS): Promise<void> => new Promise((resolve, reject) => {
    const timer = setTimeout(() => { // ok: a bound on the step, not a wait
      waiters.delete(check)
      reject(new Error(`${step}: timed out after ${ms} ms waiting for ${what}; owners ${describeOwners()}`))
    }, ms)
    const check = (): void => {
      if (!cond()) return
      clearTimeout(timer)
      waiters.delete(check)
      resolve()
    }
    waiters.add(check)
    check()
  })

  const spawnWorker = (name: string, stateDir = tempDir(), stay = false): Worker => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '..', 'fixtures', 'chaos-worker.ts'),
      JSON.stringify(brokers), job, topics.join(','), outTopic, stateDir, snapshotRoot, ...(stay ? ['stay'] : [])], { stdio: ['ignore', 'pipe', 'inherit'] })
    onTestFinished(() => { child.kill('SIGKILL') })
    const worker: Worker = { name, stateDir, child, exited: once(child, 'exit'), alive: true, ready: false, running: new Set(), assignments: 0, failures: [] }
    void worker.exited.then(() => {
      worker.alive = false
      worker.running.clear()
      for (const [k, o] of owner) if (o === name) owner.delete(k)
      wake()
    })
    createInterface({ input: child.stdout! }).on('line', (line) => {
      let e: WorkerEvent
      try {
        e = JSON.parse(line) as WorkerEvent
      } catch {
        process.stderr.write(`[${name}] ${line}\n`)
        return
      }
      if (e.ready === true) worker.ready = true
      if (e.assignment !== undefined) worker.assignments++
      if (e.started !== undefined) {
        worker.running.add(e.started)
        owner.set(e.started, name)
        starts.push({ worker: name, key: e.started, source: e.source!, step, claimWaitMs: e.claimWaitMs ?? 0, bytes: e.bytes ?? 0 })
      }
      // A task of the stalled member whose partition another member started meanwhile: fenced, it must not hand off.
      if ((e.closed ?? e.failed) !== undefined && worker.stale) {
        const key = (e.closed ?? e.failed)!
        if (owner.get(key) !== name && worker.running.has(key)) worker.stale.push(`${label(key)} ${e.closed === undefined ? `failed ${e.code}` : `closed ${e.reason} handoff=${e.handoff ?? '-'} handoffFailed=${e.handoffFailed ?? '-'}`}`)
      }
      for (const gone of [e.closed, e.failed]) {
        if (gone === undefined) continue
        worker.running.delete(gone)
        if (owner.get(gone) === name) owner.delete(gone)
      }
      if (e.failed !== undefined) worker.failures.push(`${e.failed}:${e.code}:${e.message}`)
      if (e.closed !== undefined && e.handoffFailed !== undefined) notes.push(`${name} ${step} closed ${e.closed} ${e.reason} handoffFailed=${e.handoffFailed} ${e.code ?? ''}`)
      if (e.snapshotFailed !== undefined) notes.push(`${name} ${step} snapshot of ${e.snapshotFailed} failed ${e.code}`)
      if (e.crash !== undefined) notes.push(`${name} ${step} kafkajs crash: ${e.crash}`)
      if (e.commit !== undefined) {
        const offset = BigInt(e.offset!)
        const mine = committedBy.get(name) ?? new Map<string, bigint>()
        committedBy.set(name, mine)
        if ((mine.get(e.commit) ?? -1n) < offset) mine.set(e.commit, offset)
        if ((anyCommitted.get(e.commit) ?? -1n) < offset) {
          anyCommitted.set(e.commit, offset)
          const since = waitingSince.get(e.commit)
          const now = performance.now()
          if (since !== undefined && now - since > (longestWait.get(e.commit)?.ms ?? -1)) longestWait.set(e.commit, { ms: now - since, step })
          if (offset < (producedEnd.get(e.commit) ?? -1n)) waitingSince.set(e.commit, now)
          else waitingSince.delete(e.commit)
        }
      }
      wake()
    })
    return worker
  }
  const log = (what: string): void => {
    process.stderr.write(`[chaos ${((performance.now() - t0) / 1000).toFixed(1)} s] ${what}; owners ${describeOwners()}\n`)
  }
  const ownedByOthers = (held: Iterable<string>, name: string, alive: Worker[]): boolean =>
    [...held].every((k) => owner.has(k) && owner.get(k) !== name && alive.some((w) => w.name === owner.get(k) && w.alive))
  const allOwned = (by: Worker[]): boolean => keys.every((k) => by.some((w) => w.alive && w.name === owner.get(k)))
  /** Every partition commits what was produced up to now: no partition is left stuck by the step. */
  const progressed = (): Promise<void> => {
    const want = new Map(producedEnd)
    return when('every partition to commit what was produced so far', () => keys.every((k) => (anyCommitted.get(k) ?? -1n) >= (want.get(k) ?? -1n)))
  }

  // Steady input in the background, each record known to the test.
  const produced: Produced[] = []
  let producing = true
  const producerDone = (async () => {
    for (let round = 0; producing; round++) {
      for (const topic of topics) {
        const sent = await produceWords(producer, topic, PARTITIONS, PER_ROUND, PER_ROUND, round)
        produced.push(...sent)
        for (const r of sent) {
          const key = `${r.topic}-${r.partition}`
          if ((producedEnd.get(key) ?? -1n) < r.offset) producedEnd.set(key, r.offset)
          if (!waitingSince.has(key) && (anyCommitted.get(key) ?? -1n) < r.offset) waitingSince.set(key, performance.now())
        }
      }
      // Timing here only sets the input's rate: no step waits for it.
      await delay(ROUND_MS)
      // The backlog stays bounded: at most AHEAD rounds past the slowest partition.
      const behind = round - AHEAD
      if (behind >= 0) await when(`commits of round ${behind}`, () => !producing || keys.every((k) => (anyCommitted.get(k) ?? -1n) >= BigInt((behind + 1) * PER_ROUND - 1)), 10 * STEP_MS)
    }
  })()
  producerDone.catch(() => undefined)

  // 1. Three workers share the 8 partitions.
  const w1 = spawnWorker('w1')
  const w2 = spawnWorker('w2')
  const w3 = spawnWorker('w3')
  await when('3 workers running all partitions, each committed', () => allOwned([w1, w2, w3]) && keys.every((k) => anyCommitted.has(k)))
  await progressed()
  log('3 workers run')

  // 2. Scale-out: a fourth joins; with warm-up its partitions move once its copies are warm.
  step = 'scale-out'
  const w4 = spawnWorker('w4', tempDir(), true)
  await when('w4 to take a partition', () => w4.running.size > 0 && allOwned([w1, w2, w3, w4]))
  await progressed()
  log(`w4 took ${[...w4.running].join(',')}`)

  // 3. SIGKILL w1: its partitions go to the others (their standbys first).
  step = 'sigkill-1'
  const killed1 = [...w1.running]
  w1.child.kill('SIGKILL')
  await w1.exited
  await when('w1\'s partitions to start elsewhere', () => ownedByOthers(killed1, 'w1', [w2, w3, w4]) && allOwned([w2, w3, w4]))
  await progressed()
  log(`w1 killed holding ${killed1.length}`)

  // 4. SIGSTOP the busier of w2 and w3 past its session timeout: the group
  // moves its partitions; resumed, it is fenced (its stale tasks stop) and rejoins.
  step = 'sigstop'
  const [stopped, other] = w2.running.size >= w3.running.size ? [w2, w3] : [w3, w2]
  const held = [...stopped.running]
  stopped.child.kill('SIGSTOP')
  await when(`${stopped.name}'s partitions to start elsewhere`, () => ownedByOthers(held, stopped.name, [other, w4]) && allOwned([other, w4]))
  await progressed()
  log(`${stopped.name} stopped holding ${held.length}, its partitions moved`)
  const assignmentsBefore = stopped.assignments
  stopped.stale = []
  stopped.child.kill('SIGCONT')
  await when(`${stopped.name} to rejoin with no stale task`, () => stopped.assignments > assignmentsBefore && [...stopped.running].every((k) => owner.get(k) === stopped.name) && allOwned([stopped, other, w4]))
  const stale = stopped.stale
  stopped.stale = undefined
  // A stale task hands nothing off: it stops on its next claim check (the
  // member fetches through its rejoin, so it may commit before: in its local
  // store only) or it is closed on the rejoin's revocation without a hand-off.
  expect(stale.filter((c) => !c.includes('handoff=-') && !c.endsWith('failed TIDEMARK_OWNERSHIP_LOST')), stale.join('\n')).toEqual([])
  await progressed()
  log(`${stopped.name} resumed, fenced (stale tasks: ${stale.join('; ')}) and rejoined`)

  // 5. Scale-in: SIGTERM the other one (hand-off snapshots, then it leaves).
  step = 'scale-in'
  const left = [...other.running]
  other.child.kill('SIGTERM')
  expect((await other.exited)[0]).toBe(0)
  await when(`${other.name}'s partitions to start elsewhere`, () => ownedByOthers(left, other.name, [stopped, w4]) && allOwned([stopped, w4]))
  await progressed()
  log(`${other.name} left holding ${left.length}`)

  // 6. w4 restarts with its stateDir, closing with leaveGroup: false: its partitions come back to it.
  step = 'restart'
  const home = [...w4.running]
  w4.child.kill('SIGTERM')
  expect((await w4.exited)[0]).toBe(0)
  const w4b = spawnWorker('w4b', w4.stateDir, true)
  await when('w4b to get w4\'s partitions back', () => home.every((k) => owner.get(k) === 'w4b') && allOwned([stopped, w4b]))
  const homeStarts = starts.filter((s) => s.worker === 'w4b' && home.includes(s.key))
  await progressed()
  log(`w4 restarted: ${home.length} partitions back, sources ${homeStarts.map((s) => s.source).join(',')}`)

  // 7. SIGKILL the resumed one: w4b takes everything.
  step = 'sigkill-2'
  const killed2 = [...stopped.running]
  stopped.child.kill('SIGKILL')
  await stopped.exited
  await when(`${stopped.name}'s partitions to start on w4b`, () => allOwned([w4b]))
  await progressed()
  log(`${stopped.name} killed holding ${killed2.length}`)

  // Input stops; the survivor catches up and closes gracefully.
  step = 'drain'
  producing = false
  wake()
  await producerDone
  const last = new Map([...byPartition(produced)].map(([k, rs]) => [k, rs.at(-1)!.offset]))
  await when('w4b to commit every record', () => keys.every((k) => (committedBy.get('w4b')?.get(k) ?? -1n) >= last.get(k)!), 4 * STEP_MS)
  w4b.child.kill('SIGINT')
  expect((await w4b.exited)[0]).toBe(0)
  log(`${produced.length} records produced; all workers closed`)

  // Only fencing may fail a worker's partition.
  const failures = [w1, w2, w3, w4, w4b].flatMap((w) => w.failures.map((f) => `${w.name} ${f}`))
  expect(failures.filter((f) => !/:TIDEMARK_(OWNERSHIP_LOST|SNAPSHOT_FENCED):/.test(f)), failures.join('\n')).toEqual([])

  // The check: one consumer takes every partition, delivers what is left in the outboxes, and its state is the fold.
  step = 'check'
  const sink = kafkaSink({ brokers })
  onTestFinished(() => sink.close())
  const checker = new StatefulConsumer<WordEvent>(chaosOptions({ brokers, job, topics, outTopic, stateDir: tempDir(), snapshotRoot, sink }))
  onTestFinished(async () => { await checker.close() })
  await checker.start()
  await until([checker], () => running(checker) === keys.length && checker.partitions().every((p) => p.position === last.get(`${p.topic}-${p.partition}`)))
  await checker.flushOutputs()
  for (const [key, records] of byPartition(produced)) {
    const { topic, partition } = records[0]!
    expect(checker.store(topic, partition)!.position(topic, partition), key).toBe(last.get(key))
    expect(await readState(checker.store(topic, partition)!), key).toEqual(fold(records))
  }
  await checker.close()

  // Every output id is in the output topic; duplicates are allowed (delivery is at least once) and counted.
  const expected = new Set(produced.map((r) => `tm1:${job}:${r.topic}:${r.partition}:${r.offset}:0`))
  const delivered = new Map<string, number>()
  const badKeys: string[] = []
  const seen = await readOutputTopic(kafka, outTopic)
  for (const { id, key } of seen) {
    delivered.set(id, (delivered.get(id) ?? 0) + 1)
    // The key names the record too; it must agree with the id.
    const [topic, partition, offset] = key.split(':')
    if (id !== `tm1:${job}:${topic}:${partition}:${offset}:0`) badKeys.push(`${key} ${id}`)
  }
  const read = seen.length
  const missing = [...expected].filter((id) => !delivered.has(id))
  const unknown = [...delivered.keys()].filter((id) => !expected.has(id))
  const moves = starts.filter((s) => s.step !== 'start')
  const bySource = new Map<string, number>()
  for (const s of moves) bySource.set(s.source, (bySource.get(s.source) ?? 0) + 1)
  const bySteps = [...new Set(moves.map((s) => s.step))].map((name) => {
    const of = moves.filter((s) => s.step === name)
    return `  ${name}: ${of.length} starts (${of.map((s) => `${s.worker} ${label(s.key)} ${s.source} ${s.bytes} B wait ${Math.round(s.claimWaitMs)} ms`).join('; ')})\n`
  })
  process.stderr.write(`chaos: ${((performance.now() - t0) / 1000).toFixed(0)} s, ${produced.length} records, 2 SIGKILLs, 1 SIGSTOP, 3 SIGTERM/SIGINT; ` +
    `${moves.length} partition starts after the first assignment (${[...bySource].map(([s, n]) => `${s} ${n}`).join(', ')}; ` +
    `${moves.reduce((sum, s) => sum + s.bytes, 0)} bytes downloaded, claim waits up to ${Math.round(Math.max(0, ...moves.map((s) => s.claimWaitMs)))} ms); ` +
    `output topic holds ${read} records for ${delivered.size} ids (${read - delivered.size} duplicates, ${missing.length} missing)\n` +
    `  longest wait for a commit per partition: ${keys.map((k) => `${label(k)} ${((longestWait.get(k)?.ms ?? 0) / 1000).toFixed(1)} s (${longestWait.get(k)?.step ?? '-'})`).join(', ')}\n` +
    bySteps.join('') + notes.map((n) => `  ${n}\n`).join(''))
  expect(missing.slice(0, 10), `${missing.length} ids missing`).toEqual([])
  expect(unknown.slice(0, 10)).toEqual([])
  expect(badKeys.slice(0, 10)).toEqual([])
})
