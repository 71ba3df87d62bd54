// Rewrites the block between <!-- bench:start --> and <!-- bench:end --> in
// docs/benchmarks.md from the result lines that the benches saved with saveFigures
// (bench/_figures.ts: bench/results/NAME.json, or BENCH_FIGURES_DIR), so
// that no figure in the docs is typed by hand: one row per bench with its
// figures, each target met or **missed** as computed here from those figures,
// and the command, date, Node version and load average that produced them. A
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
import { provenance, type Provenance } from './bench-provenance.js'

const ROOT = resolve(fileURLToPath(new URL('.', import.meta.url)), '..')
export const START = '<!-- bench:start -->'
export const END = '<!-- bench:end -->'

export type Figures = Record<string, unknown>

/**
 * A target of an issue, checked against a figure (or a figure divided by
 * another: `per`). The one place where the benchmarks' targets are written.
 */
export interface Target {
  field: string
  per?: string
  op: '>=' | '<=' | '<'
  bound: number
  issue: number
}

export const TARGETS: Readonly<Record<string, readonly Target[]>> = {
  commit: [{ field: 'ratio', op: '>=', bound: 0.95, issue: 12 }],
  // Against a plain rebuild into classic-level; `ratio` (a read + JSON.parse that applies nothing) is for information.
  replay: [{ field: 'applyRatio', op: '>=', bound: 0.9, issue: 30 }, { field: 'peakRssMB', op: '<=', bound: 256, issue: 5 }],
  snapshot: [
    { field: 'stallMsP99', op: '<=', bound: 100, issue: 3 },
    { field: 'incrementalUploadBytes', per: 'newTableBytes', op: '<=', bound: 2, issue: 3 },
    { field: 'uploadMBps', per: 'rawPutMBps', op: '>=', bound: 0.8, issue: 3 },
    { field: 'peakRssMB', op: '<=', bound: 256, issue: 3 },
  ],
  'snapshot-throttled': [{ field: 'stallMsP99', op: '<=', bound: 50, issue: 12 }, { field: 'peakRssMB', op: '<=', bound: 256, issue: 12 }],
  restore: [
    { field: 'ratio', op: '<=', bound: 1.1, issue: 12 },
    { field: 'changelogRatio', op: '>=', bound: 5, issue: 12 },
    { field: 'peakRssMB', op: '<=', bound: 256, issue: 3 },
  ],
  sync: [
    { field: 'appendRatio1', op: '>=', bound: 0.8, issue: 12 },
    { field: 'groupRatio4', op: '>=', bound: 2, issue: 12 },
    { field: 'groupRatio4Processes', op: '>=', bound: 2, issue: 12 },
    // The same target for processes that relay their appends to the lock holder (FileLogOptions.relay, opt-in).
    { field: 'groupRatio4ProcessesRelay', op: '>=', bound: 2, issue: 12 },
  ],
  partitions: [
    { field: 'putRatio', op: '>=', bound: 0.8, issue: 12 },
    { field: 'getRatio', op: '>=', bound: 0.8, issue: 12 },
    { field: 'peakRssMB', op: '<=', bound: 384, issue: 12 },
  ],
  // Against at-least-once (the same records sent after each commit); `emitRatio` and `emitHeldRatio` are for information.
  outputs: [{ field: 'eoRatio', op: '>=', bound: 0.85, issue: 30 }, { field: 'deliveryRatio', op: '>=', bound: 0.8, issue: 9 }],
  requests: [
    { field: 'putClassPerSnapshot', op: '<=', bound: 2, issue: 13 },
    { field: 'getClassPerSnapshot', op: '<=', bound: 1, issue: 13 },
    { field: 'listPerSnapshot', op: '<=', bound: 0, issue: 13 },
    { field: 'snapshotterPutClassPerSnapshot', op: '<=', bound: 2, issue: 30 },
    { field: 'snapshotterGetClassPerSnapshot', op: '<=', bound: 1, issue: 30 },
    { field: 'snapshotterListPerSnapshot', op: '<=', bound: 0, issue: 30 },
    // Renewals per process must not grow with its partitions (MemberLease).
    { field: 'renewalPutsPerMinutePerProcess100', per: 'renewalPutsPerMinutePerProcess1', op: '<=', bound: 1.5, issue: 28 },
  ],
  // Issue 12 item 7 asks for the series, with no bound: the table below the rows.
  growth: [],
  // With warm-up on: the sticky minimum moves, nothing else reopened, the new owner downloads little at the move.
  scaleout: [
    { field: 'moved', per: 'movedMinimum', op: '<=', bound: 1, issue: 28 },
    { field: 'stayedReopened', op: '<=', bound: 0, issue: 28 },
    { field: 'bytesDownloadedAtMove', per: 'movedStateBytes', op: '<=', bound: 0.1, issue: 28 },
    { field: 'tidemarkGapMsMax', op: '<=', bound: 1000, issue: 28 },
    { field: 'tidemarkGapMsMaxLarge', per: 'tidemarkGapMsMax', op: '<=', bound: 1.5, issue: 28 },
  ],
  failover: [
    { field: 'tidemarkGapMsMax', op: '<=', bound: 1500, issue: 28 },
    { field: 'waitedForDeadMs', op: '<=', bound: 0, issue: 28 },
    { field: 'moved', per: 'movedMinimum', op: '<=', bound: 1, issue: 28 },
  ],
  // Medians over interleaved rounds: one round-robin draw depends on kafkajs's random member ids.
  rolling: [
    { field: 'partitionsHome', per: 'partitions', op: '>=', bound: 1, issue: 28 },
    { field: 'bytesDownloaded', per: 'stateBytes', op: '<=', bound: 0.1, issue: 28 },
    { field: 'lostRatio', op: '<=', bound: 0.1, issue: 28 },
  ],
  // A hand-off against restoreSnapshot() of the same snapshots in the same round; nothing replayed past one batch.
  rebalance: [{ field: 'handoffRatio', op: '<=', bound: 1.5, issue: 7 }, { field: 'replayedEvents', per: 'batchSize', op: '<=', bound: 1, issue: 7 }],
  idle: [{ field: 'idleCpuPercent', op: '<', bound: 5, issue: 7 }],
}

/**
 * A figure by name: at the top of the saved result, or, when a bench saved
 * several lines (an array such as `lines` or `results`), in the first of them
 * that has it. Only a finite number counts.
 */
export function figure(f: Figures, name: string): number | undefined {
  const found = lookup(f, name)
  return typeof found === 'number' && Number.isFinite(found) ? found : undefined
}

function lookup(f: Figures, name: string): unknown {
  if (name in f) return f[name]
  for (const v of Object.values(f)) {
    if (!Array.isArray(v)) continue
    for (const item of v) if (item !== null && typeof item === 'object' && name in item) return (item as Figures)[name]
  }
  return undefined
}

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

const round = (n: number, digits: number): number => Math.round(n * 10 ** digits) / 10 ** digits
const int = (n: number): string => Math.round(n).toLocaleString('en-US')
const mb = (bytes: number): string => (bytes >= 1e6 ? `${round(bytes / 1e6, bytes >= 1e8 ? 0 : 1)} MB` : `${round(bytes / 1e3, 1)} kB`)

/** `name` 0.93 (0.90–0.97, 7 rounds): a ratio with its spread when the bench gives one. */
function ratio(f: Figures, name: string): string | undefined {
  const r = figure(f, name)
  if (r === undefined) return undefined
  const lo = figure(f, `${name}Min`)
  const hi = figure(f, `${name}Max`)
  const rounds = figure(f, `${name}Rounds`) ?? (name === 'ratio' ? figure(f, 'rounds') : undefined)
  const spread = [lo !== undefined && hi !== undefined ? `${lo}–${hi}` : undefined, rounds === undefined ? undefined : `${rounds} rounds`].filter((x) => x !== undefined)
  return `\`${name}\` ${r}${spread.length > 0 ? ` (${spread.join(', ')})` : ''}`
}

/** A phrase built from figures: undefined (left out) when one of them is missing. */
function phrase(f: Figures, names: readonly string[], text: (...xs: number[]) => string): string | undefined {
  const xs = names.map((n) => figure(f, n))
  return xs.every((x) => x !== undefined) ? text(...(xs as number[])) : undefined
}

const clauses = (parts: ReadonlyArray<string | undefined>): string => parts.filter((p) => p !== undefined).join('; ') || 'no known figure in the file'

interface Row {
  name: string
  what: string
  /** The arguments of `npm run bench --` that produce the figure file (what `npm run bench:all` runs). */
  run: readonly string[]
  /** The layers whose code the bench measures: a change to them after the figure's commit makes it stale (scripts/bench-provenance.ts). */
  measures: readonly string[]
  figures: (f: Figures) => string
}

// The layers of each kind of bench.
const STORE = ['src/store', 'src/util']
const SNAPSHOTS = [...STORE, 'src/snapshot', 'src/snapshot-store', 'connectors/s3']
const GROUP = [...SNAPSHOTS, 'src/runtime', 'src/ownership', 'src/log', 'src/outputs', 'connectors/kafka']

const ROWS: readonly Row[] = [
  {
    name: 'commit',
    run: ['commit'],
    what: 'read-modify-write of counters in batches, one commit per batch, vs the same reads and `db.batch` puts on classic-level; interleaved pairs',
    measures: STORE,
    figures: (f) => clauses([phrase(f, ['events', 'keys', 'batch'], (e, k, b) => `${int(e)} events over ${int(k)} keys, batches of ${b}`), phrase(f, ['eventsPerSec', 'rawPerSec'], (a, b) => `${int(a)} events/s vs raw ${int(b)}/s`), ratio(f, 'ratio')]),
  },
  {
    name: 'replay',
    run: ['replay'],
    what: 'events replayed onto a restored store vs a plain rebuild (the same entries read, parsed and put into classic-level in batches of the replay batch size); vs a plain read + `JSON.parse` for information; interleaved pairs',
    measures: [...STORE, 'src/replay', 'src/runtime', 'src/log', 'src/synchronizer', 'src/snapshot', 'src/snapshot-store'],
    figures: (f) => clauses([
      phrase(f, ['applyPerSec', 'applyRawPerSec'], (a, b) => `${int(a)} events/s vs plain rebuild ${int(b)}/s`),
      ratio(f, 'applyRatio'),
      phrase(f, ['eventsPerSec', 'rawReadPerSec'], (a, b) => `${int(a)} events/s vs read + parse ${int(b)}/s`),
      ratio(f, 'ratio'),
      phrase(f, ['peakRssMB'], (x) => `\`peakRssMB\` ${x}`),
    ]),
  },
  {
    name: 'snapshot',
    run: ['snapshot', '--mb', '256', '--snapshots', '4'],
    what: 'a generated store on radosgw: full snapshot, incremental after some keys changed, then snapshots under a write load; vs plain PutObject of the same table files',
    measures: SNAPSHOTS,
    figures: (f) => clauses([
      phrase(f, ['stateBytes'], (x) => `state ${mb(x)}`),
      phrase(f, ['incrementalUploadBytes', 'newTableBytes', 'changedKeys'], (a, b, c) => `incremental ${mb(a)} for ${mb(b)} of new tables after ${int(c)} keys changed`),
      phrase(f, ['stallMsP99'], (x) => `\`stallMsP99\` ${x}`),
      phrase(f, ['uploadMBps', 'rawPutMBps'], (a, b) => `upload ${a} MB/s vs plain puts ${b} MB/s`),
      ratio(f, 'uploadRatio'),
      phrase(f, ['peakRssMB'], (x) => `\`peakRssMB\` ${x}`),
    ]),
  },
  {
    name: 'snapshot-throttled',
    run: ['snapshot', '--throttle-mbps', '20', '--mb', '64', '--snapshots', '8'],
    what: 'the snapshot bench with the snapshot store throttled (`--throttle-mbps`): commits under the write load and memory while uploads are slow',
    measures: SNAPSHOTS,
    figures: (f) => clauses([
      phrase(f, ['throttleMBps'], (x) => `throttled to ${x} MiB/s`),
      phrase(f, ['stateBytes'], (x) => `state ${mb(x)}`),
      phrase(f, ['stallMsP99'], (x) => `\`stallMsP99\` ${x}`),
      phrase(f, ['uploadMBps', 'rawPutMBps'], (a, b) => `upload ${a} MB/s vs plain puts ${b} MB/s through the same throttle`),
      phrase(f, ['peakRssMB'], (x) => `\`peakRssMB\` ${x}`),
    ]),
  },
  {
    name: 'restore',
    run: ['restore'],
    what: 'the same store restored (SHA-256 checked, fsynced) vs GetObject of the same objects into fsynced files; and rebuilt the way Kafka Streams does (a compacted changelog replayed into a fresh LevelDB)',
    measures: SNAPSHOTS,
    figures: (f) => clauses([
      phrase(f, ['stateBytes'], (x) => `state ${mb(x)}`),
      phrase(f, ['restoreSeconds', 'rawDownloadSeconds'], (a, b) => `${a} s vs raw ${b} s`),
      ratio(f, 'ratio'),
      phrase(f, ['changelogSeconds'], (x) => `changelog rebuild ${x} s`),
      phrase(f, ['changelogRatio'], (x) => `\`changelogRatio\` ${x}`),
      phrase(f, ['peakRssMB'], (x) => `\`peakRssMB\` ${x}`),
    ]),
  },
  {
    name: 'sync',
    run: ['sync', '--only', 'file'],
    what: 'file-log appends with group commit vs a raw loop of `write` + `fdatasync` of the same bytes; 1 writer, 4 writers in one process and in 4 processes (StateSynchronizer rates: [sync.md](sync.md#benchmark))',
    measures: ['src/log', 'src/synchronizer', 'src/util'],
    figures: (f) => clauses([
      phrase(f, ['perSecond1', 'rawPerSecond'], (a, b) => `1 writer ${int(a)} appends/s vs raw ${int(b)}/s`),
      ratio(f, 'appendRatio1'),
      phrase(f, ['perSecond4'], (x) => `4 writers ${int(x)}/s`),
      ratio(f, 'groupRatio4'),
      phrase(f, ['perSecond4Processes'], (x) => `4 processes ${int(x)}/s`),
      ratio(f, 'groupRatio4Processes'),
      phrase(f, ['perSecond4ProcessesRelay'], (x) => `4 processes with \`relay: true\` ${int(x)}/s`),
      ratio(f, 'groupRatio4ProcessesRelay'),
    ]),
  },
  {
    name: 'partitions',
    run: ['partitions'],
    what: 'partition stores in one process, snapshot all and restore all on radosgw, vs plain S3 put/get at the same concurrency',
    measures: SNAPSHOTS,
    figures: (f) => clauses([
      phrase(f, ['partitions', 'mbPerPartition'], (n, m) => `${n} partitions of ${m} MiB`),
      phrase(f, ['putMBps', 'rawPutMBps'], (a, b) => `snapshot all ${a} MB/s vs plain puts ${b} MB/s`),
      ratio(f, 'putRatio'),
      phrase(f, ['getMBps', 'rawGetMBps'], (a, b) => `restore all ${a} MB/s vs plain gets ${b} MB/s`),
      ratio(f, 'getRatio'),
      phrase(f, ['peakRssMB'], (x) => `\`peakRssMB\` ${x}`),
    ]),
  },
  {
    name: 'outputs',
    run: ['outputs'],
    what: 'a word count that emits one record per event through the outbox to Kafka vs the same job sending the same records with a plain kafkajs producer after each commit (at-least-once), every record delivered; vs the same job without emitting, for information; outbox delivery vs a plain kafkajs producer of the same records (Kafka mock)',
    measures: [...STORE, 'src/runtime', 'src/outputs', 'src/log', 'connectors/kafka'],
    figures: (f) => clauses([
      phrase(f, ['eoPerSec', 'eoRawPerSec'], (a, b) => `${int(a)} events/s delivered vs at-least-once ${int(b)}/s`),
      ratio(f, 'eoRatio'),
      phrase(f, ['emitPerSec', 'emitRawPerSec'], (a, b) => `${int(a)} events/s vs ${int(b)}/s without emitting`),
      ratio(f, 'emitRatio'),
      ratio(f, 'emitHeldRatio'),
      phrase(f, ['deliveredPerSec', 'deliveryRawPerSec'], (a, b) => `${int(a)} records/s vs ${int(b)}/s`),
      ratio(f, 'deliveryRatio'),
    ]),
  },
  {
    name: 'requests',
    run: ['requests'],
    what: 'requests to radosgw by kind per steady-state snapshot, GC run, start and hand-off (costs: [cost.md](cost.md)); per steady-state snapshot of a `Snapshotter` used directly, with no claim',
    measures: [...SNAPSHOTS, 'src/runtime', 'src/ownership', 'src/log'],
    figures: (f) => clauses([
      phrase(f, ['putClassPerSnapshot', 'getClassPerSnapshot', 'listPerSnapshot'], (p, g, l) => `per snapshot ${p} PUT-class, ${g} GET-class, ${l} LIST`),
      phrase(f, ['snapshotterPutClassPerSnapshot', 'snapshotterGetClassPerSnapshot', 'snapshotterListPerSnapshot'], (p, g, l) => `\`Snapshotter\` alone ${p} PUT-class, ${g} GET-class, ${l} LIST`),
      phrase(f, ['requestsPerStart'], (x) => `${x} requests per start on an intact store`),
      phrase(f, ['renewalPutsPerMinutePerProcess1', 'renewalPutsPerMinutePerProcess100', 'renewalPutsPerMinutePerProcess100PerClaim'], (a, b, c) => `renewal PUTs a minute per process by a member lease: ${a} for 1 partition, ${b} for 100 (${c} for 100 with a lease per claim)`),
    ]),
  },
  {
    name: 'scaleout',
    run: ['scaleout', '--rounds', '3'],
    what: 'a fourth member joins three that run 12 partitions of 24 MiB (and 4 of 512 MiB), warm-up on, Kafka mock, file-system snapshots',
    measures: GROUP,
    figures: (f) => clauses([
      phrase(f, ['moved', 'movedMinimum', 'stayedReopened'], (m, n, r) => `${m} moved (minimum ${n}), ${r} others reopened`),
      phrase(f, ['bytesDownloadedAtMove', 'movedStateBytes'], (a, b) => `${int(a)} bytes downloaded at the move of ${int(b)} bytes of state`),
      phrase(f, ['tidemarkGapMsMax', 'claimWaitMsMax', 'restoreMsMax'], (g, c, r) => `assignment to first commit ≤ ${int(g)} ms (release wait ${int(c)}, restore ${int(r)})`),
      phrase(f, ['tidemarkGapMsMaxLarge'], (x) => `${int(x)} ms with 512 MiB partitions`),
      phrase(f, ['groupGapMsMax', 'partitionSecondsLost'], (g, l) => `with the group's rounds ${int(g)} ms, ${l} partition-seconds without progress`),
    ]),
  },
  {
    name: 'failover',
    run: ['failover', '--rounds', '3'],
    what: 'SIGKILL of one of 4 members running 12 partitions of 24 MiB, with one standby per partition (and without), Kafka mock, file-system snapshots',
    measures: GROUP,
    figures: (f) => clauses([
      phrase(f, ['tidemarkGapMsMax', 'waitedForDeadMs'], (g, w) => `assignment to first commit ≤ ${int(g)} ms, ${int(w)} ms waited for the dead`),
      phrase(f, ['moved', 'movedMinimum', 'bytesDownloaded'], (m, n, b) => `${m} moved (minimum ${n}), ${int(b)} bytes downloaded`),
      phrase(f, ['detectMsMax'], (x) => `kill to assignment ${int(x)} ms (the group's session timeout)`),
      phrase(f, ['noStandbysTidemarkGapMsMax', 'noStandbysBytesDownloaded'], (g, b) => `without standbys: assignment to first commit ≤ ${int(g)} ms, ${int(b)} bytes downloaded`),
    ]),
  },
  {
    name: 'rolling',
    run: ['rolling'],
    what: "3 members restarted one after another with their state dirs: `close({ leaveGroup: false })` and the state-aware assignor vs kafkajs's round-robin assignor and a plain close",
    measures: GROUP,
    figures: (f) => clauses([
      phrase(f, ['partitionsHome', 'partitions'], (h, n) => `${h} of ${n} partitions home`),
      phrase(f, ['bytesDownloaded', 'stateBytes'], (b, s) => `${int(b)} bytes downloaded of ${int(s)} bytes of state`),
      phrase(f, ['partitionSecondsLost', 'roundRobinPartitionSecondsLost', 'lostRatio', 'lostRatioRounds'], (a, b, r, n) => `Tidemark's part (while a record waited) ${a} partition-seconds vs ${b} with round-robin (medians of ${n} rounds; median per-round ratio ${r})`),
      phrase(f, ['partitionSecondsLostToCommit', 'roundRobinPartitionSecondsLostToCommit'], (a, b) => `from each assignment to the next commit ${a} vs ${b}`),
      phrase(f, ['groupPartitionSecondsLost', 'roundRobinGroupPartitionSecondsLost'], (a, b) => `with the group's rounds ${a} vs ${b}`),
    ]),
  },
  {
    name: 'rebalance',
    run: ['rebalance', '--rounds', '3'],
    what: "4 partitions of `--size-mb` MiB (default 100) on radosgw and the Kafka mock; a member joins and takes 2 of them: from the revocation (the old owner's GROUP_JOIN) to the new owner's first commit of a record the old one had not committed, vs `restoreSnapshot()` of the same snapshots in the same round; median of the pairs",
    measures: GROUP,
    figures: (f) => clauses([
      phrase(f, ['handoffMs', 'plainRestoreMs'], (a, b) => `hand-off ${int(a)} ms vs plain restore ${int(b)} ms`),
      ratio(f, 'handoffRatio'),
      phrase(f, ['replayedEvents', 'batchSize'], (r, b) => `\`replayedEvents\` ${r} (batch ${b})`),
      phrase(f, ['rawRebalanceMs'], (x) => `plain kafkajs rebalance (no state) ${int(x)} ms`),
      phrase(f, ['coldStartMs', 'rawColdStartMs'], (a, b) => `cold start to the first record ${int(a)} ms (plain kafkajs consumer ${int(b)} ms)`),
    ]),
  },
  {
    name: 'idle',
    run: ['idle'],
    what: 'one process, 32 assigned partitions (8 topics), caught up and idle: CPU of a core, vs a plain kafkajs consumer of the same partitions in the same process; median of the rounds',
    measures: GROUP,
    figures: (f) => clauses([
      phrase(f, ['idleCpuPercent', 'rawIdleCpuPercent'], (a, b) => `${a} % of a core vs plain kafkajs ${b} %`),
      phrase(f, ['kafkaConnections'], (x) => `${x} Kafka connections`),
    ]),
  },
  {
    name: 'growth',
    run: ['growth'],
    what: 'full snapshot and restore at several state sizes; incremental upload against keys changed (table below)',
    measures: SNAPSHOTS,
    figures: (f) => {
      const points = Array.isArray(f.points) ? (f.points as Figures[]) : []
      const sizes = points.filter((p) => p.series === 'size').map((p) => `${String(p.mb)} MiB`)
      const steps = points.filter((p) => p.series === 'incremental').map((p) => `${String(p.changedPercent)} %`)
      return clauses([sizes.length > 0 ? `sizes ${sizes.join(', ')}` : undefined, steps.length > 0 ? `keys changed ${steps.join(', ')}` : undefined])
    },
  },
]

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
/** The benches of the table, in its order, with the arguments that produce each figure file. */
export const BENCHES: ReadonlyArray<Pick<Row, 'name' | 'run'>> = ROWS

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
