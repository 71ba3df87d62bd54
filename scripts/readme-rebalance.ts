// Rewrites the block between <!-- rebalance-cost:start --> and
// <!-- rebalance-cost:end --> in docs/consumer-group.md ("What a rebalance
// costs now") from the figure files of the scaleout, failover and rolling
// benches (bench/results/NAME.json), so that no figure there is typed by hand.
//
//   npm run bench -- scaleout --rounds 3 && … && npm run readme:bench
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { figure, int, type Figures } from './bench-figures.js'
import { readFigures } from './readme-bench.js'
import { writeDocBlock } from './readme-block.js'

const ROOT = resolve(fileURLToPath(new URL('.', import.meta.url)), '..')
export const START = '<!-- rebalance-cost:start -->'
export const END = '<!-- rebalance-cost:end -->'

interface Row { scenario: string; bench: string; prefix?: string; moved?: string; steady: string; stayed: string; tidemark: string; tidemarkUnit?: 'partition-s'; group?: string }

const ROWS: readonly Row[] = [
  { scenario: 'scale-out 3 → 4 (warm-up)', bench: 'scaleout', moved: 'moved', steady: 'steadyGapMsMax', stayed: 'stayedGapMsMax', tidemark: 'tidemarkGapMsMax', group: 'groupPartitionSecondsLost' },
  { scenario: 'SIGKILL of 1 of 4 (standbys: 1)', bench: 'failover', moved: 'moved', steady: 'steadyGapMsMax', stayed: 'stayedGapMsMax', tidemark: 'tidemarkGapMsMax' },
  { scenario: 'SIGKILL of 1 of 4 (no standbys)', bench: 'failover', prefix: 'noStandbys', steady: 'SteadyGapMsMax', stayed: 'StayedGapMsMax', tidemark: 'TidemarkGapMsMax' },
  { scenario: 'rolling restart of 3, per member', bench: 'rolling', steady: 'steadyGapMsMax', stayed: 'stayedGapMsMax', tidemark: 'partitionSecondsLost', tidemarkUnit: 'partition-s', group: 'groupPartitionSecondsLost' },
]

/** The block, markers included, from the figure files of `byBench`. */
export function renderRebalanceBlock(byBench: ReadonlyMap<string, Figures>): string {
  const lines = [
    START,
    'Written by `npm run readme:bench` (scripts/readme-rebalance.ts) from `bench/results/{scaleout,failover,rolling}.json`; see docs/benchmarks.md for when and at which commit each was measured. "Stayed": the partitions that did not move, their longest time between two commits through the rebalance, against the same partitions in the 30 s before it; "moved": Tidemark\'s part of a moved partition\'s gap (assignment to first commit; for the rolling restart, partition-seconds while a record waited, over the partitions each restart started: the others ran on); partition-seconds without progress include the group\'s rounds.',
    '',
    '| scenario | moved | stayed: longest gap | stayed: in the 30 s before | moved: Tidemark\'s part | partition-seconds without progress |',
    '| --- | ---: | ---: | ---: | ---: | ---: |',
  ]
  for (const r of ROWS) {
    const f = byBench.get(r.bench)
    const get = (name: string | undefined): number | undefined => (f === undefined || name === undefined ? undefined : figure(f, `${r.prefix ?? ''}${name}`))
    const ms = (x: number | undefined): string => (x === undefined ? 'not measured' : `${int(x)} ms`)
    const moved = r.moved === undefined ? undefined : get(r.moved)
    const tidemark = get(r.tidemark)
    const group = r.group === undefined ? undefined : get(r.group)
    lines.push(`| ${r.scenario} | ${moved ?? '—'} | ${ms(get(r.stayed))} | ${ms(get(r.steady))} | ${r.tidemarkUnit === undefined ? ms(tidemark) : tidemark === undefined ? 'not measured' : `${tidemark} ${r.tidemarkUnit}`} | ${group ?? '—'} |`)
  }
  lines.push(END)
  return lines.join('\n')
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeDocBlock('docs/consumer-group.md', START, END, renderRebalanceBlock(readFigures(join(ROOT, 'bench', 'results'))), 'rebalance costs from bench/results')
}
