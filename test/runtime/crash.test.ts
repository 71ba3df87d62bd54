import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { expect, it } from 'vitest'
import { openFileLog, PartitionStore } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { fold, readTotals, saleAt, TOPIC, totals } from './fixtures/totals.js'

// `npm run test:crash` runs the full version; `npm test` a shorter one that
// still kills the worker once in every phase.
const FULL = process.env.TIDEMARK_CRASH_FULL === '1'
const EVENTS = FULL ? 200_000 : 60_000
const KILLS = FULL ? 10 : 4
const PHASES = ['process', 'upload', 'download', 'replay'] as const
type Phase = (typeof PHASES)[number]

interface Line { type: string; phase?: string; offset?: string; source?: string }

/**
 * Runs one owner until the kill condition holds, then SIGKILLs it. A new
 * store directory stands for a partition that moved to another process (it
 * must restore from a snapshot); the same directory for a restart in place.
 */
async function runOwner(root: string, storeName: string, replayUntil: bigint, killIn: Phase | undefined, after: number) {
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'worker.ts'), root, storeName, String(replayUntil)], { stdio: ['ignore', 'pipe', 'inherit'] })
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
  let last = -1n
  let seen = 0
  let killed: string | undefined
  let snapshotted = false
  for await (const text of createInterface({ input: child.stdout })) {
    const line = JSON.parse(text) as Line
    if (line.type === 'commit') last = BigInt(line.offset!)
    if (line.type === 'snapshot') snapshotted = true
    const matches =
      // Killed in processing only after a snapshot completed in this run, so
      // that the owners after it have something to download and replay from.
      (killIn === 'process' && snapshotted && line.type === 'commit' && line.phase === 'process') ||
      (killIn === 'replay' && line.type === 'commit' && line.phase === 'replay') ||
      (killIn === 'upload' && line.type === 'upload') ||
      (killIn === 'download' && line.type === 'download')
    if (matches && ++seen >= after) {
      child.kill('SIGKILL')
      killed = `${killIn} (${line.type})`
      break
    }
  }
  const { code, signal } = await exit
  if (killed === undefined) expect(code, 'a worker that was not killed must finish cleanly').toBe(0)
  else expect(signal).toBe('SIGKILL')
  return { last, killed }
}

it(`the job's state equals the fold of all ${EVENTS} events exactly once after ${KILLS} SIGKILLs in every phase`, async () => {
  const root = tempDir()
  const log = await openFileLog(join(root, 'log'), { sync: false })
  await Promise.all(Array.from({ length: EVENTS }, (_, i) => log.append(Buffer.from(JSON.stringify(saleAt(i))))))
  await log.close()

  let generation = 0
  let processed = -1n
  const killedIn: string[] = []
  for (let k = 0; k < KILLS; k++) {
    const phase = PHASES[k % PHASES.length]!
    // Downloads and replays happen when a new owner takes over; the others
    // alternate between a restart in place and a move.
    const moves = phase === 'download' || phase === 'replay' || Math.random() < 0.5
    if (moves) generation++
    const after = phase === 'process' || phase === 'replay' ? 1 + Math.floor(Math.random() * 8) : 1
    const { last, killed } = await runOwner(root, `store-${generation}`, processed, phase, after)
    if (killed === undefined) throw new Error(`the worker finished before it could be killed in phase ${phase}`)
    killedIn.push(killed)
    if (last > processed) processed = last
  }
  generation++
  await runOwner(root, `store-${generation}`, processed, undefined, 0)
  expect(killedIn).toHaveLength(KILLS)

  const store = await PartitionStore.open({ path: join(root, `store-${generation}`), states: [totals] })
  try {
    expect(store.position(TOPIC, 0)).toBe(BigInt(EVENTS - 1))
    expect(await readTotals(store)).toEqual(fold(EVENTS - 1))
  } finally {
    await store.close()
  }
}, FULL ? 600_000 : 240_000)
