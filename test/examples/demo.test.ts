import { execFile, spawn } from 'node:child_process'
import { existsSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { expect, it } from 'vitest'
import { kafkaService, s3Service } from '../helpers/services.js'
import { randomName } from '../helpers/tmp.js'

const run = promisify(execFile)
const demo = join(import.meta.dirname, '../../examples/demo/main.ts')
const root = join(import.meta.dirname, '../..')

/**
 * Runs the demo as `npm start` does in a process group of its own, waits for
 * the line `until` matches, then sends `signal` to the whole group as a
 * terminal's Ctrl-C does (`group`), or to the demo's process alone as
 * `kill PID` does.
 */
async function interruptDemo(args: string[], until: RegExp, signal: NodeJS.Signals, group: boolean): Promise<{ code: number | null; stdout: string; stderr: string; dir: string; groupGone: boolean }> {
  // Node itself, not the tsx command: tsx relays a signal to its child and
  // SIGKILLs it unless the child acknowledges within 30 ms, which a loaded
  // machine misses, and the demo would not get to clean up.
  const start = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start
  expect(start).toBe('node --import tsx examples/demo/main.ts')
  const child = spawn(process.execPath, ['--import', 'tsx', demo, ...args], { cwd: root, detached: true, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString() })
  const closed = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)))
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString()
      if (until.test(stdout)) resolve()
    })
    void closed.then(() => reject(new Error(`the demo ended before printing ${until}: ${stdout}${stderr}`)))
  })
  if (group) process.kill(-child.pid!, signal)
  else child.kill(signal)
  const code = await closed
  let groupGone = false
  try {
    process.kill(-child.pid!, 0)
  } catch (err) {
    groupGone = (err as NodeJS.ErrnoException).code === 'ESRCH'
  }
  const dir = /^working directory: (\S+)/m.exec(stdout)![1]!
  return { code, stdout, stderr, dir, groupGone }
}

it('the demo (npm start) survives a SIGKILL and prints "verified" on embedded defaults', async () => {
  const { stdout } = await run(process.execPath, ['--import', 'tsx', demo, '--events', '30000'])
  // The numbers the words explain add up: what owner 1 committed, where the
  // snapshot owner 2 restored stands, and what owner 2 processed again and new.
  const killed = /^owner 1: processed and committed offsets 0 to (\d+) \((\d+) events\) in [\d.]+ s, then was killed with SIGKILL/m.exec(stdout)
  const restored = /^owner 2: restored snapshot \S+ \(the state as of offset (\d+)\)/m.exec(stdout)
  const processed = /^owner 2: processed offsets (\d+) to (\d+) \((\d+) events\): (\d+) that owner 1 had processed after the snapshot [^,]*, then (\d+) new ones$/m.exec(stdout)
  expect(killed, stdout).not.toBeNull()
  expect(restored, stdout).not.toBeNull()
  expect(processed, stdout).not.toBeNull()
  const [lastCommit, committed] = [Number(killed![1]), Number(killed![2])]
  const snapshotOffset = Number(restored![1])
  const [from, to, events, again, fresh] = processed!.slice(1).map(Number) as [number, number, number, number, number]
  expect(committed).toBe(lastCommit + 1)
  expect([from, to, events]).toEqual([snapshotOffset + 1, 29_999, 29_999 - snapshotOffset])
  expect([again, fresh]).toEqual([lastCommit - snapshotOffset, 29_999 - lastCommit])
  expect(stdout).toMatch(/^owner 1: \d+ snapshots? finished in that time, at offsets? [\d, ]+ \(a snapshot starts when 3000 events were committed/m)
  expect(stdout.trim().split('\n').at(-1)).toBe('verified')
}, 180_000)

it('--keep prints the working directory, the job and the tidemark commands that look at it', async () => {
  const { stdout } = await run(process.execPath, ['--import', 'tsx', demo, '--events', '10000', '--keep'])
  const dir = /^working directory: (\S+) \(kept: --keep\)$/m.exec(stdout)![1]!
  try {
    expect(stdout).toContain(`kept ${dir}: job demo, topic sales, partition 0.`)
    expect(stdout).toContain(`  tidemark snapshots list file://${dir}/snapshots --job demo --partition 0\n`)
    expect(stdout.trim().split('\n').at(-1)).toBe('verified')
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}, 180_000)

it('the demo runs the same against Kafka and S3 (--kafka, --s3)', async () => {
  const s3 = s3Service()
  const url = `s3://${randomName('demo')}?endpoint=${encodeURIComponent(s3.endpoint)}&region=${s3.region}&forcePathStyle=true`
  const { stdout } = await run(process.execPath, ['--import', 'tsx', demo, '--events', '20000', '--kafka', kafkaService().brokers.join(','), '--s3', url], {
    env: { ...process.env, AWS_ACCESS_KEY_ID: s3.accessKeyId, AWS_SECRET_ACCESS_KEY: s3.secretAccessKey },
  })
  expect(stdout).toContain('into the Kafka topic')
  expect(stdout.trim().split('\n').at(-1)).toBe('verified')
}, 240_000)

it('the demo prints its usage on --help, and refuses a bad option with one line and exit 2 before doing anything', async () => {
  const help = await run(process.execPath, ['--import', 'tsx', demo, '--help'])
  expect(help.stdout).toMatch(/^usage: npm start -- .*\n(.*\n)*.*--events N/)
  expect(help.stderr).toBe('')
  const cases: [string[], string][] = [
    [['--events', '5000'], '--events must be an integer of at least 10000, got "5000"'],
    [['--bogus'], "Unknown option '--bogus'"],
    [['--s3', 'file:///tmp/x'], '--s3 must be an s3:// URL, got "file:///tmp/x"'],
  ]
  await Promise.all(cases.map(async ([args, message]) => {
    const failed = run(process.execPath, ['--import', 'tsx', demo, ...args])
    await expect(failed, args.join(' ')).rejects.toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(/^demo: [^\n]*\n$/) })
    await expect(failed, args.join(' ')).rejects.toMatchObject({ stderr: expect.stringContaining(`demo: ${message}`) })
  }))
})

it('Ctrl-C while a worker runs: the worker is stopped, the working directory removed, the demo says so and exits 130', async () => {
  const r = await interruptDemo(['--events', '100000'], /^owner 1: started .*\n/m, 'SIGINT', true)
  expect(r.stderr).toBe(`demo: interrupted by SIGINT; removed ${r.dir}\n`)
  expect(r.code).toBe(130)
  expect(r.stdout).not.toContain('verified')
  expect(existsSync(r.dir)).toBe(false)
  // No worker left behind in the terminal's process group.
  expect(r.groupGone).toBe(true)
}, 120_000)

it('SIGTERM to the demo alone while it generates the log, with --keep: the directory is kept and named, exit 143', async () => {
  const r = await interruptDemo(['--events', '30000', '--keep'], /^generating .*\n/m, 'SIGTERM', false)
  try {
    expect(r.stderr).toBe(`demo: interrupted by SIGTERM; kept ${r.dir} (--keep)\n`)
    expect(r.code).toBe(143)
    expect(r.stdout).not.toContain('owner 1')
    expect(existsSync(r.dir)).toBe(true)
    expect(r.groupGone).toBe(true)
  } finally {
    rmSync(r.dir, { recursive: true, force: true })
  }
}, 120_000)
