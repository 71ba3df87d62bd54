// Rewrites the block between <!-- bench:start --> and <!-- bench:end --> in
// docs/benchmarks.md from the result lines that the benches saved with saveFigures
// (bench/_figures.ts: bench/results/NAME.json, or BENCH_FIGURES_DIR), so
// that no figure in the docs is typed by hand: one row per bench with its
// figures, each target met or **missed** as computed here from those figures,
// and the command, date, commit (**stale** where the code it measures changed
// since), Node version and load average that produced them. The rows and
// targets are in bench-rows.ts. A
// bench without a figure file is "not measured"; nothing is filled in.
//
//   npm run bench -- commit && npm run bench -- restore && … && npm run readme:bench
//   npm run readme:bench -- [--figures DIR] [--doc FILE] [--requests FILE]
//
// The requests bench's line is bench/results/requests.json like the others;
// --requests or TIDEMARK_REQUESTS_FILE names another file to read it from.
import { readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { figure, int, lookup, mb, round, type Figures } from './bench-figures.js'
import { provenance, type Provenance } from './bench-provenance.js'
import { ROWS, TARGETS, type Target } from './bench-rows.js'

const ROOT = resolve(fileURLToPath(new URL('.', import.meta.url)), '..')
export const START = '<!-- bench:start -->'
export const END = '<!-- bench:end -->'

export { BENCHES, TARGETS } from './bench-rows.js'
export { figure, type Figures } from './bench-figures.js'

/** "`ratio` ≥ 0.95: met", "…: **missed**", or "…: not measured" when the figures lack it. */
function check(f: Figures, t: Target): string {
  const name = t.per === undefined ? `\`${t.field}\`` : `\`${t.field}\` ÷ \`${t.per}\``
  const text = `${name} ${t.op === '>=' ? '≥' : t.op === '<=' ? '≤' : '<'} ${t.bound}`
  const value = figure(f, t.field)
  const per = t.per === undefined ? 1 : figure(f, t.per)
  if (value === undefined || per === undefined || per === 0) return `${text}: not measured`
  const x = value / per
  const met = t.op === '>=' ? x >= t.bound : t.op === '<=' ? x <= t.bound : x < t.bound
  return `${text}: ${met ? 'met' : '**missed**'}${t.per === undefined ? '' : ` (${round(x, 3)})`}`
}


function loadText(f: Figures): string {
  const load = lookup(f, 'loadAvg') ?? lookup(f, 'loadAvgAtStart')
  return Array.isArray(load) && load.every((x) => typeof x === 'number') ? (load as number[]).join(' / ') : 'not recorded'
}

/** Where a figure file stands in git, as a cell's words: its commit, and **stale** with the commit that made it so. */
function provenanceText(p: Provenance | undefined): string {
  if (p === undefined) return 'commit not recorded'
  const at = p.commit === undefined ? 'commit not recorded' : `at ${p.commit}${p.dirty ? ' with uncommitted changes' : ''}`
  if (p.unknown !== undefined) return `${at}; staleness unknown: ${p.unknown}`
  return p.staleBy === undefined ? at : `${at}; **stale**: ${p.staleBy.commit} changed ${p.staleBy.file} since`
}

/** The command, date, commit, Node version and load average at start of a figure file. */
function measured(f: Figures, p: Provenance | undefined): string {
  const date = typeof f.date === 'string' ? `${f.date.slice(0, 16).replace('T', ' ')} UTC` : 'date not recorded'
  const node = typeof f.node === 'string' ? `Node ${f.node}` : 'Node version not recorded'
  const command = typeof f.command === 'string' ? `\`${f.command}\`` : 'command not recorded'
  return `${command}, ${date}, ${provenanceText(p)}, ${node}, load average at start ${loadText(f)}`
}

/** Tells the provenance of a bench's figure file; undefined when nothing is known. */
export type ProvenanceOf = (name: string, f: Figures, measures: readonly string[]) => Provenance | undefined

/**
 * Provenance from this repository's git: the commit a figure file records,
 * or, for the files in bench/results saved before benches recorded it, the
 * commit that last wrote the file.
 */
export const repoProvenance = (inResults: boolean): ProvenanceOf => (name, f, measures) =>
  typeof f.commit === 'string' || inResults ? provenance(ROOT, name, f, measures) : undefined

const cell = (s: string): string => s.replaceAll('|', '\\|').replaceAll('\n', ' ')

/** The growth table: one line per size, one per step of keys changed. */
function growthTable(g: Figures | undefined): string[] {
  if (g === undefined) return ['**How cost grows** (`npm run bench -- growth`): not measured.']
  const points = Array.isArray(g.points) ? (g.points as Figures[]) : []
  const size = points.filter((p) => p.series === 'size')
  const steps = points.filter((p) => p.series === 'incremental')
  const n = (p: Figures, name: string, text: (x: number) => string): string => {
    const x = figure(p, name)
    return x === undefined ? '—' : text(x)
  }
  const load = (p: Figures): string => (Array.isArray(p.loadAvg) ? (p.loadAvg as number[]).join(' / ') : '—')
  const lines = [`**How cost grows** (${measured(g, undefined).replace(/, commit not recorded/, '')}):`, '']
  if (size.length === 0) lines.push('Full snapshot and restore by size: not measured.')
  else {
    lines.push(
      '| state | full snapshot | restore | plain put / get of the same bytes | peak RSS | load average at start |',
      '| ---: | ---: | ---: | ---: | ---: | ---: |',
      ...size.map((p) => `| ${n(p, 'mb', (x) => `${x} MiB`)} (${n(p, 'stateBytes', mb)}) | ${n(p, 'snapshotSeconds', (x) => `${x} s`)}, ${n(p, 'snapshotMBps', (x) => `${x} MB/s`)} | ${n(p, 'restoreSeconds', (x) => `${x} s`)}, ${n(p, 'restoreMBps', (x) => `${x} MB/s`)} | ${n(p, 'rawPutMBps', (x) => `${x}`)} / ${n(p, 'rawGetMBps', (x) => `${x}`)} MB/s | ${n(p, 'peakRssMB', (x) => `${x} MB`)} | ${load(p)} |`),
    )
  }
  lines.push('')
  if (steps.length === 0) lines.push('Incremental upload by keys changed: not measured.')
  else {
    lines.push(
      `| keys changed (of ${n(steps[0]!, 'mb', (x) => `${x} MiB`)}) | changed keys | uploaded | new table files | uploaded ÷ new tables | uploaded ÷ state | load average at start |`,
      '| ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ...steps.map((p) => `| ${n(p, 'changedPercent', (x) => `${x} %`)} | ${n(p, 'changedKeys', int)} | ${n(p, 'uploadedBytes', mb)} | ${n(p, 'newTableBytes', mb)} | ${n(p, 'uploadToNewTables', String)} | ${n(p, 'uploadedPercent', (x) => `${x} %`)}${p.full === true ? ' (full)' : ''} | ${load(p)} |`),
    )
  }
  return lines
}


/** The block, markers included, from the figure files found in `dir` (missing ones: "not measured"). */
export function renderBenchBlock(figuresByBench: ReadonlyMap<string, Figures>, provenanceOf: ProvenanceOf = () => undefined): string {
  const rows = ROWS.map((row) => {
    const f = figuresByBench.get(row.name)
    const targets = TARGETS[row.name] ?? []
    if (f === undefined) {
      return [`\`${row.name}\``, row.what, 'not measured', targets.map((x) => check({}, x)).join('; ') || '—', '—']
    }
    return [`\`${row.name}\``, row.what, row.figures(f), targets.map((x) => check(f, x)).join('; ') || '—', measured(f, provenanceOf(row.name, f, row.measures))]
  })
  return [
    START,
    'Written by `npm run readme:bench` (scripts/readme-bench.ts) from the figure files that `npm run bench -- NAME` saves in `bench/results/` (`npm run bench:all` runs every bench, then this); targets set in the script, met or **missed** as computed from these figures. A figure is **stale** when a commit after the one it was measured at changed the code it measures (its bench files and the layers named in the script), as git tells: rerun that bench before trusting it.',
    '',
    '| bench | what | figures | target | measured |',
    '| --- | --- | --- | --- | --- |',
    ...rows.map((r) => `| ${r.map(cell).join(' | ')} |`),
    '',
    ...growthTable(figuresByBench.get('growth')),
    END,
  ].join('\n')
}

/**
 * Reads `<dir>/<bench>.json` for every bench of the table, or, when that is
 * absent, the file that `fallbacks` names for the bench; a bench without
 * either is left out, a file that does not parse is an error.
 */
export function readFigures(dir: string, fallbacks: Readonly<Record<string, string>> = {}): Map<string, Figures> {
  const out = new Map<string, Figures>()
  for (const { name } of ROWS) {
    for (const file of [join(dir, `${name}.json`), fallbacks[name]]) {
      if (file === undefined) continue
      const f = readJson(file)
      if (f === undefined) continue
      out.set(name, f)
      break
    }
  }
  return out
}

/** A result object from `file`, or undefined when there is no such file. */
function readJson(file: string): Figures | undefined {
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
  let f: unknown
  try {
    f = JSON.parse(text)
  } catch (err) {
    throw new Error(`${file} is not JSON: ${(err as Error).message}`)
  }
  if (f === null || typeof f !== 'object' || Array.isArray(f)) throw new Error(`${file} holds no result object`)
  return f as Figures
}

/** `doc` with its bench block replaced; throws when the markers are missing, repeated or out of order. */
export function replaceBenchBlock(doc: string, block: string): string {
  const i = doc.indexOf(START)
  const j = doc.indexOf(END)
  if (i === -1 || j === -1 || j < i || doc.indexOf(START, i + 1) !== -1 || doc.indexOf(END, j + 1) !== -1) {
    throw new Error(`the page needs exactly one ${START} … ${END} block (in that order) for the bench table`)
  }
  return doc.slice(0, i) + block + doc.slice(j + END.length)
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({ args: process.argv.slice(2), options: { figures: { type: 'string' }, doc: { type: 'string' }, requests: { type: 'string' } }, strict: true })
  const dir = values.figures ?? process.env.BENCH_FIGURES_DIR ?? join(ROOT, 'bench', 'results')
  const docPath = values.doc ?? join(ROOT, 'docs', 'benchmarks.md')
  // Another copy of the requests bench's line, read when bench/results has none.
  const requests = values.requests ?? process.env.TIDEMARK_REQUESTS_FILE
  try {
    const figures = readFigures(dir, requests === undefined ? {} : { requests })
    const inResults = resolve(dir) === join(ROOT, 'bench', 'results')
    writeFileSync(docPath, replaceBenchBlock(readFileSync(docPath, 'utf8'), renderBenchBlock(figures, repoProvenance(inResults))))
    const missing = ROWS.map((r) => r.name).filter((n) => !figures.has(n))
    console.log(`${docPath}: bench table from ${dir} (${[...figures.keys()].join(', ') || 'no figure file'}${missing.length > 0 ? `; not measured: ${missing.join(', ')}` : ''})`)
  } catch (err) {
    console.error(`readme:bench: ${(err as Error).message}`)
    process.exit(2)
  }
}
