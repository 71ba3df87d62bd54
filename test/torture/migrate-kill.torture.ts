// An eager migration (migrateState) SIGKILLed at random points, by the parent
// after a committed batch or by the child while a batch is being written:
// after every kill each value still reads as the independent upgrade of what
// was written, and the migration run to its end leaves every value stored at
// version 3, equal to that upgrade.
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { ClassicLevel } from 'classic-level'
import { afterAll, describe, expect, it } from 'vitest'
import { PartitionStore } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { recordFigures, rng, scaled } from './common.js'
import type { MigratorArgs } from './fixtures/migrator.js'
import { CARTS_V1, MIGRATE_CARTS, MIGRATE_TOTALS, TOTALS_V1, TOTALS_V2 } from './fixtures/migrate-states.js'

const MIGRATOR = join(import.meta.dirname, 'fixtures', 'migrator.ts')
const KEYS = scaled(3000, 8000)
const KILLS = scaled(20, 40)
const BATCH = 25
const figures = { migrateKills: 0, migrateKillsAtWrite: 0, migrateRuns: 0 }
afterAll(() => recordFigures('migrate-kill', figures))

const key = (i: number): string => `k${String(i).padStart(5, '0')}`
const cartKey = (i: number): Buffer => Buffer.of(i % 7, 0xff)
/** The upgrade written out again, independent of the states' upgrade functions: what every value must read as. */
const expected = (n: number): { count: number; parity: string } => ({ count: n, parity: n % 2 === 0 ? 'even' : 'odd' })

/** All keys unversioned, then every third rewritten at version 2 (count = the same n). */
async function fill(path: string): Promise<void> {
  let store = await PartitionStore.open({ path, states: [TOTALS_V1, CARTS_V1] })
  let tx = store.transaction()
  for (let i = 0; i < KEYS; i++) {
    tx.value(TOTALS_V1).put(key(i), { n: i })
    tx.map(CARTS_V1).put(cartKey(i), key(i), { n: i })
  }
  await tx.commit({ topic: 't', partition: 0, offset: 1n })
  await store.close()
  store = await PartitionStore.open({ path, states: [TOTALS_V2] })
  tx = store.transaction()
  for (let i = 0; i < KEYS; i += 3) tx.value(TOTALS_V2).put(key(i), { count: i })
  await tx.commit({ topic: 't', partition: 0, offset: 2n })
  await store.close()
}

/** Every value read at version 3 equals the independent upgrade. */
async function checkReadable(path: string): Promise<void> {
  const store = await PartitionStore.open({ path, states: [MIGRATE_TOTALS, MIGRATE_CARTS] })
  try {
    const tx = store.transaction()
    let n = 0
    for await (const [k, v] of tx.value(MIGRATE_TOTALS).entries()) {
      expect(v).toEqual(expected(Number(k.slice(1))))
      n++
    }
    for (let c = 0; c < 7; c++) {
      for await (const [sub, v] of tx.map(MIGRATE_CARTS).entries(Buffer.of(c, 0xff))) {
        expect(v).toEqual(expected(Number(sub.slice(1))))
        n++
      }
    }
    expect(n).toBe(2 * KEYS)
  } finally {
    await store.close()
  }
}

/** One migrator run: killed by the parent after `afterProgress` progress lines, or by itself at its `killAtWrite`-th batch write; or to its end. */
async function run(path: string, kill: { afterProgress?: number; killAtWrite?: number }): Promise<{ done: boolean; signal: NodeJS.Signals | null }> {
  const args: MigratorArgs = { path, batchSize: BATCH, ...(kill.killAtWrite === undefined ? {} : { killAtWrite: kill.killAtWrite }) }
  const child = spawn(process.execPath, ['--import', 'tsx', MIGRATOR, JSON.stringify(args)], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr = (stderr + chunk).slice(-8000) })
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
  let progress = 0
  let done = false
  for await (const text of createInterface({ input: child.stdout })) {
    const line = JSON.parse(text) as { type: string }
    if (line.type === 'progress' && ++progress === kill.afterProgress) child.kill('SIGKILL')
    if (line.type === 'done') done = true
  }
  const { code, signal } = await exit
  if (signal === null && code !== 0) throw new Error(`the migrator failed (exit ${code}): ${stderr}`)
  return { done, signal }
}

describe('eager migration under SIGKILL', () => {
  it(`resumes after ${KILLS} kills; every value ends at version 3, equal to an independent upgrade`, async () => {
    const r = rng('migrate-kill')
    const path = join(tempDir('tidemark-migrate-kill-'), 'store')
    await fill(path)
    while (figures.migrateKills < KILLS) {
      const atWrite = r.chance(0.5)
      const result = await run(path, atWrite ? { killAtWrite: r.int(1, 4) } : { afterProgress: r.int(1, 3) })
      figures.migrateRuns++
      expect(result.done, 'the migration finished before the kills were made: the store needs more keys').toBe(false)
      expect(result.signal).toBe('SIGKILL')
      figures.migrateKills++
      if (atWrite) figures.migrateKillsAtWrite++
      await checkReadable(path)
    }
    expect(await run(path, {})).toEqual({ done: true, signal: null })
    figures.migrateRuns++
    await checkReadable(path)

    // On disk: every value of both states at version 3, no progress records, the registry at 3.
    const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer' })
    try {
      let values = 0
      for await (const [k, v] of db.iterator()) {
        if (k[0] === 0x01) {
          values++
          expect(v.toString('latin1').startsWith('\u00013:'), k.toString('hex')).toBe(true)
        } else {
          expect(k.toString('latin1')).not.toContain('tidemark.migrate.')
          if (k[1] === 0x73) expect(JSON.parse(v.toString('utf8'))).toMatchObject({ version: 3 })
        }
      }
      expect(values).toBe(2 * KEYS)
    } finally {
      await db.close()
    }
  })
})
