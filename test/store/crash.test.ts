import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { expect, it } from 'vitest'
import { PartitionStore } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { counts, eventAt, TOPIC } from './fixtures/crash-events.js'

const KILLS = 6

/** Runs the committer until it has reported `commits` commits, then SIGKILLs it mid-flight. */
async function runAndKill(path: string, commits: number, seed: number): Promise<bigint> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'committer.ts'), path, String(seed)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)))
  let last = -1n
  let seen = 0
  for await (const line of createInterface({ input: child.stdout })) {
    last = BigInt(line)
    if (++seen >= commits) {
      child.kill('SIGKILL')
      break
    }
  }
  expect(await exited).toBe('SIGKILL')
  return last
}

/** The state that exactly the events 0..position produce, computed without the store. */
function fold(position: bigint): Map<string, number> {
  const expected = new Map<string, number>()
  for (let i = 0n; i <= position; i++) {
    const { key, delta } = eventAt(i)
    expected.set(key, (expected.get(key) ?? 0) + delta)
  }
  return expected
}

it(`after each of ${KILLS} SIGKILLs the store holds exactly the fold of the events up to its position`, async () => {
  const path = tempDir()
  let previous = -1n
  for (let round = 0; round < KILLS; round++) {
    const reported = await runAndKill(path, 1 + Math.floor(Math.random() * 40), round + 1)
    const store = await PartitionStore.open({ path, states: [counts] })
    try {
      const position = store.position(TOPIC, 0)
      expect(position).toBeDefined()
      // Every commit the child reported is durable, and the position only moves forward.
      expect(position!).toBeGreaterThanOrEqual(reported)
      expect(position!).toBeGreaterThan(previous)
      previous = position!
      const actual = new Map<string, number>()
      for await (const [key, value] of store.transaction().value(counts).entries()) actual.set(key, value)
      expect(actual).toEqual(fold(position!))
    } finally {
      await store.close()
    }
  }
}, 120_000)
