// A finished replay: its final snapshot holds nothing undelivered and is the one every later call returns.
import { spawn } from 'node:child_process'
import { mkdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { pathToFileURL } from 'node:url'
import { expect, it, onTestFinished } from 'vitest'
import { fileLogSink, PartitionStore, restoreSnapshot, type EncodedRecords, type FileLog, type SnapshotStore } from '../../src/index.js'
import { OUTBOX_STATE } from '../../src/outputs/states.js'
import { replayJob, type ReplayProgress, type ReplayResult } from '../../src/replay/index.js'
import { outputStates } from '../../src/replay/outbox.js'
import { listManifests } from '../../src/snapshot/catalog.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { tempDir } from '../helpers/tmp.js'
import { handler, stateOnly, states, TOPIC, type Sale } from './fixtures/operator.js'
import { distinct, EVENTS, outputs, sourceLog, store } from './helpers.js'

const MAIN = join(import.meta.dirname, '../../src/cli/main.ts')
const OPERATOR = join(import.meta.dirname, 'fixtures', 'operator.ts')

/** The entries in the outbox of `snapshot` of `job` (restored into a fresh directory): 0 when it holds nothing undelivered. */
async function outboxOf(snapshots: SnapshotStore, job: string, snapshot: string): Promise<number> {
  const target = join(tempDir(), 'check')
  await restoreSnapshot({ snapshotStore: snapshots, job, partition: 0, target, snapshot })
  const s = await PartitionStore.open({ path: target, states: [...states, ...outputStates()], create: false })
  try {
    let entries = 0
    for await (const _ of s.transaction().value(OUTBOX_STATE).entries()) entries++
    return entries
  } finally {
    await s.close()
  }
}

/** What every call of a finished replay must say the same: all but this call's own share (source, events). */
function durable(result: ReplayResult): Omit<ReplayResult, 'source' | 'events'> {
  const { source: _source, events: _events, ...rest } = result
  return rest
}

it('a finished replay, its local store deleted, called again: nothing is delivered again, the same result and snapshot, an empty outbox in it', async () => {
  const root = tempDir()
  const log: FileLog = await sourceLog(root)
  const snapshots = await store(join(root, 'snapshots'))
  const path = join(root, 'replay')
  const out = join(root, 'out')
  const call = async (options: { onProgress?: (p: ReplayProgress) => void; deliverAfter?: Promise<void> } = {}): Promise<ReplayResult> => {
    const sink = fileLogSink({ dir: out, fileLog: { sync: false } })
    const { deliverAfter } = options
    // One wrapped call: the first call's deliveries wait for its progress
    // snapshot, so that snapshot, at `to`, holds every record in its outbox.
    const output = deliverAfter === undefined ? sink : { ...sink, sendEncoded: async (records: EncodedRecords) => { await deliverAfter; await sink.sendEncoded!(records) } }
    try {
      return await replayJob<Sale>({
        job: 'finished', source: { log, topic: TOPIC, partition: 0, to: BigInt(EVENTS - 1) }, start: 'empty',
        handler, states, output, path, snapshots,
        // One batch of 3,000 events: a progress snapshot is due at its commit, at `to`.
        checkpoints: { intervalMs: 0, everyEvents: 1000 },
        ...(options.onProgress === undefined ? {} : { onProgress: options.onProgress }),
      })
    } finally {
      await sink.close()
    }
  }
  const finals: string[] = []
  let progressSnapshot!: () => void
  const deliverAfter = new Promise<void>((resolve) => { progressSnapshot = resolve })
  const first = await call({
    deliverAfter,
    onProgress: (p) => {
      if (p.phase === 'snapshot' && !p.final) progressSnapshot()
      if (p.phase === 'snapshot' && p.final) finals.push(p.id)
    },
  })
  expect(first).toMatchObject({ source: 'new', events: EVENTS, offset: BigInt(EVENTS - 1) })
  expect(finals).toEqual([first.snapshot.id])
  const delivered = (await outputs(out)).length
  expect(delivered).toBe(EVENTS)
  expect(await outboxOf(snapshots, 'finished', first.snapshot.id)).toBe(0)
  // No other snapshot at `to` follows the one the first call returned.
  const layout = new SnapshotLayout('finished', 0)
  const afterFirst = await listManifests(snapshots, layout)
  expect(afterFirst[0]!.id).toBe(first.snapshot.id)

  // Another machine: the local store is gone, the replay's snapshots remain.
  await rm(path, { recursive: true })
  const second = await call()
  expect(second).toMatchObject({ source: 'snapshot', events: 0 })
  expect(durable(second)).toEqual(durable(first))
  expect((await outputs(out)).length).toBe(delivered)
  // And once more on the store that call left: still the same.
  const third = await call()
  expect(third).toMatchObject({ source: 'local', events: 0 })
  expect(durable(third)).toEqual(durable(first))
  expect((await outputs(out)).length).toBe(delivered)
  expect((await listManifests(snapshots, layout)).map((m) => m.id)).toEqual(afterFirst.map((m) => m.id))
  await log.close()
})

it('tidemark replay sent SIGTERM once it printed its result exits with 0, not by the signal', async () => {
  const root = tempDir()
  const log = await sourceLog(root, 1000)
  await log.close()
  await mkdir(join(root, 'snapshots'))
  // The bin, as `tidemark` runs it; the handler module holds a timer open,
  // so the process is still there when the signal comes.
  const child = spawn(process.execPath, [
    '--import', 'tsx', MAIN, 'replay', '--job', 'terminated', '--handler', OPERATOR, '--path', join(root, 'store'),
    '--snapshots', pathToFileURL(join(root, 'snapshots')).href, '--log', pathToFileURL(join(root, 'source')).href,
    '--topic', TOPIC, '--partition', '0', '--to', '999', '--output', pathToFileURL(join(root, 'out')).href, '--output-no-fsync', '--json',
  ], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TIDEMARK_TEST_HOLD_OPEN: '1' } })
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
  // Its timer would keep a child that ignored the signal running.
  onTestFinished(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  let stderr = ''
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString() })
  let stdout = ''
  // The JSON result's last line.
  for await (const line of createInterface({ input: child.stdout })) {
    stdout += `${line}\n`
    if (line === '}') break
  }
  child.kill('SIGTERM')
  expect(await exit, stderr).toEqual({ code: 0, signal: null })
  expect(JSON.parse(stdout)).toMatchObject({ job: 'terminated', source: 'new', events: 1000, offset: '999' })
  expect(stderr).not.toContain('interrupted')
})

it('a replay started from another replay\'s final snapshot: its own progress snapshot at `to` is not taken for its final one', async () => {
  const root = tempDir()
  const log = await sourceLog(root)
  const snapshots = await store(join(root, 'snapshots'))
  const first = await replayJob<Sale>({
    job: 'first', source: { log, topic: TOPIC, partition: 0, to: 1499n }, start: 'empty', handler: stateOnly, states, path: join(root, 'first'), snapshots,
  })
  const path = join(root, 'second')
  const out = join(root, 'out')
  const second = async (down: boolean, signal?: AbortSignal, onProgress?: (p: ReplayProgress) => void): Promise<ReplayResult> => {
    const sink = fileLogSink({ dir: out, fileLog: { sync: false } })
    // One wrapped call: a sink that is down keeps every record in the outbox.
    const output = down ? { ...sink, sendEncoded: () => Promise.reject(new Error('the output is down')) } : sink
    try {
      return await replayJob<Sale>({
        job: 'second', source: { log, topic: TOPIC, partition: 0, to: BigInt(EVENTS - 1) }, start: { snapshot: first.snapshot.id, job: 'first' },
        handler, states, output, path, snapshots, checkpoints: { intervalMs: 0, everyEvents: 1000 },
        ...(signal === undefined ? {} : { signal }), ...(onProgress === undefined ? {} : { onProgress }),
      })
    } finally {
      await sink.close()
    }
  }
  // Stopped at its one commit, at `to`: the progress snapshot started there
  // is committed while the replay stops, with every record in its outbox.
  const stop = new AbortController()
  await expect(second(true, stop.signal, (p) => { if (p.phase === 'commit') stop.abort(new Error('stopped')) })).rejects.toThrow('stopped')
  const layout = new SnapshotLayout('second', 0)
  const [progress] = await listManifests(snapshots, layout)
  expect(progress).toBeDefined()
  expect(await outboxOf(snapshots, 'second', progress!.id)).toBeGreaterThan(0)

  await rm(path, { recursive: true })
  const resumed = await second(false)
  expect(resumed).toMatchObject({ source: 'snapshot', events: 0, offset: BigInt(EVENTS - 1) })
  expect(resumed.snapshot.id).not.toBe(progress!.id)
  expect(await outboxOf(snapshots, 'second', resumed.snapshot.id)).toBe(0)
  expect(distinct(await outputs(out))).toHaveLength(EVENTS - 1500)
  await log.close()
})
