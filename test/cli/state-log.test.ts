import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { openLogForReading } from '../../src/log/existing.js'
import { openFileLog } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { fixture, handlerModule, lines, tidemark, tidemarkWith, tree } from './helpers.js'

const PARTITION = ['--job', 'j', '--partition', '0']

/** The temporary directories state commands make for a snapshot source, to check they are gone afterwards. */
function stateTemps(): string[] {
  return readdirSync(tmpdir()).filter((n) => n.startsWith('tidemark-state-'))
}

describe('state from a store directory', () => {
  it('dump prints every entry as JSON lines, by state and key prefix; get prints one; the store is left as it was', async () => {
    const { store } = await fixture()
    const before = tree(store)
    const all = await tidemark('state', 'dump', store)
    expect(all).toMatchObject({ code: 0, stderr: '' })
    expect(lines(all.stdout)).toEqual([
      { state: 'counts', key: 'a', value: 3 },
      { state: 'counts', key: 'ab', value: 2 },
      { state: 'counts', key: 'b', value: 3 },
      { state: 'counts', keyBase64: Buffer.from([0xff, 0xfe]).toString('base64'), value: 7 },
      { state: 'visits', key: 'u1', subKey: 'x', value: 5 },
      { state: 'visits', key: 'u2', subKey: 'y', value: 6 },
    ])
    expect(lines((await tidemark('state', 'dump', store, '--state', 'counts', '--prefix', 'a')).stdout)).toEqual([
      { state: 'counts', key: 'a', value: 3 },
      { state: 'counts', key: 'ab', value: 2 },
    ])
    expect(lines((await tidemark('state', 'dump', store, '--prefix', 'u2')).stdout)).toEqual([{ state: 'visits', key: 'u2', subKey: 'y', value: 6 }])
    expect(await tidemark('state', 'get', store, 'a', '--state', 'counts')).toEqual({ code: 0, stdout: '{"state":"counts","key":"a","value":3}\n', stderr: '' })
    expect(lines((await tidemark('state', 'get', store, 'u1', '--state', 'visits')).stdout)).toEqual([{ state: 'visits', key: 'u1', subKey: 'x', value: 5 }])
    expect(lines((await tidemark('state', 'get', store, 'u1', '--state', 'visits', '--sub-key', 'x')).stdout)).toEqual([{ state: 'visits', key: 'u1', subKey: 'x', value: 5 }])
    expect(tree(store)).toEqual(before)
  })

  it('get of a key that is not there exits 1; an unknown state exits 1 with TIDEMARK_UNKNOWN_STATE', async () => {
    const { store } = await fixture()
    expect(await tidemark('state', 'get', store, 'zz', '--state', 'counts')).toEqual({ code: 1, stdout: '', stderr: 'tidemark: state "counts" has no key "zz"\n' })
    expect(await tidemark('state', 'get', store, 'u1', '--state', 'visits', '--sub-key', 'nope')).toMatchObject({ code: 1, stdout: '' })
    const unknown = await tidemark('state', 'dump', store, '--state', 'nope')
    expect(unknown).toMatchObject({ code: 1, stdout: '' })
    // The user's store by its path, not the temporary copy the command reads.
    expect(unknown.stderr).toBe(`tidemark: TIDEMARK_UNKNOWN_STATE: state "nope" is not one of the states of ${store} (counts, visits)\n`)
    expect((await tidemark('state', 'get', store, 'u1', '--state', 'nope')).stderr).toBe(`tidemark: TIDEMARK_UNKNOWN_STATE: state "nope" is not one of the states of ${store} (counts, visits)\n`)
  })

  it('never creates a store: a missing path, a regular file and a directory that is not a store exit 1 and are left as they were', async () => {
    const dir = tempDir()
    const missing = join(dir, 'missing')
    const notFound = await tidemark('state', 'dump', missing)
    expect(notFound).toMatchObject({ code: 1, stdout: '' })
    expect(notFound.stderr).toMatch(/^tidemark: TIDEMARK_STORE_NOT_FOUND: [^\n]*\n$/)
    expect(existsSync(missing)).toBe(false)
    writeFileSync(join(dir, 'file'), 'x')
    expect((await tidemark('state', 'get', join(dir, 'file'), 'k', '--state', 's')).stderr).toMatch(/^tidemark: TIDEMARK_STORE_NOT_A_STORE: /)
    mkdirSync(join(dir, 'other'))
    writeFileSync(join(dir, 'other', 'notes.txt'), 'mine')
    expect((await tidemark('state', 'dump', join(dir, 'other'))).stderr).toMatch(/^tidemark: TIDEMARK_STORE_NOT_A_STORE: /)
    expect(readdirSync(dir).sort()).toEqual(['file', 'other'])
    expect(readdirSync(join(dir, 'other'))).toEqual(['notes.txt'])
  })
})

describe('state from a snapshot', () => {
  it('the newest snapshot or --snapshot ID, restored into a temporary directory that is removed; the snapshot store is unchanged', async () => {
    const { dir, url, snapshotIds } = await fixture()
    const before = tree(join(dir, 'snapshots'))
    const temps = stateTemps()
    const newest = await tidemark('state', 'get', url, 'a', '--state', 'counts', ...PARTITION)
    expect(newest).toMatchObject({ code: 0, stdout: '{"state":"counts","key":"a","value":3}\n' })
    expect(newest.stderr).toMatch(/^restore: (\d+)\/\1 bytes$/m)
    const older = await tidemark('state', 'get', url, 'a', '--state', 'counts', ...PARTITION, '--snapshot', snapshotIds[1]!)
    expect(older.stdout).toBe('{"state":"counts","key":"a","value":1}\n')
    expect(tree(join(dir, 'snapshots'))).toEqual(before)
    expect(stateTemps()).toEqual(temps)
  })

  it('at an offset: the newest snapshot at or before it, then the log replayed through the handler up to it', async () => {
    const { dir, url, log, snapshotIds } = await fixture()
    const handler = handlerModule(dir)
    const logBefore = tree(log)
    const at = (offset: string) => ['--offset', offset, '--log', log, '--topic', 't', '--handler', handler, ...PARTITION]
    // Snapshot at 43 (a=3), then events 44 (a), 45 (b), 46 (a): a=5, b=4.
    const result = await tidemark('state', 'dump', url, '--state', 'counts', '--prefix', 'a', ...at('46'))
    expect(result).toMatchObject({ code: 0 })
    expect(lines(result.stdout)).toEqual([{ state: 'counts', key: 'a', value: 5 }, { state: 'counts', key: 'ab', value: 2 }])
    expect(result.stderr).toContain(`state of t/0 as of offset 46: snapshot ${snapshotIds[0]}, 3 events replayed\n`)
    // Offset 42 is before the newest snapshot: the one at 41, then event 42 (a): a=2.
    expect((await tidemark('state', 'get', url, 'a', '--state', 'counts', ...at('42'))).stdout).toBe('{"state":"counts","key":"a","value":2}\n')
    expect(tree(log)).toEqual(logBefore)

    const beyond = await tidemark('state', 'dump', url, ...at('50'))
    expect(beyond).toMatchObject({ code: 1, stdout: '' })
    expect(beyond.stderr).toMatch(/^tidemark: TIDEMARK_POINT_NOT_REACHABLE: offset 50 of t\/0 is at or after the log's tail 50\n$/)
    const noLog = await tidemark('state', 'dump', url, '--offset', '42', '--log', join(dir, 'nolog'), '--topic', 't', '--handler', handler, ...PARTITION)
    expect(noLog).toMatchObject({ code: 1, stderr: expect.stringMatching(/^tidemark: TIDEMARK_LOG_NOT_FOUND: /) })
    expect(existsSync(join(dir, 'nolog'))).toBe(false)
    writeFileSync(join(dir, 'bad.mjs'), 'export const states = []\n')
    const badHandler = await tidemark('state', 'dump', url, '--offset', '42', '--log', log, '--topic', 't', '--handler', join(dir, 'bad.mjs'), ...PARTITION)
    expect(badHandler).toMatchObject({ code: 2, stderr: expect.stringContaining('must export a function handler and an array states') })
  })
})

describe('log', () => {
  it('info and tail read the log without changing it; tail -n, --from and --json', async () => {
    const { log } = await fixture()
    const before = tree(log)
    const info = await tidemark('log', 'info', log, '--json')
    expect(JSON.parse(info.stdout)).toMatchObject({ dir: log, oldest: '0', tail: '50', entries: '50', segments: 1 })
    expect((await tidemark('log', 'info', log)).stdout).toContain('entries   50 (revisions 0 to 49; the next append gets 50)')
    const last = await tidemark('log', 'tail', log, '-n', '2')
    expect(last).toEqual({ code: 0, stdout: '48\t{"k":"a"}\n49\t{"k":"b"}\n', stderr: '' })
    expect((await tidemark('log', 'tail', log)).stdout.split('\n').filter(Boolean)).toHaveLength(10)
    expect(lines((await tidemark('log', 'tail', log, '--from', '3', '-n', '2', '--json')).stdout)).toEqual([
      { revision: '3', value: { k: 'b' } }, { revision: '4', value: { k: 'a' } },
    ])
    expect(tree(log)).toEqual(before)
  })

  it('append adds each argument, or each line of stdin; text and bytes that are not JSON come back as text', async () => {
    const { log } = await fixture()
    expect(await tidemark('log', 'append', log, '{"k":"c"}', 'plain text', '--json')).toEqual({ code: 0, stdout: JSON.stringify({ dir: log, revisions: ['50', '51'] }, null, 2) + '\n', stderr: '' })
    const piped = await tidemarkWith({ stdin: 'one\n\ntwo\r\n' }, 'log', 'append', log)
    expect(piped).toEqual({ code: 0, stdout: `appended 2 entries to ${log}: revisions 52 to 53\n`, stderr: '' })
    expect(lines((await tidemark('log', 'tail', log, '-n', '4', '--json')).stdout)).toEqual([
      { revision: '50', value: { k: 'c' } }, { revision: '51', text: 'plain text' }, { revision: '52', text: 'one' }, { revision: '53', text: 'two' },
    ])
    expect(await tidemarkWith({ stdin: '\n' }, 'log', 'append', log)).toMatchObject({ code: 2, stderr: expect.stringContaining('nothing to append') })
  })

  it('refuses a missing path, a regular file and a directory without a log (TIDEMARK_LOG_NOT_FOUND, exit 1), creating nothing; append --create makes a log', async () => {
    const dir = tempDir()
    const file = join(dir, 'file')
    writeFileSync(file, 'not a log')
    mkdirSync(join(dir, 'empty'))
    for (const [path, why] of [[join(dir, 'missing'), 'it does not exist'], [file, 'it is not a directory'], [join(dir, 'empty'), 'the directory holds no log segment (*.seg)']] as const) {
      for (const argv of [['log', 'info', path], ['log', 'tail', path], ['log', 'append', path, 'x']]) {
        expect(await tidemark(...argv), argv.join(' ')).toEqual({ code: 1, stdout: '', stderr: `tidemark: TIDEMARK_LOG_NOT_FOUND: no file log at ${path}: ${why}\n` })
      }
    }
    await expect(openLogForReading(join(dir, 'missing'))).rejects.toMatchObject({ code: 'TIDEMARK_LOG_NOT_FOUND', retriable: false, details: { path: join(dir, 'missing') } })
    expect(readdirSync(dir).sort()).toEqual(['empty', 'file'])
    expect(readdirSync(join(dir, 'empty'))).toEqual([])
    expect(readFileSync(file, 'utf8')).toBe('not a log')

    const created = join(dir, 'new-log')
    expect((await tidemark('log', 'append', created, 'first', '--create')).code).toBe(0)
    const reopened = await openFileLog(created, { readOnly: true })
    expect(await reopened.tail()).toBe(1n)
    await reopened.close()
  })

  it('tail --from before the oldest entry still held is TIDEMARK_LOG_TRUNCATED (exit 1)', async () => {
    const dir = tempDir()
    const log = await openFileLog(join(dir, 'log'), { segmentBytes: 4096 })
    for (let i = 0; i < 20; i++) await log.append(Buffer.from(`entry ${i} ${'x'.repeat(1000)}`))
    await log.truncate(10n)
    const oldest = await log.oldest()
    await log.close()
    expect(oldest).toBeGreaterThan(0n)
    const result = await tidemark('log', 'tail', join(dir, 'log'), '--from', '0')
    expect(result).toMatchObject({ code: 1, stdout: '', stderr: expect.stringMatching(/^tidemark: TIDEMARK_LOG_TRUNCATED: /) })
    expect((await tidemark('log', 'tail', join(dir, 'log'), '-n', '1')).stdout).toBe(`19\tentry 19 ${'x'.repeat(1000)}\n`)
  })
})
