/**
 * `npm start`: the Tidemark demo on embedded defaults.
 *
 * A worker process keeps running totals per key in a partition store; the demo
 * kills it with SIGKILL at a random moment, starts a new one that resumes from
 * the committed offset, and checks the final state against a recomputation of
 * the event stream that shares no code with the worker.
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { parseArgs } from 'node:util'
import { PartitionStore, valueState } from '../../src/index.js'
import { demoEvent } from './events.js'

const { values } = parseArgs({ options: { events: { type: 'string', default: '200000' }, keep: { type: 'boolean', default: false } } })
const total = Number(values.events)
if (!Number.isSafeInteger(total) || total <= 0) throw new RangeError(`--events must be a positive integer, got ${values.events}`)
const dir = mkdtempSync(join(tmpdir(), 'tidemark-demo-'))
const storePath = join(dir, 'store')
const worker = join(import.meta.dirname, 'worker.ts')

type Progress = { type: 'start'; resumedAt: number } | { type: 'commit'; offset: number } | { type: 'done' }

/** Runs a worker; kills it with SIGKILL once it has committed past killAfter (if given). */
async function runWorker(killAfter?: number): Promise<{ killed: boolean; resumedAt: number; lastCommitted: number }> {
  const child = spawn(process.execPath, ['--import', 'tsx', worker, storePath, String(total)], { stdio: ['ignore', 'pipe', 'inherit'] })
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
  let resumedAt = -1
  let lastCommitted = -1
  for await (const line of createInterface({ input: child.stdout })) {
    const p = JSON.parse(line) as Progress
    if (p.type === 'start') resumedAt = p.resumedAt
    if (p.type === 'commit') lastCommitted = p.offset
    if (killAfter !== undefined && lastCommitted >= killAfter) {
      child.kill('SIGKILL')
      break
    }
  }
  const { code, signal } = await exit
  if (signal !== 'SIGKILL' && code !== 0) throw new Error(`worker exited with code ${code} signal ${signal}`)
  return { killed: signal === 'SIGKILL', resumedAt, lastCommitted }
}

try {
  const t0 = performance.now()
  const killAt = Math.floor(total * (0.2 + Math.random() * 0.6))
  const first = await runWorker(killAt)
  console.log(`worker 1: processed from offset 0, killed with SIGKILL after committing offset ${first.lastCommitted}`)
  const second = await runWorker()
  console.log(`worker 2: resumed at offset ${second.resumedAt} from the committed position, finished at ${second.lastCommitted}`)

  // The recomputation: a plain fold of the event stream.
  const expected = new Map<string, number>()
  for (let i = 0; i < total; i++) {
    const { key, amount } = demoEvent(i)
    expected.set(key, (expected.get(key) ?? 0) + amount)
  }
  const totals = valueState<number>('totals')
  const store = await PartitionStore.open({ path: storePath, states: [totals] })
  const actual = new Map<string, number>()
  for await (const [key, value] of store.transaction().value(totals).entries()) actual.set(key, value)
  const position = store.position('demo', 0)
  await store.close()

  let mismatch: string | undefined
  if (position !== BigInt(total - 1)) mismatch = `stored position ${position}, expected ${total - 1}`
  for (const [key, want] of expected) {
    if (mismatch) break
    if (actual.get(key) !== want) mismatch = `key ${key}: state has ${actual.get(key)}, recomputation has ${want}`
  }
  if (!mismatch && actual.size !== expected.size) mismatch = `state has ${actual.size} keys, recomputation has ${expected.size}`
  console.log(JSON.stringify({
    events: total,
    keys: expected.size,
    killedAfterOffset: first.lastCommitted,
    resumedAt: second.resumedAt,
    seconds: Math.round(performance.now() - t0) / 1000,
  }))
  if (mismatch) {
    console.log(`MISMATCH: ${mismatch}`)
    process.exitCode = 1
  } else {
    console.log('verified')
  }
} finally {
  if (!values.keep) rmSync(dir, { recursive: true, force: true })
}
