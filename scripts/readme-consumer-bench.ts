// Rewrites the block between <!-- consumer-bench:start --> and
// <!-- consumer-bench:end --> in docs/benchmarks.md from the result lines that the
// last `npm run bench -- rebalance` and `npm run bench -- idle` saved
// (bench/results/{rebalance,idle}.json, or BENCH_FIGURES_DIR; or the
// files given as arguments), so that no figure in the docs is typed by hand.
//
//   npm run bench -- rebalance && npm run bench -- idle && npm run readme:consumer-bench
import { readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { writeDocBlock } from './readme-block.js'

const ROOT = resolve(fileURLToPath(new URL('.', import.meta.url)), '..')
const START = '<!-- consumer-bench:start -->'
const END = '<!-- consumer-bench:end -->'

type Figures = Record<string, unknown>

const dir = process.env.BENCH_FIGURES_DIR ?? join(ROOT, 'bench', 'results')
const files = process.argv.length > 2 ? process.argv.slice(2) : [join(dir, 'rebalance.json'), join(dir, 'idle.json')]
const byBench = new Map<string, Figures>()
for (const file of files) {
  let figures: Figures
  try {
    figures = JSON.parse(readFileSync(file, 'utf8')) as Figures
  } catch (err) {
    console.error(`cannot read bench figures at ${file} (${(err as Error).message}); run \`npm run bench -- rebalance\` and \`npm run bench -- idle\` first`)
    process.exit(2)
  }
  if (figures.bench !== 'rebalance' && figures.bench !== 'idle') {
    console.error(`${file} holds no result of the rebalance or idle bench`)
    process.exit(2)
  }
  byBench.set(figures.bench, figures)
}
const rebalance = byBench.get('rebalance')
const idle = byBench.get('idle')
if (rebalance === undefined || idle === undefined) {
  console.error('need the results of both the rebalance and the idle bench')
  process.exit(2)
}

const num = (f: Figures, path: string): number => {
  let v: unknown = f
  for (const k of path.split('.')) v = (v as Record<string, unknown> | undefined)?.[k]
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    console.error(`the ${String(f.bench)} figures have no number at ${path}`)
    process.exit(2)
  }
  return v
}
const ms = (n: number): string => (n >= 10_000 ? `${(n / 1000).toFixed(1)} s` : `${Math.round(n)} ms`)
const met = (ok: boolean): string => (ok ? 'met' : '**missed**')
const source = (f: Figures): string => `\`${String(f.command)}\` (${String(f.date ?? '?').slice(0, 10)}, ${String(f.node ?? '')}, load average at start ${Array.isArray(f.loadAvgAtStart) ? (f.loadAvgAtStart as number[]).join(' / ') : '?'})`

const ratio = num(rebalance, 'handoffRatio')
const replayed = num(rebalance, 'replayedEvents')
const batch = num(rebalance, 'batchSize')
const idleCpu = num(idle, 'idleCpuPercent')
const pairs = Array.isArray(rebalance.pairs) ? (rebalance.pairs as Array<{ mode: string }>).filter((p) => p.mode === 'handoff').length : 0

const rows: Array<[string, string, string, string]> = [
  [
    '`rebalance`',
    `${num(rebalance, 'partitions')} partitions of ${num(rebalance, 'sizeMb')} MiB of state each, radosgw, the Kafka mock; a member joins and takes ${num(rebalance, 'handedOffPerRound')} of them; revocation (the old owner's GROUP_JOIN) to the new owner's first commit of a record the old one had not committed, vs restoreSnapshot() of the same snapshots in the same round; median of ${pairs} pairs`,
    `hand-off ${ms(num(rebalance, 'handoffMs'))} vs plain restore ${ms(num(rebalance, 'plainRestoreMs'))}, \`handoffRatio\` ${ratio} (${num(rebalance, 'handoffRatioMin')}–${num(rebalance, 'handoffRatioMax')}), \`replayedEvents\` ${replayed} (batch ${batch}); ` +
      `without a hand-off snapshot ${ms(num(rebalance, 'noHandoff.handoffMs'))}, ${num(rebalance, 'noHandoff.replayedEvents')} replayed; plain kafkajs rebalance (no state) ${ms(num(rebalance, 'rawRebalanceMs'))}; ` +
      `cold start to the first record ${ms(num(rebalance, 'coldStartMs'))} (plain kafkajs consumer ${ms(num(rebalance, 'rawColdStartMs'))}); ${num(rebalance, 'kafkaConnections')} Kafka connections (plain consumer ${num(rebalance, 'rawKafkaConnections')})`,
    `ratio ≤ 1.5: ${met(ratio <= 1.5)}; replayed ≤ batch: ${met(replayed <= batch)}`,
  ],
  [
    '`idle`',
    `one process, ${num(idle, 'partitions')} assigned partitions (8 topics), caught up and idle, CPU over ${num(idle, 'seconds')} s, vs a plain kafkajs consumer of the same partitions (in the same process, so with the kafkajs fixes too); median of ${num(idle, 'rounds')} rounds`,
    `${num(idle, 'idleCpuPercent')} % of a core (${num(idle, 'idleCpuPercentMin')}–${num(idle, 'idleCpuPercentMax')}) vs plain kafkajs ${num(idle, 'rawIdleCpuPercent')} %; ${num(idle, 'kafkaConnections')} Kafka connections`,
    `< 5 %: ${met(idleCpu < 5)}`,
  ],
]

const block = [
  START,
  `Written by \`npm run readme:consumer-bench\` from ${source(rebalance)} and ${source(idle)}.`,
  '',
  '| bench | what | figures | target |',
  '| --- | --- | --- | --- |',
  ...rows.map((r) => `| ${r.join(' | ')} |`),
  END,
].join('\n')

writeDocBlock('docs/benchmarks.md', START, END, block, `consumer-group bench figures from ${files.join(', ')}`)
