// `npm run bench:all`: every bench of docs/benchmarks.md once, in sequence, each
// with the arguments that produced its figure file (BENCHES in
// scripts/readme-bench.ts), then every block the docs generate from figure
// files: `npm run readme:bench` (the table, and the rebalance costs of
// docs/consumer-group.md) and `npm run readme:cost` (docs/cost.md).
// A bench that fails stops the run (its file keeps the last good figures,
// which the table then marks stale if the code moved) and exits non-zero.
//
//   npm run bench:all [-- --only commit,rebalance] [-- --from partitions]
import { spawnSync } from 'node:child_process'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { BENCHES } from './readme-bench.js'

const ROOT = resolve(fileURLToPath(new URL('.', import.meta.url)), '..')
const { values } = parseArgs({ args: process.argv.slice(2), options: { only: { type: 'string' }, from: { type: 'string' } }, strict: true })
const names = BENCHES.map((b) => b.name)
const only = values.only?.split(',').filter((x) => x !== '')
for (const n of [...(only ?? []), ...(values.from === undefined ? [] : [values.from])]) {
  if (!names.includes(n)) {
    console.error(`bench:all: no bench ${JSON.stringify(n)}; benches: ${names.join(', ')}`)
    process.exit(2)
  }
}
const start = values.from === undefined ? 0 : names.indexOf(values.from)
const chosen = BENCHES.slice(start).filter((b) => only === undefined || only.includes(b.name))

const tsx = join(ROOT, 'node_modules', 'tsx', 'dist', 'cli.mjs')
for (const [i, bench] of chosen.entries()) {
  const began = Date.now()
  console.error(`bench:all: [${i + 1}/${chosen.length}] npm run bench -- ${bench.run.join(' ')}`)
  const result = spawnSync(process.execPath, [tsx, join(ROOT, 'bench', 'run.ts'), ...bench.run], { cwd: ROOT, stdio: 'inherit' })
  if (result.status !== 0) {
    console.error(`bench:all: ${bench.name} failed (${result.status === null ? `signal ${String(result.signal)}` : `exit ${result.status}`}); stopping`)
    process.exit(1)
  }
  console.error(`bench:all: ${bench.name} done in ${Math.round((Date.now() - began) / 1000)} s`)
}
// The generators as package.json lists them, not a second list here.
for (const script of ['readme:bench', 'readme:cost']) {
  const written = spawnSync('npm', ['run', '--silent', script], { cwd: ROOT, stdio: 'inherit' })
  if (written.status !== 0) process.exit(written.status ?? 1)
}
