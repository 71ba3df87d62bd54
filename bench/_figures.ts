// Where a benchmark leaves its result line for the script that writes docs/benchmarks.md
// (scripts/readme-bench.ts), so that no figure is typed by hand.
import { execFileSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

/** The directory of the last results: BENCH_FIGURES_DIR, or bench/results, which is committed: the tables of docs/ are regenerated from it. */
export function figuresDir(): string {
  return process.env.BENCH_FIGURES_DIR ?? join(import.meta.dirname, 'results')
}

/**
 * The commit the bench ran at, and whether code was changed and not yet
 * committed (then the figure measures a tree no commit holds): the bench
 * table marks a figure stale when the code it measures changed after it
 * (scripts/bench-provenance.ts). Undefined outside a git checkout.
 */
function measuredAt(): { commit?: string; dirty?: boolean } {
  const root = join(import.meta.dirname, '..')
  try {
    const commit = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
    const status = execFileSync('git', ['status', '--porcelain', '--', 'src', 'connectors', 'bench', 'package-lock.json', ':!bench/results'], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
    return { commit, dirty: status.trim() !== '' }
  } catch {
    return {}
  }
}

/** Writes `result` with the Node.js version (unless it names one), the commit, the command that produced it and the date to <figuresDir>/<name>.json; `bench` is the bench's name when the file's differs (snapshot-throttled). */
export function saveFigures(name: string, args: readonly string[], result: Record<string, unknown>, bench = name): void {
  const dir = figuresDir()
  mkdirSync(dir, { recursive: true })
  const command = ['npm run bench --', bench, ...args].join(' ')
  writeFileSync(join(dir, `${name}.json`), `${JSON.stringify({ node: process.version, ...result, command, ...measuredAt(), date: new Date().toISOString() }, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))}\n`)
}
