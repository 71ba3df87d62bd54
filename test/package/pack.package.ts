/**
 * `npm run test:package` (not part of `npm test`: packing, building and the
 * npm installs take a minute or more). Installs the tarball that
 * test/setup/package.ts packed as `npm publish` would into a fresh app with
 * nothing but typescript and @types/node (so without the optional peers
 * @aws-sdk/client-s3 and kafkajs), compiles the README's examples there under strict (the files in
 * examples/readme/, which test/package/readme-examples.test.ts keeps equal to
 * the README's blocks), runs them as ES modules and through require(), and
 * runs the `tidemark` command against the store the processor example made.
 * Last, it installs kafkajs into the app and compiles and runs the consumer
 * example against librdkafka's Kafka mock (kcat, as `npm test` uses).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { cp, mkdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { Kafka, logLevel } from 'kafkajs'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { devVersion, installApp, root, tarballFiles } from '../../scripts/package/pack.js'
import { makeTempDir, type TempDir } from '../helpers/tmp.js'

const run = promisify(execFile)
let work: TempDir
const tarball = inject('tarball')
let app: string
let out: string

/** Runs a command in the app; resolves with its exit code and output, whatever the code. */
async function inApp(command: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(command, args, { cwd: app, maxBuffer: 16 << 20 })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string }
    if (typeof e.code !== 'number') throw err
    return { code: e.code, stdout: e.stdout ?? '', stderr: e.stderr ?? '' }
  }
}

beforeAll(async () => {
  work = makeTempDir('tidemark-pack-')
  app = join(work.path, 'app')
  await installApp(app, [tarball, `typescript@${await devVersion('typescript')}`, `@types/node@${await devVersion('@types/node')}`])
  await cp(join(root, 'examples', 'readme'), join(app, 'src'), { recursive: true })
  out = join(app, 'out')
  await writeFile(join(app, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      target: 'ES2022', module: 'nodenext', moduleResolution: 'nodenext', lib: ['ES2023'], types: ['node'],
      strict: true, noUncheckedIndexedAccess: true, skipLibCheck: false, rootDir: 'src', outDir: 'out',
    },
    include: ['src'],
    // Needs kafkajs, which the app gets only for the last test (tsconfig.kafka.json).
    exclude: ['src/consumer.ts'],
  }, null, 2))
  await writeFile(join(app, 'tsconfig.kafka.json'), JSON.stringify({ extends: './tsconfig.json', include: ['src/consumer.ts'], exclude: [] }, null, 2))
}, 600_000)

afterAll(() => work?.cleanup())

describe('the packed package', () => {
  it('holds the build, the docs the README links, LICENSE; no source maps, no test-service scripts', async () => {
    const files = await tarballFiles(tarball)
    expect(files).toContain('LICENSE')
    expect(files).toContain('README.md')
    expect(files).toContain('dist/src/index.js')
    expect(files).toContain('dist/src/index.d.ts')
    expect(files).toContain('dist/src/cli/main.js')
    expect(files).toContain('dist/connectors/s3/index.js')
    expect(files).toContain('dist/connectors/kafka/index.js')
    expect(files).toContain('dist/src/testing/index.js')
    expect(files.filter((f) => f.endsWith('.map'))).toEqual([])
    expect(files.filter((f) => f.startsWith('scripts/') || f.startsWith('test/') || f.startsWith('src/') || f.startsWith('connectors/'))).toEqual([])
    const readme = await readFile(join(root, 'README.md'), 'utf8')
    const linked = [...readme.matchAll(/\]\(([^)#:]+)(#[^)]*)?\)/g)].map((m) => m[1]!)
    expect(linked.length).toBeGreaterThan(0)
    for (const path of linked) expect(files, `README links ${path}`).toContain(path)
    const pkg = JSON.parse(await readFile(join(app, 'node_modules', 'tidemark', 'package.json'), 'utf8')) as Record<string, unknown>
    expect(pkg).toMatchObject({ license: 'Apache-2.0', repository: { type: 'git' }, bugs: { url: expect.any(String) } })
    for (const entry of ['.', './kafka', './s3', './testing']) expect(Object.keys((pkg.exports as Record<string, object>)[entry]!)).toEqual(['types', 'import', 'default'])
    expect(pkg.peerDependenciesMeta).toMatchObject({ '@aws-sdk/client-s3': { optional: true }, kafkajs: { optional: true } })
    expect(Object.keys(pkg.dependencies as object)).not.toContain('@aws-sdk/client-s3')
    expect(Object.keys(pkg.dependencies as object)).not.toContain('kafkajs')
  })

  it('installs without the optional peers (@aws-sdk/client-s3, kafkajs)', async () => {
    const { code, stdout } = await inApp('npm', ['ls', '--all', '--parseable'])
    expect(code).toBe(0)
    expect(stdout).not.toMatch(/node_modules\/(@aws-sdk|kafkajs)/)
  })

  it("compiles the README's examples under strict (ESM and CommonJS)", async () => {
    const { code, stdout } = await inApp(process.execPath, [join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', '.'])
    expect(stdout).toBe('')
    expect(code).toBe(0)
  })

  it('runs the first example (ESM)', async () => {
    const r = await inApp(process.execPath, [join(out, 'first-example.js')])
    expect(r.stderr).toBe('')
    expect(r.code).toBe(0)
    expect(r.stdout.split('\n').slice(0, 3)).toEqual(['o-102 102', 'o-105 105', 'o-108 108'])
  })

  it('runs the CommonJS example: require() of the package', async () => {
    const first = await inApp(process.execPath, [join(out, 'require.cjs')])
    expect(first).toMatchObject({ code: 0, stdout: 'visits 1\n' })
    // Node 20.19 and 22.12+ load ES modules through require() without a flag and without a warning.
    expect(first.stderr).toBe('')
    expect((await inApp(process.execPath, [join(out, 'require.cjs')])).stdout).toBe('visits 2\n')
  })

  it('runs the processor example until SIGTERM, which closes it (exit 0) with a last snapshot', async () => {
    // The producer's part: 1000 sales in the log the example reads.
    const seeded = await inApp(process.execPath, ['--input-type=module', '-e', `
      import { resolve } from 'node:path'
      import { openFileLog } from 'tidemark'
      const log = await openFileLog(resolve('data/sales-log'))
      for (let i = 0; i < 1000; i++) await log.append(Buffer.from(JSON.stringify({ key: 'shop-' + (i % 7), amount: i % 100 })))
      await log.close()
    `])
    expect(seeded).toMatchObject({ code: 0, stderr: '' })
    const child = spawn(process.execPath, [join(out, 'processor.js')], { cwd: app, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString() })
    const replayed = new Promise<void>((resolve) => child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString()
      if (stdout.includes('replay 1000 / 1000 events done\n')) resolve()
    }))
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
    await Promise.race([replayed, exited])
    // A second copy while the first holds the partition: its code and message, no stack.
    const second = await inApp(process.execPath, [join(out, 'processor.js')])
    expect(second.code).toBe(1)
    expect(second.stderr).toMatch(/^TIDEMARK_OWNERSHIP_CONFLICT: .* holds partition 0 of job sales-totals .*\n$/)
    expect(second.stderr).not.toMatch(/\n\s+at /)
    child.kill('SIGTERM')
    expect(await exited).toBe(0)
    expect(stderr).toBe('')
    // One line per phase at most: no progress lines while it was idle.
    expect(stdout.split('\n').filter((l) => l.startsWith('replay')).length).toBeLessThanOrEqual(10)
  })

  it('npx tidemark --version prints the package version', async () => {
    const r = await inApp('npx', ['--no-install', 'tidemark', '--version'])
    expect(r).toMatchObject({ code: 0, stdout: '0.1.0\n', stderr: '' })
    const pkg = JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as { version: string }
    expect(r.stdout.trim()).toBe(pkg.version)
  })

  it('npx tidemark snapshots list shows the snapshot the processor example took on SIGTERM', async () => {
    const url = pathToFileURL(join(app, 'data', 'snapshots')).href
    const r = await inApp('npx', ['--no-install', 'tidemark', 'snapshots', 'list', url, '--job', 'sales-totals', '--partition', '0', '--json'])
    expect(r.stderr).toBe('')
    expect(r.code).toBe(0)
    const listed = JSON.parse(r.stdout) as unknown
    expect(JSON.stringify(listed)).toContain('"offset":"999"')
  })

  it('without the AWS SDK, an s3:// store fails with TIDEMARK_DFS_CLIENT_MISSING, in the library and in the command', async () => {
    const lib = await inApp(process.execPath, ['--input-type=module', '-e', `
      import { openSnapshotStore } from 'tidemark'
      await openSnapshotStore('s3://bucket/prefix?region=us-east-1').catch((e) => console.log(e.code, e.message))
    `])
    expect(lib.stdout).toContain("TIDEMARK_DFS_CLIENT_MISSING s3:// snapshot stores need the AWS SDK, an optional peer dependency of tidemark that is not installed: npm install @aws-sdk/client-s3")
    const cli = await inApp('npx', ['--no-install', 'tidemark', 'snapshots', 'list', 's3://bucket/prefix?region=us-east-1', '--job', 'j', '--partition', '0'])
    expect(cli.code).toBe(1)
    expect(cli.stderr).toContain('TIDEMARK_DFS_CLIENT_MISSING')
    expect(cli.stderr).toContain('npm install @aws-sdk/client-s3')
  })

  it("runs docs/testing.md's node:test example: tidemark/testing's log suite, no test framework installed", async () => {
    const doc = await readFile(join(root, 'docs', 'testing.md'), 'utf8')
    const example = /```js\n([\s\S]*?)```/.exec(doc)?.[1]
    expect(example).toContain("from 'tidemark/testing'")
    await mkdir(join(app, 'suite'), { recursive: true })
    await writeFile(join(app, 'suite', 'file-log.test.mjs'), example!)
    // TAP on every Node line: Node 24 reports with 'spec' by default, also into a pipe.
    const r = await inApp(process.execPath, ['--test', '--test-reporter=tap', join(app, 'suite', 'file-log.test.mjs')])
    expect(r.stdout).toMatch(/# pass 11\n# fail 0\n/)
    expect(r.code).toBe(0)
  })

  it('compiles the consumer example with kafkajs installed, and runs it on the Kafka mock until SIGTERM, which hands off and exits 0', async () => {
    const install = await inApp('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', `kafkajs@${await devVersion('kafkajs')}`])
    expect(install.code).toBe(0)
    const compiled = await inApp(process.execPath, [join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.kafka.json'])
    expect(compiled).toMatchObject({ code: 0, stdout: '' })

    const mock = await run('bash', [join(root, 'scripts', 'services', 'kafka-mock.sh'), 'start'], { env: { ...process.env, TIDEMARK_WATCH_PID: String(process.pid) } })
    const brokers = /brokers=(\S+)/.exec(mock.stdout)![1]!
    const mockDir = /dir=(\S+)/.exec(mock.stdout)![1]!
    let child: ChildProcess | undefined
    try {
      // 12 words over the 4 partitions of the topic the example reads: offsets 0, 1, 2 in each.
      const words = ['tide', 'mark', 'tide', 'sea', 'tide', 'mark', 'moon', 'sea', 'tide', 'wave', 'mark', 'tide']
      const producer = new Kafka({ brokers: brokers.split(','), logLevel: logLevel.NOTHING }).producer()
      await producer.connect()
      await producer.send({ topic: 'words', messages: words.map((word, i) => ({ partition: i % 4, value: JSON.stringify({ word }) })) })
      await producer.disconnect()

      child = spawn(process.execPath, [join(out, 'consumer.js')], { cwd: app, env: { ...process.env, KAFKA_BROKERS: brokers }, stdio: ['ignore', 'pipe', 'pipe'] })
      let stdout = ''
      let stderr = ''
      child.stderr!.on('data', (d: Buffer) => { stderr += d.toString() })
      const exited = new Promise<number | null>((resolve) => child!.once('exit', (code) => resolve(code)))
      const allCommitted = new Promise<void>((resolve) => child!.stdout!.on('data', (d: Buffer) => {
        stdout += d.toString()
        if ([0, 1, 2, 3].every((p) => stdout.includes(`words/${p}: committed up to offset 2\n`))) resolve()
      }))
      await Promise.race([allCommitted, exited])
      child.kill('SIGTERM')
      expect(await exited).toBe(0)
      expect(stderr).toBe('')

      // The state the example committed, read back with the tidemark command.
      const counts = new Map<string, number>()
      for (const p of [0, 1, 2, 3]) {
        const dump = await inApp('npx', ['--no-install', 'tidemark', 'state', 'dump', join(app, 'data', 'wordcount', `words-${p}`), '--state', 'counts'])
        expect(dump).toMatchObject({ code: 0, stderr: '' })
        for (const line of dump.stdout.split('\n').filter((l) => l !== '')) {
          const { key, value } = JSON.parse(line) as { key: string; value: number }
          counts.set(key, (counts.get(key) ?? 0) + value)
        }
      }
      expect(Object.fromEntries(counts)).toEqual({ tide: 5, mark: 3, sea: 2, moon: 1, wave: 1 })
    } finally {
      child?.kill('SIGKILL')
      await run('bash', [join(root, 'scripts', 'services', 'kafka-mock.sh'), 'stop', mockDir])
    }
  })
})
