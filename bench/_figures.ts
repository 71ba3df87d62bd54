// Where a benchmark leaves its result line for the scripts that write docs/benchmarks.md
// (scripts/readme-consumer-bench.ts), so that no figure is typed by hand.
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

/** The directory of the last results: BENCH_FIGURES_DIR, or bench/results, which is committed: the tables of docs/ are regenerated from it. */
export function figuresDir(): string {
  return process.env.BENCH_FIGURES_DIR ?? join(import.meta.dirname, 'results')
}

/** Writes `result` with the Node.js version (unless it names one), the command that produced it and the date to <figuresDir>/<name>.json; `bench` is the bench's name when the file's differs (snapshot-throttled). */
export function saveFigures(name: string, args: readonly string[], result: Record<string, unknown>, bench = name): void {
  const dir = figuresDir()
  mkdirSync(dir, { recursive: true })
  const command = ['npm run bench --', bench, ...args].join(' ')
  writeFileSync(join(dir, `${name}.json`), `${JSON.stringify({ node: process.version, ...result, command, date: new Date().toISOString() }, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))}\n`)
}
