// SIGKILLs of processes that append to one file log through the relay
// (FileLogOptions.relay): whichever holds the lock, serves the others or
// relays to it is killed at a random moment and replaced. Nothing
// acknowledged may be lost, the log stays one contiguous run of whole
// records, and an append fails only as in doubt (TIDEMARK_LOG_UNAVAILABLE,
// retriable) when the process it was relayed to died.
import { describe, expect, it } from 'vitest'
import { openFileLog, type LogEntry } from '../../src/log/index.js'
import { tempDir } from '../helpers/tmp.js'
import { spawnScript, type Child } from '../log/child.js'
import { recordFigures, rng, scaled } from './common.js'

// 100 kills in the full run, 12 in CI.
const KILLS = scaled(12, 100)
const PROCESSES = 3
const OPTIONS = JSON.stringify({ relay: true, lockTimeoutMs: 30_000 })

describe.runIf(process.platform === 'linux')('SIGKILL torture on the file log relay', () => {
  it(`${KILLS} kills of ${PROCESSES} processes appending through the relay: every acknowledged append survives at its revision`, async () => {
    const random = rng('relay-file-log')
    const dir = tempDir('tidemark-torture-relay-')
    const start = async (tag: string): Promise<Child> => {
      const child = spawnScript('test/log/fixtures/relay-append-loop.ts', [dir, tag, '2', OPTIONS, '-1'])
      await child.waitFor((l) => l === 'ready')
      child.send('go')
      return child
    }
    const slots = await Promise.all(Array.from({ length: PROCESSES }, (_, i) => start(`p${i}g0`)))
    const finished: Child[] = []
    let generation = 0
    for (let kill = 0; kill < KILLS; kill++) {
      const slot = random.int(0, PROCESSES - 1)
      const victim = slots[slot]!
      // Killed after a random number of its own acknowledgements (or failures) from now.
      const from = victim.lines.length
      await victim.waitFor(() => true, from + random.int(0, 40))
      victim.proc.kill('SIGKILL')
      await victim.exited
      finished.push(victim)
      slots[slot] = await start(`p${slot}g${++generation}`)
    }
    for (const child of slots) {
      child.proc.kill('SIGKILL')
      await child.exited
      finished.push(child)
    }

    const log = await openFileLog(dir, { relay: true, lockTimeoutMs: 30_000 })
    const entries: LogEntry[] = []
    for await (const e of log.read(0n)) entries.push(e)
    expect(entries.map((e) => e.revision)).toEqual(entries.map((_, i) => BigInt(i)))
    const stored = new Map(entries.map((e) => [Buffer.from(e.data).toString(), e.revision]))
    let acked = 0
    let inDoubt = 0
    for (const child of finished) {
      for (const line of child.lines) {
        const parts = line.split(' ')
        if (parts[0] === 'fail') {
          inDoubt++
          expect(parts.slice(2), line).toEqual(['TIDEMARK_LOG_UNAVAILABLE', 'true'])
        } else if (parts.length === 2) {
          acked++
          expect(stored.get(parts[0]!), parts[0]).toBe(BigInt(parts[1]!))
        }
      }
    }
    // Appends go on after the last kill, at the end of the whole records.
    expect(await log.append(Buffer.from('after'))).toBe(BigInt(entries.length))
    await log.close()
    expect(acked).toBeGreaterThan(KILLS * 5)
    // Keys of their own: `kills` is the kill loops' (each followed by a checked restart).
    recordFigures('relay-file-log', { relayKills: KILLS, relayAcked: acked, relayInDoubt: inDoubt })
  })
})
