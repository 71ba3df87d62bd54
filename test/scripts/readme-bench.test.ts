// scripts/readme-bench.ts: the bench table of docs/benchmarks.md is written
// from the figure files in test/scripts/fixtures/bench-figures, never typed.
// Runs the script as `npm run readme:bench` does, on a copy of the page.
import { execFile } from 'node:child_process'
import { copyFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import { BENCHES, END, readFigures, renderBenchBlock, repoProvenance, START, TARGETS } from '../../scripts/readme-bench.js'
import { tempDir } from '../helpers/tmp.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const SCRIPT = join(ROOT, 'scripts', 'readme-bench.ts')
const FIXTURES = join(ROOT, 'test', 'scripts', 'fixtures', 'bench-figures')

async function generate(doc: string, extra: string[] = []): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, ['--import', 'tsx', SCRIPT, '--figures', FIXTURES, '--doc', doc, ...extra], { cwd: ROOT })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code?: number; stdout: string; stderr: string }
    return { code: e.code ?? -1, stdout: e.stdout, stderr: e.stderr }
  }
}

/** The table row of a bench in the generated block, split into its cells. */
function row(doc: string, bench: string): string[] {
  const block = doc.slice(doc.indexOf(START), doc.indexOf(END))
  const line = block.split('\n').find((l) => l.startsWith(`| \`${bench}\` |`))
  if (line === undefined) throw new Error(`no row for ${bench}`)
  return line.split(' | ')
}

describe('npm run readme:bench', () => {
  it('rewrites the block of a copy of docs/benchmarks.md from the figure files, and nothing else', async () => {
    const page = join(tempDir(), 'benchmarks.md')
    copyFileSync(join(ROOT, 'docs', 'benchmarks.md'), page)
    const before = readFileSync(page, 'utf8')
    const missing = join(tempDir(), 'no-requests.json')

    const result = await generate(page, ['--requests', missing])
    expect(result.stderr).not.toContain('readme:bench')
    expect(result.code).toBe(0)
    const after = readFileSync(page, 'utf8')
    // Outside the markers nothing moved.
    expect(after.slice(0, after.indexOf(START))).toBe(before.slice(0, before.indexOf(START)))
    expect(after.slice(after.indexOf(END))).toBe(before.slice(before.indexOf(END)))

    const [, , commitFigures, commitTarget, commitMeasured] = row(after, 'commit')
    expect(commitFigures).toContain('251,000 events/s vs raw 259,000/s')
    expect(commitFigures).toContain('`ratio` 0.969 (0.951–0.988, 7 rounds)')
    expect(commitTarget).toBe('`ratio` ≥ 0.95: met; `versionedRatio` ≥ 0.97: not measured; `upgradeRatio` ≥ 0.9: not measured')
    expect(commitMeasured).toBe('`npm run bench -- commit`, 2026-12-01 10:00 UTC, commit not recorded, Node v20.20.2, load average at start 1.5 / 1.2 / 1.1 |')

    const [, , restoreFigures, restoreTarget, restoreMeasured] = row(after, 'restore')
    expect(restoreFigures).toContain('3.3 s vs raw 2.8 s')
    expect(restoreTarget).toBe('`ratio` ≤ 1.1: **missed**; `changelogRatio` ≥ 5: met; `peakRssMB` ≤ 256: met')
    expect(restoreMeasured).toContain('Node version not recorded')

    // Figures found in the line of a multi-line result that has them.
    const [, , syncFigures, syncTarget, syncMeasured] = row(after, 'sync')
    expect(syncFigures).toContain('1 writer 850 appends/s vs raw 1,000/s')
    expect(syncTarget).toBe('`appendRatio1` ≥ 0.8: met; `groupRatio4` ≥ 2: met; `groupRatio4Processes` ≥ 2: **missed**; `groupRatio4ProcessesRelay` ≥ 2: not measured')
    expect(syncMeasured).toContain('load average at start 3 / 2.5 / 2')

    // Targets on a quotient of two figures.
    expect(row(after, 'snapshot')[3]).toBe('`stallMsP99` ≤ 100: met; `incrementalUploadBytes` ÷ `newTableBytes` ≤ 2: met (1.012); `uploadMBps` ÷ `rawPutMBps` ≥ 0.8: met (0.9); `peakRssMB` ≤ 256: met')
    // A figure the file lacks: that target is not measured, the others are computed.
    expect(row(after, 'snapshot-throttled')[3]).toBe('`stallMsP99` ≤ 50: not measured; `peakRssMB` ≤ 256: **missed**')

    // No figure file: not measured, and no figure invented.
    for (const bench of ['replay', 'partitions', 'outputs', 'requests']) {
      const [, , figures, target, measured] = row(after, bench)
      expect(figures).toBe('not measured')
      expect(target?.split('; ').every((t) => t.endsWith(': not measured'))).toBe(true)
      expect(measured).toBe('— |')
    }

    // The growth table: one line per size, one per step of keys changed.
    const block = after.slice(after.indexOf(START), after.indexOf(END))
    expect(block).toContain('**How cost grows** (`npm run bench -- growth --sizes 16,32 --incremental-mb 32`, 2026-12-01 11:30 UTC, Node v20.20.2, load average at start 13.85 / 12.67 / 6.76):')
    expect(block).toMatch(/\n\| 16 MiB \(17 MB\) \| 1\.9 s, 8\.5 MB\/s \| 1\.25 s, 12\.9 MB\/s \| 26\.4 \/ 68\.6 MB\/s \| 185 MB \| 13\.85 \/ 12\.67 \/ 6\.76 \|\n/)
    expect(block).toMatch(/\n\| 32 MiB \(33\.9 MB\) \|/)
    expect(block).toContain('| keys changed (of 32 MiB) |')
    expect(block).toMatch(/\n\| 0\.1 % \| 33 \| 43\.8 kB \| 34\.2 kB \| 1\.282 \| 0\.13 % \|/)
    expect(block).toMatch(/\n\| 10 % \| 3,303 \| 3\.3 MB \| 3\.3 MB \| 1\.003 \| 8\.86 % \|/)

    // Generated twice from the same files: the same page.
    expect((await generate(page, ['--requests', missing])).code).toBe(0)
    expect(readFileSync(page, 'utf8')).toBe(after)
  })

  it('exits 2 and leaves the page alone when the markers are missing', async () => {
    const page = join(tempDir(), 'benchmarks.md')
    const text = '# Benchmarks\n\n| bench | typed by hand |\n'
    writeFileSync(page, text)
    const result = await generate(page)
    expect(result.code).toBe(2)
    expect(result.stderr).toContain(`needs exactly one ${START} … ${END} block`)
    expect(readFileSync(page, 'utf8')).toBe(text)
  })
})

describe('renderBenchBlock', () => {
  it('says "not measured" for every bench and the growth table when there is no figure file', () => {
    const block = renderBenchBlock(new Map())
    const rows = block.split('\n').filter((l) => l.startsWith('| `'))
    expect(rows).toHaveLength(Object.keys(TARGETS).length)
    for (const r of rows) expect(r.split(' | ')[2]).toBe('not measured')
    expect(block).toContain('**How cost grows** (`npm run bench -- growth`): not measured.')
    for (const r of rows) expect(r).not.toMatch(/: met|\*\*missed\*\*/)
  })

  it('reads a fallback file only for a bench that has no file in the directory', () => {
    const dir = tempDir()
    const requests = join(dir, 'requests-elsewhere.json')
    writeFileSync(requests, JSON.stringify({ bench: 'requests', putClassPerSnapshot: 2, getClassPerSnapshot: 1, listPerSnapshot: 1 }))
    const figures = readFigures(FIXTURES, { requests, commit: requests })
    expect(figures.get('commit')?.bench).toBe('commit')
    expect(figures.get('requests')?.putClassPerSnapshot).toBe(2)
    const requestsRow = renderBenchBlock(figures).split('\n').find((l) => l.startsWith('| `requests` |'))!
    expect(requestsRow).toContain('`putClassPerSnapshot` ≤ 2: met; `getClassPerSnapshot` ≤ 1: met; `listPerSnapshot` ≤ 0: **missed**')
  })

  it('refuses a figure file that is not a result object', () => {
    const dir = tempDir()
    writeFileSync(join(dir, 'commit.json'), '[1, 2]')
    expect(() => readFigures(dir)).toThrow(/commit\.json holds no result object/)
    writeFileSync(join(dir, 'commit.json'), '{"bench": ')
    expect(() => readFigures(dir)).toThrow(/commit\.json is not JSON/)
  })

  it('docs/benchmarks.md in the repository shows what the committed figure files say, and every bench has one', () => {
    // A bench whose figures stay out of bench/results (the requests bench's
    // went to an ignored file until 2026-12-03) reads "not measured" in every
    // fresh clone; and a figure file replaced without `npm run readme:bench`
    // leaves the page behind it.
    const figures = readFigures(join(ROOT, 'bench', 'results'))
    expect(Object.keys(TARGETS).filter((name) => !figures.has(name))).toEqual([])
    const doc = readFileSync(join(ROOT, 'docs', 'benchmarks.md'), 'utf8')
    const block = doc.slice(doc.indexOf(START), doc.indexOf(END) + END.length)
    const rendered = renderBenchBlock(figures, repoProvenance(true))
    // A clone without the history (a shallow one) cannot tell a figure's
    // staleness: there the cells that say so are left out of the comparison,
    // and everything else must still match.
    if (rendered.includes('staleness unknown')) {
      const withoutProvenance = (text: string): string => text.replace(/(UTC|date not recorded), [^|]*?, Node /g, '$1, ?, Node ')
      expect(withoutProvenance(block)).toBe(withoutProvenance(rendered))
    } else {
      expect(block).toBe(rendered)
    }
    expect(block).not.toContain('not measured')
  })

  it('every bench of the table has the command bench:all runs, and that bench exists', () => {
    expect(BENCHES.map((b) => b.name).sort()).toEqual(Object.keys(TARGETS).sort())
    for (const b of BENCHES) expect(existsSync(join(ROOT, 'bench', `${b.run[0]}.ts`)), b.name).toBe(true)
  })
})
