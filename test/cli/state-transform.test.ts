import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { fixture, handlerModule, lines, tidemark } from './helpers.js'

const INDEX = pathToFileURL(join(import.meta.dirname, '../../src/index.ts')).href

/** A --module: the fixture's counts renamed to tallies with upper-case keys; visits copied. */
function renameModule(dir: string): string {
  const path = join(dir, 'rename.mjs')
  writeFileSync(path, `import { valueState, mapState } from ${JSON.stringify(INDEX)}
export default {
  sourceStates: [valueState('counts'), mapState('visits')],
  states: [valueState('tallies'), mapState('visits')],
  transform: (e) => e.state === 'counts' ? { ...e, state: 'tallies', key: typeof e.key === 'string' ? e.key.toUpperCase() : e.key } : e,
}
`)
  return path
}

/** A --module that copies the fixture's states as they are. */
function copyModule(dir: string): string {
  const path = join(dir, 'copy.mjs')
  writeFileSync(path, `import { valueState, mapState } from ${JSON.stringify(INDEX)}
export const states = [valueState('counts'), mapState('visits')]
`)
  return path
}

const dump = async (url: string, job: string): Promise<unknown[]> => {
  const result = await tidemark('state', 'dump', url, '--job', job, '--partition', '0')
  expect(result.code).toBe(0)
  return lines(result.stdout)
}

describe('tidemark state transform', () => {
  it('writes the transformed state as a new job\'s snapshot with the source\'s positions, prints one JSON line, and refuses a target with snapshots unless --replace', async () => {
    const { dir, url, snapshotIds } = await fixture()
    const module = renameModule(dir)
    const result = await tidemark('state', 'transform', url, '--job', 'j', '--partition', '0', '--to-job', 'j2', '--module', module)
    expect(result.code).toBe(0)
    const [printed] = lines(result.stdout) as Array<Record<string, unknown>>
    expect(printed).toMatchObject({
      job: 'j2', partition: '0', positions: [{ topic: 't', partition: 0, offset: '43' }],
      source: { job: 'j', partition: '0', snapshot: snapshotIds[0], offset: null }, read: 6, written: 6, states: { tallies: 4, visits: 2 },
    })
    expect(result.stderr).toContain('claimed j2/0 (epoch 1)')
    expect(result.stderr).toContain(`j2/0: snapshot ${(printed!.snapshot as { id: string }).id} (epoch 1) at t/0@43; 6 read, 6 written`)
    expect(await dump(url, 'j2')).toEqual([
      { state: 'tallies', key: 'A', value: 3 },
      { state: 'tallies', key: 'AB', value: 2 },
      { state: 'tallies', key: 'B', value: 3 },
      { state: 'tallies', keyBase64: '//4=', value: 7 },
      { state: 'visits', key: 'u1', subKey: 'x', value: 5 },
      { state: 'visits', key: 'u2', subKey: 'y', value: 6 },
    ])

    const again = await tidemark('state', 'transform', url, '--job', 'j', '--partition', '0', '--to-job', 'j2', '--module', module)
    expect(again.code).toBe(1)
    expect(again.stderr).toMatch(/^tidemark: TIDEMARK_TRANSFORM_TARGET_NOT_EMPTY: j2\/0\/ in file:.* already holds 1 snapshot/)
    expect((await tidemark('state', 'transform', url, '--job', 'j', '--partition', '0', '--to-job', 'j2', '--module', module, '--replace')).code).toBe(0)
  })

  it('as of an offset, replaying the file log through --handler; into the same job, as its newest snapshot', async () => {
    const { dir, url, log, snapshotIds } = await fixture()
    const result = await tidemark('state', 'transform', url, '--job', 'j', '--partition', '0', '--offset', '46', '--log', log, '--topic', 't', '--handler', handlerModule(dir), '--to-job', 'j', '--module', copyModule(dir))
    expect(result.code).toBe(0)
    const [printed] = lines(result.stdout) as Array<{ snapshot: { id: string }; positions: unknown }>
    expect(printed).toMatchObject({ positions: [{ topic: 't', partition: 0, offset: '46' }], source: { snapshot: snapshotIds[0], offset: '46', replayed: 3 } })
    const list = await tidemark('snapshots', 'list', url, '--job', 'j', '--partition', '0', '--json')
    expect((JSON.parse(list.stdout) as Array<{ id: string }>)[0]!.id).toBe(printed!.snapshot.id)
    // Events 44 (a), 45 (b), 46 (a) on top of the snapshot at 43.
    expect((await dump(url, 'j')).slice(0, 3)).toEqual([
      { state: 'counts', key: 'a', value: 5 },
      { state: 'counts', key: 'ab', value: 2 },
      { state: 'counts', key: 'b', value: 4 },
    ])
  })

  it('refuses mistakes in the command line with exit 2 and the usage', async () => {
    const { dir, url, log } = await fixture()
    const module = copyModule(dir)
    const base = [url, '--job', 'j', '--partition', '0']
    const cases: Array<[string[], RegExp]> = [
      [[...base, '--module', module], /missing --to-job/],
      [[...base, '--to-job', 'k'], /missing --module/],
      [[...base, '--to-job', 'k', '--module', join(dir, 'nothing.mjs')], /--module .*nothing\.mjs: ENOENT/],
      [[...base, '--to-job', 'k', '--module', module, '--log', log], /--log goes with --offset/],
      [[...base, '--to-job', 'k', '--module', module, '--offset', '4', '--snapshot', '0000000001-000000000001'], /either --snapshot or --offset/],
      [[url, '--job', 'j', '--partition', 'orders-3', '--to-job', 'k', '--module', module, '--offset', '4', '--log', log, '--topic', 't', '--handler', module], /a consumer group's partition/],
      [[...base, '--to-job', 'k', '--to-partition', '../x', '--module', module], /--to-partition must be a partition/],
      [[...base, '--to-job', 'k', '--module', handlerModule(dir).replace('handler.mjs', 'nostates.mjs')], /nostates\.mjs: ENOENT/],
    ]
    for (const [args, message] of cases) {
      const result = await tidemark('state', 'transform', ...args)
      expect(result.code, args.join(' ')).toBe(2)
      expect(result.stderr).toMatch(message)
    }
    const noStates = join(dir, 'empty.mjs')
    writeFileSync(noStates, 'export const transform = (e) => e\n')
    const refused = await tidemark('state', 'transform', ...base, '--to-job', 'k', '--module', noStates)
    expect(refused.code).toBe(2)
    expect(refused.stderr).toMatch(/must export an array states/)
  })
})

describe('tidemark state bootstrap', () => {
  it('bootstraps a job from what state dump printed: the new job dumps the same, at the positions given', async () => {
    const { dir, url } = await fixture()
    const file = join(dir, 'records.jsonl')
    const dumped = await tidemark('state', 'dump', url, '--job', 'j', '--partition', '0')
    writeFileSync(file, dumped.stdout)
    const result = await tidemark('state', 'bootstrap', url, '--job', 'jb', '--partition', '0', '--from', file, '--module', copyModule(dir), '--position', 't/0@43', '--batch-size', '2')
    expect(result.code).toBe(0)
    expect(lines(result.stdout)).toMatchObject([{ job: 'jb', partition: '0', source: { records: true }, read: 6, written: 6, positions: [{ topic: 't', partition: 0, offset: '43' }] }])
    expect(await dump(url, 'jb')).toEqual(lines(dumped.stdout))
    const show = await tidemark('snapshots', 'list', url, '--job', 'jb', '--partition', '0', '--json')
    expect(JSON.parse(show.stdout)).toMatchObject([{ positions: [{ topic: 't', partition: 0, offset: '43' }] }])

    for (const [args, message] of [
      [['--position', 'sales-0-43'], /--position must be TOPIC\/PARTITION@OFFSET/],
      [['--from', join(dir, 'none.jsonl')], /--from .*none\.jsonl: ENOENT/],
    ] as Array<[string[], RegExp]>) {
      const bad = await tidemark('state', 'bootstrap', url, '--job', 'jc', '--partition', '0', '--from', file, '--module', copyModule(dir), ...args)
      expect(bad.code).toBe(2)
      expect(bad.stderr).toMatch(message)
    }
    writeFileSync(file, '{"state":"counts","key":"a"}\n')
    const invalid = await tidemark('state', 'bootstrap', url, '--job', 'jc', '--partition', '0', '--from', file, '--module', copyModule(dir))
    expect(invalid.code).toBe(1)
    expect(invalid.stderr).toMatch(/\ntidemark: TIDEMARK_TRANSFORM_ENTRY_INVALID: .*records\.jsonl line 1: the record needs exactly one of value and valueBase64\n$/)
  })
})
