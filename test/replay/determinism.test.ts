import { spawn } from 'node:child_process'
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { pathToFileURL } from 'node:url'
import { expect, it } from 'vitest'
import { runReplayCommand } from '../../src/cli/commands/replay.js'
import { tempDir } from '../helpers/tmp.js'
import { fold, TOPIC } from './fixtures/operator.js'
import { digestOf, distinct, outputs, readPosition, sourceLog } from './helpers.js'

// The acceptance test of issue 9's replay jobs, through `tidemark replay`.

/** Events of the command-line runs (two in child processes): each costs a process start and per-record appends of the file-log sink. */
const CHILD_EVENTS = 1200
const OPERATOR = join(import.meta.dirname, 'fixtures', 'operator.ts')
const WORKER = join(import.meta.dirname, 'fixtures', 'cli-worker.ts')

it('Replay determinism: run twice, once SIGKILLed in a child process and resumed, gives the same output ids and bytes and the same digest', async () => {
  const root = tempDir()
  const log = await sourceLog(root, CHILD_EVENTS)
  await log.close()
  const args = (env: string) => [
    '--job', 'what-if', '--handler', OPERATOR, '--path', join(root, env, 'store'), '--snapshots', pathToFileURL(join(root, env, 'snapshots')).href,
    '--log', pathToFileURL(join(root, 'source')).href, '--topic', TOPIC, '--partition', '0', '--to', String(CHILD_EVENTS - 1),
    '--output', pathToFileURL(join(root, env, 'out')).href, '--output-no-fsync', '--batch-size', '100', '--json',
  ]
  const run = (env: string, pauseAt?: number) => {
    const child = spawn(process.execPath, ['--import', 'tsx', WORKER, ...args(env)], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...(pauseAt === undefined ? {} : { TIDEMARK_TEST_PAUSE_AT: String(pauseAt) }) },
    })
    const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
    let stderr = ''
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString() })
    return { child, exit, stderr: () => stderr }
  }
  for (const env of ['a', 'b']) await mkdir(join(root, env, 'snapshots'), { recursive: true })

  // B: paused inside the handler at offset 750, committed batches behind it, then SIGKILLed.
  const killed = run('b', 750)
  for await (const line of createInterface({ input: killed.child.stdout })) {
    if (line === 'paused') break
  }
  killed.child.kill('SIGKILL')
  expect((await killed.exit).signal).toBe('SIGKILL')
  const committed = (await readPosition(join(root, 'b', 'store')))!
  expect(committed).toBeGreaterThan(0n)
  expect(committed).toBeLessThan(750n)

  // B resumed in a child, and A in one go in this process (the same command).
  const resumedRun = run('b')
  let stdout = ''
  resumedRun.child.stdout.on('data', (d: Buffer) => { stdout += d.toString() })
  expect((await resumedRun.exit).code, resumedRun.stderr()).toBe(0)
  const inProcess = { stdout: '', stderr: '' }
  const code = await runReplayCommand(args('a'), { stdout: { write: (t: string) => (inProcess.stdout += t) }, stderr: { write: (t: string) => (inProcess.stderr += t) }, isTTY: false })
  expect(code, inProcess.stderr).toBe(0)
  const results = [stdout, inProcess.stdout].map((text) => JSON.parse(text) as { source: string; events: number; digest: string; offset: string })
  const [resumed, once] = results
  expect(resumed).toMatchObject({ source: 'local', events: CHILD_EVENTS - 1 - Number(committed), offset: String(CHILD_EVENTS - 1) })
  expect(once).toMatchObject({ source: 'new', events: CHILD_EVENTS, offset: String(CHILD_EVENTS - 1) })
  expect(resumed!.digest).toBe(once!.digest)
  expect(once!.digest).toBe(await digestOf(fold(0, CHILD_EVENTS - 1)))
  // Same ids and bytes: B may hold records of its last unconfirmed send twice, with the same bytes.
  const a = await outputs(join(root, 'a', 'out'))
  const b = distinct(await outputs(join(root, 'b', 'out')))
  expect(a).toHaveLength(CHILD_EVENTS)
  expect(b).toEqual(a)
})

