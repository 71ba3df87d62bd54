// What the bench table of docs/benchmarks.md holds: each bench, the command
// that produces its figure file, the layers it measures, how its figures read,
// and the targets of the issues, met or missed as scripts/readme-bench.ts computes.
import { clauses, int, lookup, mb, phrase, ratio, type Figures } from './bench-figures.js'

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
  commit: [
    { field: 'ratio', op: '>=', bound: 0.95, issue: 12 },
    // Versioned states: all values current vs unversioned; a value one version behind vs a plain read + the upgrade by hand.
    { field: 'versionedRatio', op: '>=', bound: 0.97, issue: 40 },
    { field: 'upgradeRatio', op: '>=', bound: 0.9, issue: 40 },
  ],
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
  // 1,024 partitions on the default store budget, against the same total rate over 16 (issue 38).
  many: [
    { field: 'peakRssMB', op: '<=', bound: 1024, issue: 38 },
    { field: 'openFdsMax', op: '<=', bound: 8192, issue: 38 },
    { field: 'manyRatio', op: '>=', bound: 0.8, issue: 38 },
    { field: 'snapshotRequestsRatio', op: '<=', bound: 1.2, issue: 38 },
  ],
  // The group half of issue 38's `many`: 4 StatefulConsumer members, a process each, 1,024 partitions on the Kafka mock.
  'many-group': [
    { field: 'groupMoved', per: 'groupMovedMinimum', op: '<=', bound: 1, issue: 38 },
    { field: 'groupTidemarkGapMsMax', op: '<=', bound: 1000, issue: 38 },
    { field: 'handoffAllMs', op: '<=', bound: 10000, issue: 38 },
    { field: 'startAllMs', op: '<=', bound: 30000, issue: 38 },
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
    // A member's standby listings must not grow with its copies: 16 syncs per 5 s interval at most (standby.syncsPerInterval), 192 a minute.
    { field: 'standbyListsPerMinutePerMember500', op: '<=', bound: 192, issue: 38 },
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
    // Partitions that stay go on through the group's rounds (issue 39).
    { field: 'stayedGapMsMax', per: 'steadyGapMsMax', op: '<=', bound: 2, issue: 39 },
    { field: 'stayedGapMsMax', op: '<=', bound: 1000, issue: 39 },
    { field: 'groupPartitionSecondsLost', per: 'groupLostBound', op: '<=', bound: 1, issue: 39 },
  ],
  failover: [
    { field: 'tidemarkGapMsMax', op: '<=', bound: 1500, issue: 28 },
    { field: 'waitedForDeadMs', op: '<=', bound: 0, issue: 28 },
    { field: 'moved', per: 'movedMinimum', op: '<=', bound: 1, issue: 28 },
    { field: 'stayedGapMsMax', per: 'steadyGapMsMax', op: '<=', bound: 2, issue: 39 },
    { field: 'stayedGapMsMax', op: '<=', bound: 1000, issue: 39 },
  ],
  // Medians over interleaved rounds: one round-robin draw depends on kafkajs's random member ids.
  rolling: [
    { field: 'partitionsHome', per: 'partitions', op: '>=', bound: 1, issue: 28 },
    { field: 'bytesDownloaded', per: 'stateBytes', op: '<=', bound: 0.1, issue: 28 },
    { field: 'lostRatio', op: '<=', bound: 0.1, issue: 28 },
    { field: 'stayedGapMsMax', per: 'steadyGapMsMax', op: '<=', bound: 2, issue: 39 },
    { field: 'stayedGapMsMax', op: '<=', bound: 1000, issue: 39 },
  ],
  // A hand-off against restoreSnapshot() of the same snapshots in the same round; nothing replayed past one batch.
  rebalance: [{ field: 'handoffRatio', op: '<=', bound: 1.5, issue: 7 }, { field: 'replayedEvents', per: 'batchSize', op: '<=', bound: 1, issue: 7 }],
  idle: [{ field: 'idleCpuPercent', op: '<', bound: 5, issue: 7 }],
  // Each event's latency with snapshots to radosgw every 10 s over the same rate without them.
  latency: [
    { field: 'p999Ratio', op: '<=', bound: 1.5, issue: 37 },
    { field: 'p999Ratio80', op: '<=', bound: 2, issue: 37 },
    { field: 'peakRssMB', op: '<=', bound: 512, issue: 37 },
    { field: 'eventsLost', op: '<=', bound: 0, issue: 37 },
    { field: 'eventsDoubled', op: '<=', bound: 0, issue: 37 },
  ],
}


export interface Row {
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

/** The `many` bench's highest RSS sampled in each phase. */
function phases(value: unknown): string | undefined {
  if (value === null || typeof value !== 'object') return undefined
  const names: Record<string, string> = { fill: 'appending the backlogs', catchUp: 'starting and catching up', drain: 'waiting for the catch-up\'s snapshots', windows: 'in the windows' }
  const parts = Object.entries(value as Record<string, unknown>).flatMap(([phase, mb]) => (phase in names && typeof mb === 'number' ? [`${names[phase]} ${mb}`] : []))
  return parts.length === 0 ? undefined : `RSS at most ${parts.join(', ')} MB`
}

/** The `many` bench's commit rates per round, over all partitions and over 16. */
function rates(many: unknown, few: unknown): string | undefined {
  const list = (x: unknown): number[] | undefined => (Array.isArray(x) && x.every((n) => typeof n === 'number') ? x : undefined)
  const a = list(many)
  const b = list(few)
  return a === undefined || b === undefined ? undefined : `committed ${a.map(int).join(' / ')} events/s vs over 16 partitions ${b.map(int).join(' / ')}`
}

export const ROWS: readonly Row[] = [
  {
    name: 'commit',
    run: ['commit'],
    what: 'read-modify-write of counters in batches, one commit per batch, vs the same reads and `db.batch` puts on classic-level; interleaved pairs; the same loop on a versioned state (`versionedRatio`), and reads of values one version behind vs plain reads + the upgrade by hand (`upgradeRatio`)',
    measures: STORE,
    figures: (f) => clauses([phrase(f, ['events', 'keys', 'batch'], (e, k, b) => `${int(e)} events over ${int(k)} keys, batches of ${b}`), phrase(f, ['eventsPerSec', 'rawPerSec'], (a, b) => `${int(a)} events/s vs raw ${int(b)}/s`), ratio(f, 'ratio'), phrase(f, ['sameKeysPerSec'], (x) => `raw on the store's keys (the state's prefix in front of each) ${int(x)}/s`), ratio(f, 'sameKeysRatio'), ratio(f, 'versionedRatio'), ratio(f, 'upgradeRatio')]),
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
      phrase(f, ['peakRssMB', 'rawPeakRssMB'], (a, b) => `\`peakRssMB\` ${a} (a process that only restores; ${b} one that only downloads)`),
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
      phrase(f, ['peakRssMB', 'snapshotPeakRssMB', 'restorePeakRssMB', 'rawPutPeakRssMB', 'rawGetPeakRssMB'], (a, s, r, p, g) => `\`peakRssMB\` ${a} (a process that only snapshots every partition ${s}, only restores them ${r}; only plain puts ${p}, only plain gets ${g})`),
    ]),
  },
  {
    name: 'many',
    run: ['many'],
    what: '1,024 `PartitionProcessor`s in one process on the default store budget, file logs, snapshots to a file-system store: 4 MiB of state each, snapshotted once after its catch-up, then windows of the same total event rate over all of them and over 16, interleaved, each ending when its own events are committed (a side that falls behind pays its backlog in its own window). The schedule is the default one scaled down in time (`intervalMs` 5 s, not 5 minutes: each window holds several intervals, so the requests are the steady state\'s; the process\'s pacer gives time-based snapshots the same number of turns per interval at any interval)',
    measures: [...SNAPSHOTS, 'src/runtime', 'src/log', 'src/ownership'],
    figures: (f) => clauses([
      phrase(f, ['partitions', 'mbPerPartition', 'rate'], (n, m, r) => `${int(n)} partitions of ${m} MiB at ${int(r)} events/s in all`),
      rates(lookup(f, 'manyCommitRate'), lookup(f, 'fewCommitRate')),
      ratio(f, 'manyRatio'),
      phrase(f, ['snapshotRequestsPerMinute', 'fewSnapshotRequestsPerMinute'], (a, b) => `snapshot-store requests ${a} per minute vs ${b} while only 16 are written (the others open and idle: their claims and the lease count on both sides)`),
      phrase(f, ['snapshotsTaken', 'fewSnapshotsTaken'], (a, b) => `snapshots taken ${int(a)} vs ${int(b)}`),
      phrase(f, ['drainSeconds'], (s) => `the snapshots the catch-up made due drained in ${s} s, before the windows`),
      phrase(f, ['peakRssMB', 'budgetMemoryMB'], (a, b) => `\`peakRssMB\` ${a} (budget ${b} MiB)`),
      phases(lookup(f, 'peakRssMBByPhase')),
      phrase(f, ['openFdsMax', 'storeFdsMax', 'logFdsMax'], (a, b, c) => `at most ${int(a)} descriptors open (${int(b)} on the stores, ${int(c)} on the logs)`),
    ]),
  },
  {
    name: 'many-group',
    run: ['many-group'],
    what: 'a StatefulConsumer job of 4 members, a process each, running 1,024 partitions of 4 MiB on the Kafka mock (256 topics of 4), file-system snapshots, a record to every partition every 200 ms: every member restarted on its stores, then a fifth member joining with warm-up on, then a SIGTERM of one of the first four',
    measures: GROUP,
    figures: (f) => clauses([
      phrase(f, ['startAllMs', 'startedFromLocal', 'startAllCommittedMs'], (a, n, c) => `restart: every partition started ${int(a)} ms after the members' start() (${int(n)} from local stores), committed after ${int(c)} ms`),
      phrase(f, ['groupMoved', 'groupMovedMinimum', 'stayedReopened'], (m, n, r) => `scale-out: ${int(m)} moved (minimum ${int(n)}), ${int(r)} others reopened`),
      phrase(f, ['groupTidemarkGapMsMax', 'groupClaimWaitMsMax', 'groupRestoreMsMax'], (g, c, r) => `assignment to first commit ≤ ${int(g)} ms (release wait ${int(c)}, start ${int(r)})`),
      phrase(f, ['handoffAllMs', 'handoffPartitions', 'handoffSnapshots'], (h, n, s) => `SIGTERM: ${int(n)} partitions handed off in ${int(h)} ms (${int(s)} hand-off snapshots)`),
      phrase(f, ['handoffResumedMs'], (x) => `running elsewhere after ${int(x)} ms (the group's round included)`),
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
      phrase(f, ['standbyListsPerMinutePerMember1', 'standbyListsPerMinutePerMember500'], (a, b) => `standby LISTs a minute per member: ${a} for 1 copy, ${b} for 500`),
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
      phrase(f, ['stayedGapMsMax', 'steadyGapMsMax'], (a, b) => `partitions that stayed: longest gap between commits ${int(a)} ms through the rebalance vs ${int(b)} ms in the 30 s before`),
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
      phrase(f, ['stayedGapMsMax', 'steadyGapMsMax'], (a, b) => `the survivors' own partitions: longest gap between commits ${int(a)} ms from the kill on vs ${int(b)} ms in the 30 s before`),
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
      phrase(f, ['partitionSecondsLost', 'roundRobinPartitionSecondsLost', 'lostRatio', 'lostRatioRounds'], (a, b, r, n) => `Tidemark's part (the partitions each restart started, while a record waited) ${a} partition-seconds vs ${b} with round-robin (medians of ${n} rounds; median per-round ratio ${r})`),
      phrase(f, ['partitionSecondsLostToCommit', 'roundRobinPartitionSecondsLostToCommit'], (a, b) => `from each assignment to the next commit ${a} vs ${b}`),
      phrase(f, ['groupPartitionSecondsLost', 'roundRobinGroupPartitionSecondsLost'], (a, b) => `with the group's rounds ${a} vs ${b}`),
      phrase(f, ['stayedGapMsMax', 'steadyGapMsMax'], (a, b) => `the other members' partitions at each restart: longest gap between commits ${int(a)} ms vs ${int(b)} ms in the 30 s before`),
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
    name: 'latency',
    run: ['latency'],
    what: 'each event from the moment it was due to be appended to the commit that holds it: a `PartitionProcessor` on the file log over a 1.1 GB store, events at 50 % and 80 % of the maximum rate the bench first measures (the highest fixed rate a 30 s run without snapshots keeps up with, p99 within 250 ms), the S3 server’s processes at nice 19 (a remote service’s CPU is not the processor’s), with snapshots to radosgw every 10 s vs the same rate without snapshots; interleaved segments, LevelDB compacting as it comes',
    measures: [...SNAPSHOTS, 'src/runtime', 'src/log', 'src/ownership'],
    figures: (f) => {
      const side = (name: string): string | undefined => {
        const l = lookup(f, name) as Figures | undefined
        if (l === undefined) return undefined
        const cost = typeof l.processorCpuSeconds === 'number' ? `; CPU s: processor ${String(l.processorCpuSeconds)}, S3 server ${String(l.s3ServerCpuSeconds)}${typeof l.uploadedMB === 'number' && l.uploadedMB > 0 ? `; ${String(l.uploadedMB)} MB uploaded` : ''}` : ''
        return `p50 ${String(l.p50)} / p99 ${String(l.p99)} / p99.9 ${String(l.p999)} / max ${String(l.max)} ms (level-0 files at most ${String(l.l0Max)}, ${String(l.l0SlowdownMs)} ms at 8 or more${cost})`
      }
      return clauses([
        phrase(f, ['floodRate'], (x) => `a flood drains ${int(x)} events/s`),
        phrase(f, ['maxRate', 'rate50'], (m, a) => `maximum ${int(m)} events/s; at ${int(a)}/s`),
        side('latencyMs50') === undefined ? undefined : `with snapshots ${side('latencyMs50')!} vs without ${side('baselineLatencyMs50') ?? '—'}`,
        ratio(f, 'p999Ratio'),
        phrase(f, ['rate80'], (b) => `at ${int(b)}/s`),
        side('latencyMs80') === undefined ? undefined : `with snapshots ${side('latencyMs80')!} vs without ${side('baselineLatencyMs80') ?? '—'}`,
        ratio(f, 'p999Ratio80'),
        phrase(f, ['eventsAppended', 'eventsLost', 'eventsDoubled'], (a, l, d) => `${int(a)} events, ${l} lost, ${d} doubled`),
        phrase(f, ['peakRssMB'], (x) => `\`peakRssMB\` ${x}`),
      ])
    },
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


/** The benches of the table, in its order, with the arguments that produce each figure file. */
export const BENCHES: ReadonlyArray<Pick<Row, 'name' | 'run'>> = ROWS

