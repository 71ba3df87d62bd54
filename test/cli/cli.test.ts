import { execFile } from 'node:child_process'
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import { main } from '../../src/cli/main.js'
import { FsSnapshotStore, openFileLog, PartitionStore, Snapshotter, valueState } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'

const run = promisify(execFile)
const cli = (...args: string[]) => run(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '../../src/cli/main.ts'), ...args])

/** Runs main() in this process with captured output: the exit code and what it wrote. */
async function tidemark(...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = ''
  let stderr = ''
  const code = await main(argv, { stdout: { write: (t: string) => (stdout += t) }, stderr: { write: (t: string) => (stderr += t) } })
  return { code, stdout, stderr }
}

/** A partition store with one commit (offset 41) and one snapshot of it, under a fresh temp dir. */
async function fixture(): Promise<{ dir: string; url: string; snapshotId: string }> {
  const dir = tempDir()
  const counts = valueState<number>('counts')
  const store = await PartitionStore.open({ path: join(dir, 'store'), states: [counts] })
  const tx = store.transaction()
  tx.value(counts).put('a', 1)
  await tx.commit({ topic: 't', partition: 0, offset: 41n })
  const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
  const snap = await new Snapshotter({ snapshotStore: snapshots, partitionStore: store, job: 'j', partition: 0 }).takeSnapshot()
  await store.close()
  return { dir, url: pathToFileURL(join(dir, 'snapshots')).href, snapshotId: snap.id }
}

/** Names, sizes and mtimes of everything under dir: equal before and after means nothing was changed. */
function tree(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).sort().map((name) => {
    const s = statSync(join(dir, name))
    return `${name} ${s.isDirectory() ? 'dir' : s.size} ${s.mtimeMs}`
  })
}

const USAGE_LINE = /^usage:$/m

it('lists positions and snapshots, restores a snapshot and collects garbage', async () => {
  const { dir, url, snapshotId } = await fixture()
  const positions = JSON.parse((await cli('positions', join(dir, 'store'))).stdout)
  expect(positions.positions).toEqual([{ topic: 't', partition: 0, offset: '41' }])
  const listed = JSON.parse((await cli('snapshots', url, '--job', 'j', '--partition', '0')).stdout)
  expect(listed).toMatchObject([{ id: snapshotId, positions: [{ offset: '41' }] }])
  const restored = await cli('restore', url, '--job', 'j', '--partition', '0', '--target', join(dir, 'restored'))
  expect(JSON.parse(restored.stdout)).toMatchObject({ source: 'snapshot', positions: [{ offset: '41' }] })
  expect(restored.stderr).toContain('bytes')
  const gc = JSON.parse((await cli('gc', url, '--job', 'j', '--partition', '0', '--retain', '1')).stdout)
  expect(gc.retained).toEqual([snapshotId])
  await expect(cli('restore', url, '--job', 'j')).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('missing --partition') })
  // A failed command exits 1 from the bin too, with one line and no usage.
  await expect(cli('snapshots', `${url}-missing`, '--job', 'j', '--partition', '0')).rejects.toMatchObject({
    code: 1, stdout: '', stderr: expect.stringMatching(/^tidemark: TIDEMARK_DFS_STORE_NOT_FOUND: [^\n]*\n$/),
  })
})

describe('usage', () => {
  it('prints the usage to stderr and exits 2 on no arguments; --help prints it to stdout and exits 0', async () => {
    await expect(cli()).rejects.toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(/^usage:\n/) })
    const help = await tidemark('--help')
    expect(help).toMatchObject({ code: 0, stderr: '' })
    expect(help.stdout).toMatch(/^usage:\n/)
    expect(await tidemark('restore', '-h')).toMatchObject({ code: 0, stdout: help.stdout })
  })

  it('refuses unknown options, commands and arguments, and options of another command, with the usage (exit 2)', async () => {
    const dir = tempDir()
    const url = pathToFileURL(dir).href
    const cases: [string[], string | RegExp][] = [
      [['positions', dir, '--bogus'], "Unknown option '--bogus'"],
      [['snapshots', url, '--job', 'j', '--partition'], "Option '--partition <value>' argument missing"],
      [['frobnicate', dir], 'unknown command "frobnicate"'],
      [['toString', dir], 'unknown command "toString"'],
      [['positions', dir, 'extra'], 'unexpected argument "extra"'],
      [['restore', url, '--job', 'j', '--partition', '0', '--target', join(dir, 'r'), '--retain', '3'], 'restore takes no option --retain'],
      [['positions', dir, '--job', 'j'], 'positions takes no option --job'],
      [['snapshots', url, '--job', 'a/b', '--partition', '0'], /^tidemark: --job "a\/b" --partition "0": /],
      [['restore', url, '--job', 'j', '--partition', '0', '--target', ''], '--target must not be empty'],
      [['gc', url, '--job', 'j', '--partition', '0', '--grace-ms=-5'], '--grace-ms must be an integer of at least 0, got "-5"'],
      [['snapshots', 'file:relative/dir', '--job', 'j', '--partition', '0'], "snapshot store URL 'file:relative/dir' is not absolute"],
    ]
    for (const [argv, message] of cases) {
      const result = await tidemark(...argv)
      expect(result, argv.join(' ')).toMatchObject({ code: 2, stdout: '' })
      expect(result.stderr, argv.join(' ')).toMatch(typeof message === 'string' ? `tidemark: ${message}` : message)
      expect(result.stderr).toMatch(USAGE_LINE)
    }
    expect(readdirSync(dir)).toEqual([])
  })

  it('refuses --retain below 1 rather than reading it as 1, and deletes nothing', async () => {
    const { url, snapshotId } = await fixture()
    for (const retain of ['0', '-1', '1.5', '', 'two']) {
      const result = await tidemark('gc', url, '--job', 'j', '--partition', '0', `--retain=${retain}`)
      expect(result).toMatchObject({ code: 2, stdout: '' })
      expect(result.stderr).toContain(`tidemark: --retain must be an integer of at least 1, got ${JSON.stringify(retain)}\n`)
    }
    const listed = await tidemark('snapshots', url, '--job', 'j', '--partition', '0')
    expect(JSON.parse(listed.stdout)).toMatchObject([{ id: snapshotId }])
  })
})

describe('failures', () => {
  it('snapshots, restore and gc refuse a snapshot store URL that does not exist or is not a directory (exit 1), creating nothing', async () => {
    const dir = tempDir()
    const file = join(dir, 'file')
    writeFileSync(file, 'not a store')
    for (const path of [join(dir, 'missing'), file]) {
      const url = pathToFileURL(path).href
      for (const argv of [
        ['snapshots', url, '--job', 'j', '--partition', '0'],
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
