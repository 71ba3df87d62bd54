import { execFile } from 'node:child_process'
import { rmSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { expect, it } from 'vitest'
import { kafkaService, s3Service } from '../helpers/services.js'
import { randomName } from '../helpers/tmp.js'

const run = promisify(execFile)
const demo = join(import.meta.dirname, '../../examples/demo/main.ts')

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
