// Arguments as a user types them: relative paths, malformed values (exit 2,
// never a raw exit 1), and a --job or --partition that names nothing.
import { existsSync, readdirSync } from 'node:fs'
import { join, relative } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { tempDir } from '../helpers/tmp.js'
import { fixture, handlerModule, lines, tidemark } from './helpers.js'

/** The path as relative to the working directory, which is what a user types: `./data/sales-log`. */
const rel = (path: string): string => relative(process.cwd(), path)

describe('relative paths', () => {
  it('every command that takes a path resolves a relative one against the working directory', async () => {
    const { dir, store, url, log, snapshotIds } = await fixture()
    const P = ['--job', 'j', '--partition', '0']
    expect(rel(log)).not.toMatch(/^\//)

    expect(await tidemark('positions', rel(store), '--json')).toMatchObject({ code: 0, stdout: expect.stringContaining('"offset": "43"') })
    expect(lines((await tidemark('state', 'get', rel(store), 'a', '--state', 'counts')).stdout)).toEqual([{ state: 'counts', key: 'a', value: 3 }])
    expect(lines((await tidemark('state', 'dump', rel(store), '--state', 'counts', '--prefix', 'a')).stdout)).toHaveLength(2)

    const info = await tidemark('log', 'info', rel(log), '--json')
    expect(info).toMatchObject({ code: 0, stderr: '' })
    expect(JSON.parse(info.stdout)).toMatchObject({ dir: log, entries: '50' })
    expect((await tidemark('log', 'tail', rel(log), '-n', '1')).stdout).toBe('49\t{"k":"b"}\n')
    expect(await tidemark('log', 'append', rel(log), '{"k":"a"}')).toMatchObject({ code: 0, stdout: `appended 1 entries to ${log}: revisions 50 to 50\n` })
    expect(await tidemark('log', 'append', rel(join(dir, 'new-log')), 'x', '--create')).toMatchObject({ code: 0 })
    expect(existsSync(join(dir, 'new-log'))).toBe(true)

    // Point in time: --log and --handler relative too. a: 3 at offset 43, then 45 (even) adds 1.
    const atOffset = await tidemark('state', 'get', url, 'a', '--state', 'counts', ...P, '--offset', '45', '--log', rel(log), '--topic', 't', '--handler', rel(handlerModule(dir)))
    expect(atOffset).toMatchObject({ code: 0 })
    expect(lines(atOffset.stdout)).toEqual([{ state: 'counts', key: 'a', value: 4 }])

    const restored = await tidemark('restore', url, ...P, '--target', rel(join(dir, 'restored')), '--json')
    expect(restored).toMatchObject({ code: 0 })
    expect(JSON.parse(restored.stdout)).toMatchObject({ target: join(dir, 'restored'), source: 'snapshot' })

    // A snapshot store as a directory path, relative too: the same as its file:// URL.
    const snapshotsDir = rel(join(dir, 'snapshots'))
    expect(snapshotsDir).not.toMatch(/^(\/|file:)/)
    const byUrl = async (...argv: string[]) => (await tidemark(...argv.map((a) => (a === snapshotsDir ? url : a)))).stdout
    const storeCommands: string[][] = [
      ['jobs', snapshotsDir], ['snapshots', 'list', snapshotsDir, ...P], ['snapshots', 'show', snapshotsDir, snapshotIds[0]!, ...P, '--json'],
      ['snapshots', 'verify', snapshotsDir, snapshotIds[1]!, ...P, '--json'], ['gc', snapshotsDir, ...P, '--dry-run', '--json'],
      ['state', 'dump', snapshotsDir, ...P], ['state', 'get', snapshotsDir, 'a', '--state', 'counts', ...P, '--snapshot', snapshotIds[1]!],
    ]
    for (const argv of storeCommands) {
      const result = await tidemark(...argv)
      expect(result, argv.join(' ')).toMatchObject({ code: 0 })
      expect(result.stdout, argv.join(' ')).not.toBe('')
      expect(result.stdout, argv.join(' ')).toBe(await byUrl(...argv))
    }
    const fromDir = await tidemark('restore', snapshotsDir, ...P, '--target', rel(join(dir, 'restored-from-dir')), '--json')
    expect(JSON.parse(fromDir.stdout)).toMatchObject({ target: join(dir, 'restored-from-dir'), source: 'snapshot', snapshot: { id: snapshotIds[0] } })
    // A mistyped directory fails as a mistyped file:// URL does, and creates nothing.
    expect(await tidemark('snapshots', 'list', rel(join(dir, 'nothing')), ...P)).toMatchObject({ code: 1, stderr: expect.stringMatching(/^tidemark: TIDEMARK_DFS_STORE_NOT_FOUND: /) })
    expect(existsSync(join(dir, 'nothing'))).toBe(false)

    // replay: its store (--path), handler, source log and outputs.
    const replay = await tidemark('replay', '--job', 'r', '--handler', rel(handlerModule(dir)), '--path', rel(join(dir, 'replay')), '--snapshots', snapshotsDir,
      '--log', rel(log), '--topic', 't', '--partition', '0', '--to', '9', '--output', rel(join(dir, 'out')), '--json')
    expect(replay, replay.stderr).toMatchObject({ code: 0 })
    expect(JSON.parse(replay.stdout)).toMatchObject({ job: 'r', events: 10 })
    expect(readdirSync(dir)).toEqual(expect.arrayContaining(['replay']))
    expect(JSON.parse((await tidemark('jobs', url, '--json')).stdout)).toContainEqual(expect.objectContaining({ job: 'r' }))
  })
})

describe('malformed arguments are usage errors (exit 2)', () => {
  it('--partition must be a partition number or a consumer group\'s <topic>-<partition>, for every command that takes it', async () => {
    const { dir, url } = await fixture()
    const commands = [
      ['snapshots', 'list', url], ['snapshots', 'show', url, '0000000001-000000000001'], ['snapshots', 'verify', url],
      ['restore', url, '--target', join(dir, 'restored')], ['gc', url, '--dry-run'], ['state', 'dump', url],
    ]
    for (const argv of commands) {
      for (const partition of ['abc', '-1', '1.5', '0x1', '', 'src-', '../x', '../x-1', 'src-5/x', '.-1', 'src-1.5', 'a b-1']) {
        const result = await tidemark(...argv, '--job', 'j', `--partition=${partition}`)
        expect(result, `${argv.join(' ')} --partition=${partition}`).toMatchObject({ code: 2, stdout: '' })
        expect(result.stderr).toMatch(partition === '' ? /^tidemark: --partition must not be empty\nusage:\n/ : /^tidemark: --partition must be a partition as `tidemark jobs` lists it: a number \(0\), or a consumer group's <topic>-<partition> \(orders-3\), got "[^"]*"\nusage:\n/)
      }
    }
    expect(readdirSync(dir)).not.toContain('restored')
  })

  it('a snapshot id that is no snapshot id (../../x): restore, state, snapshots show and verify, replay', async () => {
    const { dir, url } = await fixture()
    const P = ['--job', 'j', '--partition', '0']
    const cases: [string[], string][] = [
      [['restore', url, ...P, '--target', join(dir, 'restored'), '--snapshot', '../../x'], '--snapshot'],
      [['state', 'dump', url, ...P, '--snapshot', '../../x'], '--snapshot'],
      [['snapshots', 'show', url, '../../x', ...P], '<ID>'],
      [['snapshots', 'verify', url, '../../x', ...P], '<ID>'],
    ]
    for (const [argv, name] of cases) {
      const result = await tidemark(...argv)
      expect(result, argv.join(' ')).toMatchObject({ code: 2, stdout: '' })
      expect(result.stderr).toMatch(new RegExp(`^tidemark: ${name} must be a snapshot id like 0000000001-000000000042 \\(as \`tidemark snapshots list\` prints them\\), got "\\.\\./\\.\\./x"\nusage:\n`))
    }
    const replay = await tidemark('replay', '--job', 'r', '--handler', handlerModule(dir), '--path', join(dir, 'replay'), '--snapshots', url,
      '--log', join(dir, 'log'), '--topic', 't', '--partition', '0', '--to', '9', '--start-snapshot', '../../x', '--start-job', 'j')
    expect(replay).toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(/^tidemark replay: --start-snapshot must be a snapshot id like 0000000001-000000000042, got "\.\.\/\.\.\/x"\nusage:\n/) })
    const job = await tidemark('replay', '--job', 'a/b', '--handler', handlerModule(dir), '--path', join(dir, 'replay'), '--snapshots', url,
      '--log', join(dir, 'log'), '--topic', 't', '--partition', '0', '--to', '9')
    expect(job).toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(/^tidemark replay: --job: job \('a\/b'\) must not contain '\/'\nusage:\n/) })
    expect(readdirSync(dir)).not.toEqual(expect.arrayContaining(['restored']))
    expect(readdirSync(dir)).not.toEqual(expect.arrayContaining(['replay']))
  })

  it('a --handler that names no file', async () => {
    const { dir, url, log } = await fixture()
    const result = await tidemark('state', 'dump', url, '--job', 'j', '--partition', '0', '--offset', '45', '--log', log, '--topic', 't', '--handler', join(dir, 'missing.mjs'))
    expect(result).toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(/^tidemark: --handler [^\n]*missing\.mjs: ENOENT[^\n]*\nusage:\n/) })
  })
})

describe('a --job or --partition that holds nothing', () => {
  it('tidemark jobs lists the jobs and partitions of a store', async () => {
    const { url, snapshotIds } = await fixture()
    const text = await tidemark('jobs', url)
    expect(text).toEqual({ code: 0, stderr: '', stdout: `job  partition  snapshots  newest\nj    0          2          ${snapshotIds[0]}\n` })
    expect(JSON.parse((await tidemark('jobs', url, '--json')).stdout)).toEqual([{ job: 'j', partition: '0', snapshots: 2, newest: snapshotIds[0] }])
    const empty = pathToFileURL(tempDir()).href
    expect(await tidemark('jobs', empty)).toEqual({ code: 0, stderr: '', stdout: `${empty} holds no jobs\n` })
  })

  it('snapshots list, gc --dry-run, verify, restore and state say which jobs and partitions the store holds', async () => {
    const { dir, url } = await fixture()
    const hint = `the store holds snapshots of job j (partition 0); \`tidemark jobs ${url}\` lists them`
    for (const [job, partition] of [['wrongjob', '0'], ['j', '7']] as const) {
      const P = ['--job', job, '--partition', partition]
      const name = `${job}/${partition}`
      expect(await tidemark('snapshots', 'list', url, ...P)).toEqual({ code: 0, stdout: `no snapshots of ${name}\n`, stderr: `tidemark: ${hint}\n` })
      const gc = await tidemark('gc', url, ...P, '--dry-run')
      expect(gc).toMatchObject({ code: 0, stderr: `tidemark: no snapshots of ${name}; ${hint}\n` })
      expect(gc.stdout).toMatch(/^retained no snapshots\nwould delete 0 manifests, 0 data objects\n/)
      expect(await tidemark('snapshots', 'verify', url, ...P)).toEqual({ code: 1, stdout: '', stderr: `tidemark: TIDEMARK_SNAPSHOT_NOT_FOUND: no snapshots of ${name} to verify; ${hint}\n` })
      // The restore names its CLI flag, not the API's allowEmpty.
      expect(await tidemark('restore', url, ...P, '--target', join(dir, 'restored'))).toEqual({
        code: 1, stdout: '', stderr: `tidemark: TIDEMARK_SNAPSHOT_NOT_FOUND: there are no snapshots of ${name}/ in ${url}; --allow-empty restores an empty store instead; ${hint}\n`,
      })
      expect(await tidemark('state', 'dump', url, ...P)).toEqual({ code: 1, stdout: '', stderr: `tidemark: TIDEMARK_SNAPSHOT_NOT_FOUND: there are no snapshots of ${name}/ in ${url}; ${hint}\n` })
    }
    expect(readdirSync(dir)).not.toContain('restored')
  })
})
