import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { openFileLog } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { cli, fixture, handlerModule, tidemark, tree } from './helpers.js'

const USAGE_LINE = /^usage:$/m

it('positions, snapshots list, restore and gc with --json', async () => {
  const { dir, url, snapshotIds } = await fixture()
  const positions = JSON.parse((await tidemark('positions', join(dir, 'store'), '--json')).stdout)
  expect(positions.positions).toEqual([{ topic: 't', partition: 0, offset: '43' }])
  const listed = JSON.parse((await tidemark('snapshots', 'list', url, '--job', 'j', '--partition', '0', '--json')).stdout)
  expect(listed).toMatchObject([{ id: snapshotIds[0], positions: [{ offset: '43' }] }, { id: snapshotIds[1], positions: [{ offset: '41' }] }])
  const restored = await tidemark('restore', url, '--job', 'j', '--partition', '0', '--target', join(dir, 'restored'), '--json')
  expect(JSON.parse(restored.stdout)).toMatchObject({ source: 'snapshot', positions: [{ offset: '43' }] })
  // Not a terminal: plain progress lines, no bar.
  expect(restored.stderr).toMatch(/^restore: \d+\/\d+ bytes$/m)
  expect(restored.stderr).not.toContain('\u001b')
  const gc = JSON.parse((await tidemark('gc', url, '--job', 'j', '--partition', '0', '--retain', '1', '--json')).stdout)
  expect(gc).toMatchObject({ dryRun: false, retained: [snapshotIds[0]], deletedManifests: [expect.stringContaining(snapshotIds[1]!)] })
})

it('the bin exits 0, 2 and 1 as documented, with errors on stderr', async () => {
  const { version } = JSON.parse(readFileSync(join(import.meta.dirname, '../../package.json'), 'utf8')) as { version: string }
  const missing = pathToFileURL(join(tempDir(), 'missing')).href
  // Three processes at once: each spends most of its time loading tsx.
  await Promise.all([
    expect(cli(['--version'])).resolves.toEqual({ stdout: `${version}\n`, stderr: '' }),
    expect(cli(['restore', 'file:///nowhere', '--job', 'j'])).rejects.toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(/^tidemark: missing --partition\nusage:\n/) }),
    expect(cli(['snapshot', 'list', 'file:///nowhere', '--job', 'j', '--partition', '0'])).rejects.toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(/^tidemark: unknown command "snapshot"; did you mean "snapshots"\?\nusage:\n/) }),
    // A failed command: one line and no usage.
    expect(cli(['snapshots', 'list', missing, '--job', 'j', '--partition', '0'])).rejects.toMatchObject({
      code: 1, stdout: '', stderr: expect.stringMatching(/^tidemark: TIDEMARK_DFS_STORE_NOT_FOUND: [^\n]*\n$/),
    }),
  ])
})

describe('usage', () => {
  it('prints the usage to stderr and exits 2 on no arguments; --help prints it to stdout and exits 0', async () => {
    expect(await tidemark()).toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(/^usage:\n/) })
    const help = await tidemark('--help')
    expect(help).toMatchObject({ code: 0, stderr: '' })
    expect(help.stdout).toMatch(/^usage:\n/)
    for (const name of ['snapshots', 'restore', 'gc', 'state', 'log', 'positions', 'replay']) expect(help.stdout).toMatch(new RegExp(`^  ${name} +\\S`, 'm'))
  })

  it('--help per command prints that command\'s usage on stdout (exit 0), also after a subcommand', async () => {
    const cases: [string[], string][] = [
      [['restore', '-h'], 'tidemark restore <snapshot-store-url>'],
      [['gc', '--help'], '--dry-run'],
      [['positions', '--help'], 'tidemark positions <store-dir>'],
      [['snapshots', '--help'], 'tidemark snapshots verify'],
      [['snapshots', 'verify', '--help'], 'tidemark snapshots verify'],
      [['state', 'dump', '--help'], 'tidemark state dump <source>'],
      [['log', '--help'], 'tidemark log append'],
      [['log', 'tail', 'x', '-h'], 'tidemark log tail'],
      [['replay', '--help'], 'tidemark replay --job NEW_JOB'],
    ]
    for (const [argv, text] of cases) {
      const result = await tidemark(...argv)
      expect(result, argv.join(' ')).toMatchObject({ code: 0, stderr: '' })
      expect(result.stdout, argv.join(' ')).toMatch(/^usage:\n/)
      expect(result.stdout, argv.join(' ')).toContain(text)
    }
  })

  it('--version prints the package version (exit 0)', async () => {
    const { version } = JSON.parse(readFileSync(join(import.meta.dirname, '../../package.json'), 'utf8')) as { version: string }
    expect(await tidemark('--version')).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' })
    expect(await tidemark('--version', 'x')).toMatchObject({ code: 2, stdout: '' })
  })

  it('refuses unknown options, commands and arguments, and options of another command, with the usage (exit 2)', async () => {
    const dir = tempDir()
    const url = pathToFileURL(dir).href
    const cases: [string[], string | RegExp][] = [
      [['positions', dir, '--bogus'], "Unknown option '--bogus'"],
      [['snapshots', 'list', url, '--job', 'j', '--partition'], "Option '--partition <value>' argument missing"],
      [['frobnicate', dir], 'unknown command "frobnicate"\nusage:'],
      [['snapshot', 'list', url, '--job', 'j', '--partition', '0'], 'unknown command "snapshot"; did you mean "snapshots"?\nusage:'],
      [['Jobs', url], 'unknown command "Jobs"; did you mean "jobs"?\nusage:'],
      [['restor', url], 'unknown command "restor"; did you mean "restore"?\nusage:'],
      [['snapshots', 'lsit', url], 'unknown snapshots subcommand "lsit"; did you mean "list"?; expected list, show, verify'],
      [['state', 'dmup', url], 'unknown state subcommand "dmup"; did you mean "dump"?; expected get, dump'],
      [['toString', dir], 'unknown command "toString"'],
      [['--bogus'], 'unknown option "--bogus" before the command'],
      [['positions', dir, 'extra'], 'unexpected argument "extra"'],
      [['positions'], 'missing <store-dir>'],
      [['restore', url, '--job', 'j', '--partition', '0', '--target', join(dir, 'r'), '--retain', '3'], "Unknown option '--retain'"],
      [['positions', dir, '--job', 'j'], "Unknown option '--job'"],
      [['snapshots', 'list', url, '--job', 'a/b', '--partition', '0'], /^tidemark: --job "a\/b" --partition "0": /],
      [['restore', url, '--job', 'j', '--partition', '0', '--target', ''], '--target must not be empty'],
      [['gc', url, '--job', 'j', '--partition', '0', '--grace-ms=-5'], '--grace-ms must be a non-negative integer, got "-5"'],
      [['snapshots', 'list', 'file:relative/dir', '--job', 'j', '--partition', '0'], "snapshot store URL 'file:relative/dir' is not absolute"],
      [['snapshots', 'file:///x', '--job', 'j', '--partition', '0'], 'unknown snapshots subcommand "file:///x"; expected list, show, verify'],
      [['snapshots'], 'missing subcommand: list, show, verify'],
      [['snapshots', 'verify', url, 'ID', '--all', '--job', 'j', '--partition', '0'], 'give either <ID> or --all, not both'],
      [['snapshots', 'show', url, '--job', 'j', '--partition', '0'], 'missing <ID>'],
      [['state', 'get', dir, '--state', 's'], 'missing <KEY>'],
      [['state', 'get', dir, 'k'], 'missing --state'],
      [['state', 'dump', dir, '--snapshot', '0000000001-000000000001'], '--snapshot is for a snapshot store source (with --job and --partition), not a store directory'],
      [['state', 'dump', dir, '--job', 'j'], 'missing --partition'],
      [['state', 'dump', url, '--job', 'j', '--partition', '0', '--offset=-1', '--log', dir, '--topic', 't', '--handler', 'h.mjs'], '--offset must be a non-negative integer, got "-1"'],
      [['state', 'dump', url, '--job', 'j', '--partition', '0', '--offset', '5', '--topic', 't', '--handler', 'h.mjs'], 'missing --log'],
      [['state', 'dump', url, '--job', 'j', '--partition', '0', '--log', dir], '--log goes with --offset'],
      [['state', 'dump', url, '--job', 'j', '--partition', '0', '--offset', '5', '--snapshot', 'x'], 'give either --snapshot or --offset, not both'],
      [['state', 'dump', 'file:relative/dir', '--job', 'j', '--partition', '0'], "snapshot store URL 'file:relative/dir' is not absolute"],
      [['state', 'frob'], 'unknown state subcommand "frob"; expected get, dump'],
      [['log', 'tail', dir, '-n', 'x'], '-n must be a non-negative integer, got "x"'],
      [['log', 'tail', dir, '--from', 'abc'], '--from must be a non-negative integer, got "abc"'],
      [['log', 'info', dir, '--follow'], "Unknown option '--follow'"],
      [['log', 'info'], 'missing <log-dir>'],
    ]
    for (const [argv, message] of cases) {
      const result = await tidemark(...argv)
      expect(result, argv.join(' ')).toMatchObject({ code: 2, stdout: '' })
      expect(result.stderr, argv.join(' ')).toMatch(typeof message === 'string' ? `tidemark: ${message}` : message)
      expect(result.stderr).toMatch(USAGE_LINE)
    }
    expect(readdirSync(dir)).toEqual([])
    // replay parses its own options (src/cli/commands/replay.ts), with the same exit code and usage.
    const replay = await tidemark('replay', '--bogus')
    expect(replay).toMatchObject({ code: 2, stdout: '', stderr: expect.stringContaining("Unknown option '--bogus'") })
    expect(replay.stderr).toMatch(USAGE_LINE)
  })

  it('refuses --retain below 1 rather than reading it as 1, and deletes nothing', async () => {
    const { url, snapshotIds } = await fixture()
    for (const retain of ['0', '-1', '1.5', '', 'two']) {
      const result = await tidemark('gc', url, '--job', 'j', '--partition', '0', `--retain=${retain}`)
      expect(result).toMatchObject({ code: 2, stdout: '' })
      expect(result.stderr).toContain(`tidemark: --retain must be an integer of at least 1, got ${JSON.stringify(retain)}\n`)
    }
    const listed = await tidemark('snapshots', 'list', url, '--job', 'j', '--partition', '0', '--json')
    expect(JSON.parse(listed.stdout)).toMatchObject(snapshotIds.map((id) => ({ id })))
  })
})

describe('failures', () => {
  it('snapshots, restore, gc and state refuse a snapshot store URL that does not exist or is not a directory (exit 1), creating nothing', async () => {
    const dir = tempDir()
    const file = join(dir, 'file')
    writeFileSync(file, 'not a store')
    for (const path of [join(dir, 'missing'), file]) {
      const url = pathToFileURL(path).href
      for (const argv of [
        ['snapshots', 'list', url, '--job', 'j', '--partition', '0'],
        ['snapshots', 'show', url, '0000000001-000000000001', '--job', 'j', '--partition', '0'],
        ['snapshots', 'verify', url, '--all', '--job', 'j', '--partition', '0'],
        ['state', 'dump', url, '--job', 'j', '--partition', '0'],
        ['restore', url, '--job', 'j', '--partition', '0', '--target', join(dir, 'restored'), '--allow-empty'],
        ['gc', url, '--job', 'j', '--partition', '0'],
      ]) {
        const result = await tidemark(...argv)
        expect(result, argv.join(' ')).toEqual({ code: 1, stdout: '', stderr: `tidemark: TIDEMARK_DFS_STORE_NOT_FOUND: snapshot store ${url} does not exist: ${path} is not a directory\n` })
      }
    }
    expect(readdirSync(dir)).toEqual(['file'])
    expect(readFileSync(file, 'utf8')).toBe('not a store')
  })

  it('a refused restore target exits 1 with the error on one line and no usage', async () => {
    const { dir, url } = await fixture()
    const target = join(dir, 'busy')
    mkdirSync(target)
    writeFileSync(join(target, 'notes.txt'), 'mine')
    const result = await tidemark('restore', url, '--job', 'j', '--partition', '0', '--target', target)
    expect(result).toMatchObject({ code: 1, stdout: '' })
    expect(result.stderr).toMatch(/^tidemark: TIDEMARK_STORE_NOT_A_STORE: the restore target \S+ is not a partition store[^\n]*\n$/)
    expect(readdirSync(target)).toEqual(['notes.txt'])
  })

  it('positions never creates a store: a missing path or a directory that is not a store exits 1 and is left as it was', async () => {
    const dir = tempDir()
    const missing = join(dir, 'missing')
    const notFound = await tidemark('positions', missing)
    expect(notFound).toMatchObject({ code: 1, stdout: '' })
    expect(notFound.stderr).toMatch(/^tidemark: TIDEMARK_STORE_NOT_FOUND: [^\n]*\n$/)
    expect(existsSync(missing)).toBe(false)

    const logDir = join(dir, 'log')
    const log = await openFileLog(logDir)
    await log.append(Buffer.from('{"a":1}'))
    await log.close()
    const before = tree(logDir)
    const notAStore = await tidemark('positions', logDir)
    expect(notAStore).toMatchObject({ code: 1, stdout: '' })
    expect(notAStore.stderr).toMatch(/^tidemark: TIDEMARK_STORE_NOT_A_STORE: [^\n]*\n$/)
    expect(tree(logDir)).toEqual(before)

    const file = join(dir, 'file')
    writeFileSync(file, 'x')
    expect((await tidemark('positions', file)).stderr).toMatch(/^tidemark: TIDEMARK_STORE_NOT_A_STORE: /)
    expect(readdirSync(dir).sort()).toEqual(['file', 'log'])
  })
})

/** A --module of state transform and bootstrap for the fixture: its states, copied as they are. */
function statesModule(dir: string): string {
  const path = join(dir, 'states.mjs')
  writeFileSync(path, `import { valueState, mapState } from ${JSON.stringify(pathToFileURL(join(import.meta.dirname, '../../src/index.ts')).href)}
export const states = [valueState('counts'), mapState('visits')]
`)
  return path
}

/** A --from file of state bootstrap: records as state dump prints them. */
function recordsFile(dir: string): string {
  const path = join(dir, 'records.jsonl')
  writeFileSync(path, '{"state":"counts","key":"a","value":3}\n{"state":"visits","key":"u1","subKey":"x","value":5}\n')
  return path
}

it("every command of the first block of docs/cli.md runs (exit 0) against a store the test made", async () => {
  const page = readFileSync(join(import.meta.dirname, '../../docs/cli.md'), 'utf8')
  const block = /^```sh\n([\s\S]*?)^```$/m.exec(page)![1]!
  const { dir, store, url, log, snapshotIds } = await fixture()
  // The page's paths and names, and what stands for them here.
  const names: Record<string, string> = {
    './state/sales-0': store,
    'file:///var/lib/app/snapshots': url,
    's3://snapshots/jobs?endpoint=http://127.0.0.1:9000&forcePathStyle=true': url,
    'sales-totals': 'j',
    '0000000001-000000000007': snapshotIds[0]!,
    './restored': join(dir, 'restored'),
    alice: 'a',
    totals: 'counts',
    '123456': '46',
    './data/sales-log': log,
    sales: 't',
    './dist/sales-handler.js': handlerModule(dir),
    './dist/transform.js': statesModule(dir),
    './dist/states.js': statesModule(dir),
    'sales-by-region': 'j-transformed',
    'sales-by-region-copy': 'j-bootstrapped',
    './by-region.jsonl': recordsFile(dir),
    'sales/0@81234': 't/0@43',
  }
  const commands = block.replace(/\\\n\s*/g, '').split('\n').filter((l) => l.startsWith('tidemark '))
  expect(commands.map((c) => c.split(/\s+/).slice(1, 3).join(' '))).toEqual(expect.arrayContaining([
    'positions ./state/sales-0', 'snapshots list', 'snapshots show', 'snapshots verify', 'state get', 'state dump', 'log info', 'log tail', 'log append', '--version',
  ]))
  for (const command of commands) {
    // Words as a shell splits them: single quotes group and are removed.
    const words = [...command.matchAll(/'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2]!).slice(1)
    const result = await tidemark(...words.map((w) => names[w] ?? w))
    expect(result, command).toMatchObject({ code: 0 })
    expect(result.stdout, command).not.toBe('')
  }
})

describe('bad input, command by command', () => {
  it('a missing path and a regular file exit 1 with the code that names them; a relative file: URL and an unknown flag exit 2 with the usage', async () => {
    const dir = tempDir()
    const missing = join(dir, 'missing')
    const file = join(dir, 'file')
    writeFileSync(file, 'x')
    const P = ['--job', 'j', '--partition', '0']
    // Each command with {} where its path or URL goes.
    const urlCommands: string[][] = [
      ['snapshots', 'list', '{}', ...P], ['snapshots', 'show', '{}', '0000000001-000000000001', ...P], ['snapshots', 'verify', '{}', ...P],
      ['restore', '{}', ...P, '--target', join(dir, 'target')], ['gc', '{}', ...P], ['state', 'dump', '{}', ...P], ['state', 'get', '{}', 'k', '--state', 's', ...P],
    ]
    const storeCommands: string[][] = [['positions', '{}'], ['state', 'dump', '{}'], ['state', 'get', '{}', 'k', '--state', 's']]
    const logCommands: string[][] = [['log', 'info', '{}'], ['log', 'tail', '{}'], ['log', 'append', '{}', 'data']]
    const at = (argv: string[], value: string) => argv.map((a) => (a === '{}' ? value : a))
    const expectations: [string[], number, RegExp][] = []
    for (const argv of urlCommands) {
      expectations.push([at(argv, pathToFileURL(missing).href), 1, /^tidemark: TIDEMARK_DFS_STORE_NOT_FOUND: .* is not a directory\n$/])
      expectations.push([at(argv, pathToFileURL(file).href), 1, /^tidemark: TIDEMARK_DFS_STORE_NOT_FOUND: .* is not a directory\n$/])
      expectations.push([at(argv, 'file:relative/snapshots'), 2, /^tidemark: snapshot store URL 'file:relative\/snapshots' is not absolute; [^\n]*\nusage:\n/])
      expectations.push([[...at(argv, pathToFileURL(dir).href), '--frobnicate'], 2, /^tidemark: Unknown option '--frobnicate'[^\n]*\nusage:\n/])
    }
    for (const argv of storeCommands) {
      expectations.push([at(argv, missing), 1, /^tidemark: TIDEMARK_STORE_NOT_FOUND: [^\n]*\n$/])
      expectations.push([at(argv, file), 1, /^tidemark: TIDEMARK_STORE_NOT_A_STORE: [^\n]*it is not a directory[^\n]*\n$/])
      expectations.push([[...at(argv, dir), '--frobnicate'], 2, /^tidemark: Unknown option '--frobnicate'[^\n]*\nusage:\n/])
    }
    for (const argv of logCommands) {
      expectations.push([at(argv, missing), 1, /^tidemark: TIDEMARK_LOG_NOT_FOUND: [^\n]*it does not exist\n$/])
      expectations.push([at(argv, file), 1, /^tidemark: TIDEMARK_LOG_NOT_FOUND: [^\n]*it is not a directory\n$/])
      expectations.push([[...at(argv, dir), '--frobnicate'], 2, /^tidemark: Unknown option '--frobnicate'[^\n]*\nusage:\n/])
    }
    for (const [argv, code, stderr] of expectations) {
      const result = await tidemark(...argv)
      expect(result, argv.join(' ')).toMatchObject({ code, stdout: '' })
      expect(result.stderr, argv.join(' ')).toMatch(stderr)
    }
    // Nothing was created anywhere: not the missing path, not a target, not a log.
    expect(readdirSync(dir).sort()).toEqual(['file'])
    expect(readFileSync(file, 'utf8')).toBe('x')
  })
})
