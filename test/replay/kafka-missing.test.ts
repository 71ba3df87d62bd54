import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { tempDir } from '../helpers/tmp.js'
import { withoutPackage } from '../helpers/without-package.js'

const root = join(import.meta.dirname, '..', '..')
const OPERATOR = join(import.meta.dirname, 'fixtures', 'operator.ts')

const withoutKafkajs = (args: string[]): ReturnType<typeof withoutPackage> => withoutPackage('kafkajs', args)

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
