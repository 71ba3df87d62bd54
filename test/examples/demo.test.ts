import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { expect, it } from 'vitest'
import { kafkaService, s3Service } from '../helpers/services.js'
import { randomName } from '../helpers/tmp.js'

const run = promisify(execFile)
const demo = join(import.meta.dirname, '../../examples/demo/main.ts')

it('the demo (npm start) survives a SIGKILL and prints "verified" on embedded defaults', async () => {
  const { stdout } = await run(process.execPath, ['--import', 'tsx', demo, '--events', '30000'])
  expect(stdout).toMatch(/killed with SIGKILL after committing offset \d+/)
  expect(stdout).toMatch(/owner 2: restored snapshot/)
  expect(stdout.trim().split('\n').at(-1)).toBe('verified')
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
