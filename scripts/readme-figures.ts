// Rewrites the block between <!-- reliability:start --> and
// <!-- reliability:end --> in docs/reliability.md from the figures that the last
// `npm run test:torture` wrote (test/torture/.last-figures.json, or the path
// given as the first argument or in TORTURE_FIGURES_FILE), so that no figure
// in the docs is typed by hand.
//
//   npm run test:torture && npm run readme:reliability
import { readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { writeDocBlock } from './readme-block.js'

const ROOT = resolve(fileURLToPath(new URL('.', import.meta.url)), '..')
const START = '<!-- reliability:start -->'
const END = '<!-- reliability:end -->'

type Figures = Record<string, unknown>

const file = process.argv[2] ?? process.env.TORTURE_FIGURES_FILE ?? join(ROOT, 'test/torture/.last-figures.json')
let figures: Figures
try {
  figures = JSON.parse(readFileSync(file, 'utf8')) as Figures
} catch (err) {
  console.error(`cannot read the torture figures at ${file} (${(err as Error).message}); run \`npm run test:torture\` first`)
  process.exit(2)
}
if (figures.suite !== 'torture') {
  console.error(`${file} does not hold figures of the torture suite`)
  process.exit(2)
}

const num = (key: string): number => (typeof figures[key] === 'number' ? (figures[key] as number) : 0)
const map = (key: string): Record<string, number> => (typeof figures[key] === 'object' && figures[key] !== null ? (figures[key] as Record<string, number>) : {})
const list = (m: Record<string, number>, filter: (k: string) => boolean = () => true): string =>
  Object.entries(m).filter(([k]) => filter(k)).sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => `${k} ${v}`).join(', ') || '—'

const failedTests = Array.isArray(figures.failedTests) ? (figures.failedTests as string[]) : []

const rows: Array<[string, string, string]> = [
  ['SIGKILLs at wrapped kill points, each followed by a restart checked against a fold of the log', `${num('kills')} kills, ${num('restarts')} restarts checked (${list(map('killCombos'))})`, list(map('killPoints'), (k) => !k.includes(':'))],
  ['S3 faults through the fault proxy (503 SlowDown, resets, truncated bodies, stalls)', `${num('faultsInjected')} faults; snapshots ${num('snapshotsOk')} ok / ${num('snapshotsFailed')} failed with a documented code; restores ${num('restoresOk')} ok / ${num('restoresFailed')} failed with a documented code`, list(map('faultKinds'))],
  ['Corrupted snapshot objects (manifest, own data, shared data x bit flip, truncation, deletion, swap)', `${num('detected')} of ${num('corruptionCases')} never restored the damaged snapshot; wrong data returned: ${num('wrongData')}`, list(map('corruptionOutcomes'))],
  ['Hostile archives (links, devices, fifos, absolute and .. paths, pax, duplicates, oversized headers)', `${num('refused')} of ${num('hostileArchives')} refused`, '—'],
  ['Junk manifests (junk bytes, huge, wrong job/partition/epoch, extreme names)', `${num('junkSurvived')} of ${num('junkManifests')} skipped, with a new owner that starts and snapshots`, '—'],
  ["Targets holding the user's files", `${num('userFileCases')} cases`, '—'],
  ['Disk full (ENOSPC) on the store, checkpoints, file-system snapshot store, restore target', `${num('diskFullCases')} cases, ${num('diskFullInjected')} injected`, list(map('diskFullErrors'))],
  // Runs from before the relay's torture file have no such figures: no row rather than a row of zeros.
  ...(typeof figures.relayKills === 'number'
    ? [['SIGKILLs of processes appending to one file log through its relay (`relay: true`)', `${num('relayKills')} kills; ${num('relayAcked')} acknowledged appends, every one found at its revision`, `failed as in doubt (TIDEMARK_LOG_UNAVAILABLE) ${num('relayInDoubt')}`] as [string, string, string]]
    : []),
]

const block = [
  START,
  `Figures of the last run of \`${String(figures.command ?? 'npm run test:torture')}\` (${String(figures.date ?? '?').slice(0, 10)}, ${String(figures.node ?? '')}, ${num('durationS')} s; scale \`${String(figures.scale)}\`), written by \`npm run readme:reliability\` from \`test/torture/.last-figures.json\`.`,
  '',
  ...(typeof figures.replay === 'string' ? [`Replay exactly this run with \`${figures.replay}\`.`, ''] : []),
  `Result: **${String(figures.result ?? 'unknown')}**, ${num('testsPassed')} tests passed, ${num('testsFailed')} failed${failedTests.length > 0 ? ` (${failedTests.map((t) => `\`${t}\``).join('; ')})` : ''}. A failed case still counts in the figures below.`,
  '',
  '| what | result | by kind |',
  '| --- | --- | --- |',
  ...rows.map((r) => `| ${r.join(' | ')} |`),
  END,
].join('\n')

writeDocBlock('docs/reliability.md', START, END, block, `reliability figures from ${file}`)
