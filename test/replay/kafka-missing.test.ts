import { execFile } from 'node:child_process'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import { tempDir } from '../helpers/tmp.js'

const run = promisify(execFile)
const root = join(import.meta.dirname, '..', '..')
const OPERATOR = join(import.meta.dirname, 'fixtures', 'operator.ts')

/**
 * Runs `args` in a fresh Node process (through tsx) in which kafkajs is not
 * installed: a module hook fails its resolution exactly as Node does for a
 * package that is absent (ERR_MODULE_NOT_FOUND); every other module is the
 * real one (as test/package/client-missing.test.ts does for the AWS SDK).
 */
async function withoutKafkajs(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const dir = tempDir('tidemark-nokafkajs-')
  await writeFile(join(dir, 'hooks.mjs'), `
    export async function resolve(specifier, context, next) {
      if (specifier === 'kafkajs') {
        const error = new Error("Cannot find package 'kafkajs' imported from " + context.parentURL)
        error.code = 'ERR_MODULE_NOT_FOUND'
        throw error
      }
      return next(specifier, context)
    }
  `)
  await writeFile(join(dir, 'register.mjs'), `import { register } from 'node:module'\nregister('./hooks.mjs', import.meta.url)\n`)
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', pathToFileURL(join(dir, 'register.mjs')).href, '--import', 'tsx', ...args], { cwd: root })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string }
    return { code: e.code, stdout: e.stdout, stderr: e.stderr }
  }
}

describe('tidemark replay without the optional kafkajs', () => {
  it('--brokers fails with TIDEMARK_KAFKA_CLIENT_MISSING naming what to install, exit 1', async () => {
    const dir = tempDir()
    await mkdir(join(dir, 'snapshots'))
    const r = await withoutKafkajs([join(root, 'src', 'cli', 'main.ts'), 'replay', '--job', 'nokafka', '--handler', OPERATOR, '--path', join(dir, 'store'),
      '--snapshots', pathToFileURL(join(dir, 'snapshots')).href, '--brokers', '127.0.0.1:1', '--topic', 'sales', '--partition', '0', '--to', '10'])
    expect(r.code).toBe(1)
    expect(r.stdout).toBe('')
    expect(/TIDEMARK_[A-Z_]+/.exec(r.stderr)?.[0]).toBe('TIDEMARK_KAFKA_CLIENT_MISSING')
    expect(r.stderr).toContain('tidemark replay: TIDEMARK_KAFKA_CLIENT_MISSING: Kafka sources and outputs (--brokers, --output-brokers) need kafkajs, an optional peer dependency of tidemark that is not installed: npm install kafkajs\n')
  })
})
