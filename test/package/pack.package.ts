/**
 * `npm run test:package` (not part of `npm test`: packing, building and the
 * npm installs take a minute or more). Installs the tarball that
 * test/setup/package.ts packed as `npm publish` would into a fresh app made
 * as the README tells a new user (`npm init -y`, then its one step `npm pkg
 * set type=module`) with nothing but typescript and @types/node (so without
 * the optional peers @aws-sdk/client-s3, kafkajs and prom-client). There it
 * compiles the README's examples under strict (the files in examples/readme/,
 * which test/package/readme-examples.test.ts keeps equal to the README's
 * blocks) and runs them as ES modules and through require(); runs the
 * TypeScript ones as they are with Node's own type stripping (`node file.ts`,
 * on the Node.js line that runs this test: every line `engines` names has
 * it); and runs the `tidemark` command against the store the processor
 * example made. Last, it installs kafkajs into the app and runs the consumer
 * example, compiled and stripped, against librdkafka's Kafka mock (kcat, as
 * `npm test` uses).
 */
import { execFile, spawn } from 'node:child_process'
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
/** The working directory of the runs under type stripping: data of their own, apart from the compiled runs' in the app. */
let strip: string

/** Runs a command in the app (or in `cwd`); resolves with its exit code and output, whatever the code. */
async function inApp(command: string, args: string[], cwd = app): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(command, args, { cwd, maxBuffer: 16 << 20 })
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
  strip = join(app, 'strip')
  await mkdir(strip)
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

/**
 * The processor example's run: 1000 sales appended to `cwd`/data/sales-log
 * (the producer's part), then `args` run in `cwd` until the example has
 * replayed them, then SIGTERM.
 */
async function runProcessorExample(cwd: string, args: string[], whileRunning?: () => Promise<void>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const seeded = await inApp(process.execPath, ['--input-type=module', '-e', `
    import { resolve } from 'node:path'
    import { openFileLog } from 'tidemark'
    const log = await openFileLog(resolve('data/sales-log'))
    for (let i = 0; i < 1000; i++) await log.append(Buffer.from(JSON.stringify({ key: 'shop-' + (i % 7), amount: i % 100 })))
    await log.close()
  `], cwd)
  expect(seeded).toMatchObject({ code: 0, stderr: '' })
  const child = spawn(process.execPath, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString() })
  const replayed = new Promise<void>((resolve) => child.stdout.on('data', (d: Buffer) => {
    stdout += d.toString()
    if (stdout.includes('replay 1000 / 1000 events done\n')) resolve()
  }))
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  await Promise.race([replayed, exited])
  await whileRunning?.()
  child.kill('SIGTERM')
  return { code: await exited, stdout, stderr }
}

/** The consumer example's run: `args` in `cwd` against the Kafka mock until every partition committed offset 2, then SIGTERM. */
async function runConsumerExample(cwd: string, args: string[], brokers: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, args, { cwd, env: { ...process.env, KAFKA_BROKERS: brokers }, stdio: ['ignore', 'pipe', 'pipe'] })
  try {
    let stdout = ''
    let stderr = ''
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString() })
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
    const allCommitted = new Promise<void>((resolve) => child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString()
      if ([0, 1, 2, 3].every((p) => stdout.includes(`words/${p}: committed up to offset 2\n`))) resolve()
    }))
    await Promise.race([allCommitted, exited])
    child.kill('SIGTERM')
    return { code: await exited, stdout, stderr }
  } finally {
    child.kill('SIGKILL')
  }
}

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

  it('is installed in an app that `npm init -y` and `npm pkg set type=module` made, without the optional peers (@aws-sdk/client-s3, kafkajs, prom-client)', async () => {
    const pkg = JSON.parse(await readFile(join(app, 'package.json'), 'utf8')) as { type?: string; dependencies?: Record<string, string> }
    expect(pkg.type).toBe('module')
    expect(Object.keys(pkg.dependencies ?? {}).sort()).toEqual(['@types/node', 'tidemark', 'typescript'])
    const { code, stdout } = await inApp('npm', ['ls', '--all', '--parseable'])
    expect(code).toBe(0)
    expect(stdout).not.toMatch(/node_modules\/(@aws-sdk|kafkajs|prom-client)/)
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

  it("runs the first example as it is, with Node's type stripping (node first-example.ts, no build)", async () => {
    const r = await inApp(process.execPath, [join(app, 'src', 'first-example.ts')], strip)
    expect(r.stderr).toBe('')
    expect(r.code).toBe(0)
    expect(r.stdout.split('\n').slice(0, 3)).toEqual(['o-102 102', 'o-105 105', 'o-108 108'])
  })

  it('runs the CommonJS example: require() of the package', async () => {
    const first = await inApp(process.execPath, [join(out, 'require.cjs')])
    expect(first).toMatchObject({ code: 0, stdout: 'visits 1\n' })
    // Node 22.12+ loads ES modules through require() without a flag and without a warning.
    expect(first.stderr).toBe('')
    expect((await inApp(process.execPath, [join(out, 'require.cjs')])).stdout).toBe('visits 2\n')
  })

  it("runs the CommonJS example (.cts) with tsx, which turns its import into require() as tsc does; Node's type stripping does not", async () => {
    const cts = join(app, 'src', 'require.cts')
    const tsx = await inApp(process.execPath, [join(root, 'node_modules', 'tsx', 'dist', 'cli.mjs'), cts], strip)
    expect(tsx).toMatchObject({ code: 0, stdout: 'visits 1\n', stderr: '' })
    // What the README says: node file.cts leaves the import as it is, which CommonJS cannot run.
    const stripped = await inApp(process.execPath, [cts], strip)
    expect(stripped.code).toBe(1)
    expect(stripped.stderr).toContain("import { PartitionStore, valueState, isTidemarkError } from 'tidemark'")
  })

  it('runs the processor example until SIGTERM, which closes it (exit 0) with a last snapshot', async () => {
    const r = await runProcessorExample(app, [join(out, 'processor.js')], async () => {
      // A second copy while the first holds the partition: its code and message, no stack.
      const second = await inApp(process.execPath, [join(out, 'processor.js')])
      expect(second.code).toBe(1)
      expect(second.stderr).toMatch(/^TIDEMARK_OWNERSHIP_CONFLICT: .* holds partition 0 of job sales-totals .*\n$/)
      expect(second.stderr).not.toMatch(/\n\s+at /)
    })
    expect(r.code).toBe(0)
    expect(r.stderr).toBe('')
    // One line per phase at most: no progress lines while it was idle.
    expect(r.stdout.split('\n').filter((l) => l.startsWith('replay')).length).toBeLessThanOrEqual(10)
  })

  it("runs the processor example as it is, with Node's type stripping (node processor.ts), until SIGTERM", async () => {
    const r = await runProcessorExample(strip, [join(app, 'src', 'processor.ts')])
    expect(r).toMatchObject({ code: 0, stderr: '' })
    expect(r.stdout).toContain('replay 1000 / 1000 events done\n')
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

  it.each([
    { entry: 'tidemark/kafka', peer: 'kafkajs', code: 'TIDEMARK_KAFKA_CLIENT_MISSING' },
    { entry: 'tidemark/prometheus', peer: 'prom-client', code: 'TIDEMARK_PROMETHEUS_CLIENT_MISSING' },
  ])('without $peer, $entry fails to load with $code naming what to install: import(), require() and a static import', async ({ entry, peer, code }) => {
    const message = `${entry} needs ${peer}, an optional peer dependency of tidemark that is not installed: npm install ${peer}`
    const imported = await inApp(process.execPath, ['--input-type=module', '-e', `await import('${entry}').catch((e) => console.log(e.code, e.message))`])
    expect(imported).toMatchObject({ code: 0, stdout: `${code} ${message}\n`, stderr: '' })
    const required = await inApp(process.execPath, ['--input-type=commonjs', '-e', `try { require('${entry}') } catch (e) { console.log(e.code, e.message) }`])
    expect(required).toMatchObject({ code: 0, stdout: `${code} ${message}\n`, stderr: '' })
    // As the README's examples import it: uncaught, Node prints the error, its code and exits 1.
    const file = join(app, `static-${peer}.js`)
    await writeFile(file, `import '${entry}'\n`)
    const statically = await inApp(process.execPath, [file])
    expect(statically.code).toBe(1)
    expect(statically.stderr).toContain(`TidemarkError: ${message}`)
    expect(statically.stderr).toContain(`code: '${code}'`)
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

  it('compiles the consumer example with kafkajs installed, and runs it (compiled, and as it is under type stripping) on the Kafka mock until SIGTERM, which hands off and exits 0', async () => {
    const install = await inApp('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', `kafkajs@${await devVersion('kafkajs')}`])
    expect(install.code).toBe(0)
    const compiled = await inApp(process.execPath, [join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.kafka.json'])
    expect(compiled).toMatchObject({ code: 0, stdout: '' })

    const mock = await run('bash', [join(root, 'scripts', 'services', 'kafka-mock.sh'), 'start'], { env: { ...process.env, TIDEMARK_WATCH_PID: String(process.pid) } })
    const brokers = /brokers=(\S+)/.exec(mock.stdout)![1]!
    const mockDir = /dir=(\S+)/.exec(mock.stdout)![1]!
    try {
      // 12 words over the 4 partitions of the topic the example reads: offsets 0, 1, 2 in each.
      const words = ['tide', 'mark', 'tide', 'sea', 'tide', 'mark', 'moon', 'sea', 'tide', 'wave', 'mark', 'tide']
      const producer = new Kafka({ brokers: brokers.split(','), logLevel: logLevel.NOTHING }).producer()
      await producer.connect()
      await producer.send({ topic: 'words', messages: words.map((word, i) => ({ partition: i % 4, value: JSON.stringify({ word }) })) })
      await producer.disconnect()

      const compiledRun = await runConsumerExample(app, [join(out, 'consumer.js')], brokers)
      expect(compiledRun).toMatchObject({ code: 0, stderr: '' })

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

      // The same source under type stripping, with state and snapshots of its own (in strip/): it restores nothing and counts every word again.
      const strippedRun = await runConsumerExample(strip, [join(app, 'src', 'consumer.ts')], brokers)
      expect(strippedRun).toMatchObject({ code: 0, stderr: '' })
    } finally {
      await run('bash', [join(root, 'scripts', 'services', 'kafka-mock.sh'), 'stop', mockDir])
    }
  // Two runs, each a first join of the group on the mock (whole seconds a round), and an npm install.
  }, 300_000)
})
