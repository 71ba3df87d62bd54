// Rewrites the block between <!-- cost:start --> and <!-- cost:end --> in
// docs/cost.md from the request counts of the last `npm run bench -- requests`
// (bench/results/requests.json, or the path given as the first argument or in
// TIDEMARK_REQUESTS_FILE) and the published prices below, so that no figure
// in the docs is typed by hand.
//
//   npm run bench -- requests && npm run readme:cost
import { readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { writeDocBlock } from './readme-block.js'

const ROOT = resolve(fileURLToPath(new URL('.', import.meta.url)), '..')
const START = '<!-- cost:start -->'
const END = '<!-- cost:end -->'

/** AWS S3 Standard, us-east-1 list prices as of 2026-12-01 (https://aws.amazon.com/s3/pricing/); update with the date when they change. */
const PRICES = {
  date: '2026-12-01',
  source: 'AWS S3 Standard, us-east-1 (https://aws.amazon.com/s3/pricing/)',
  /** PUT, COPY, POST, LIST: dollars per 1,000 requests. DeleteObjects is a POST. */
  putClassPer1000: 0.005,
  /** GET, HEAD (SELECT and all other requests): dollars per 1,000 requests. */
  getClassPer1000: 0.0004,
  /** First 50 TB per month: dollars per GB-month. */
  storagePerGbMonth: 0.023,
}
/** A 30-day month. */
const MINUTES_PER_MONTH = 30 * 24 * 60
const PARTITIONS = [100, 1_000, 10_000]
const INTERVALS_MIN = [1, 5, 15]
/** The storage example: state per partition, and the snapshots retained (the default). */
const STATE_GB = 1
const RETAIN = 3
const MAX_AMPLIFICATION = 2

interface Bench {
  bench: string
  putClassPerSnapshot: number
  getClassPerSnapshot: number
  listPerSnapshot: number
  gcEverySnapshots: number
  gcIntervalMs: number
  perGcRun?: { putClass: number; getClass: number }
  /** A Snapshotter used directly (no claim), writerCheck 'create-only'; absent in files from before it was measured. */
  snapshotterPutClassPerSnapshot?: number
  snapshotterGetClassPerSnapshot?: number
  snapshotterListPerSnapshot?: number
  /** The same with the default writerCheck ('listing'), per request kind. */
  snapshotterListingPerSnapshot?: Record<string, number>
  claimRenewalsPerMinute: number
  claimLeaseMs: number
  /** Renewal PUTs a minute of one process holding 1 and 100 partitions by a MemberLease, and 100 by leases per claim; absent in files from before. */
  renewalPutsPerMinutePerProcess1?: number
  renewalPutsPerMinutePerProcess100?: number
  renewalPutsPerMinutePerProcess100PerClaim?: number
  standbyListsPerMinutePerMember1?: number
  standbyListsPerMinutePerMember500?: number
  startLocal: Record<string, number>
  startRestore: Record<string, number>
  handoff: { total: Record<string, number> }
  date: string
  node: string
}

const file = process.argv[2] ?? process.env.TIDEMARK_REQUESTS_FILE ?? join(ROOT, 'bench/results/requests.json')
let b: Bench
try {
  b = JSON.parse(readFileSync(file, 'utf8')) as Bench
} catch (err) {
  console.error(`cannot read the request counts at ${file} (${(err as Error).message}); run \`npm run bench -- requests\` first`)
  process.exit(2)
}
if (b.bench !== 'requests') {
  console.error(`${file} does not hold the output of \`npm run bench -- requests\``)
  process.exit(2)
}

const gcRun = b.perGcRun ?? { putClass: 0, getClass: 0 }
const fmtInt = (n: number): string => Math.round(n).toLocaleString('en-US')
const fmtUsd = (n: number): string => `$${n >= 100 ? fmtInt(n) : n.toFixed(2)}`
const fmtCount = (n: number): string => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(1)} M` : fmtInt(n))
const requests = (c: Record<string, number>): string => Object.entries(c).filter(([k, v]) => k !== 'chain' && v > 0).map(([k, v]) => `${v} ${k.toUpperCase()}`).join(' + ') || 'none'

const rows: string[] = []
for (const partitions of PARTITIONS) {
  for (const interval of INTERVALS_MIN) {
    const snapshots = partitions * (MINUTES_PER_MONTH / interval)
    // A GC runs after every gcEverySnapshots snapshots, or sooner when gcIntervalMs passes first.
    const snapshotsPerGc = Math.max(1, Math.min(b.gcEverySnapshots, Math.ceil(b.gcIntervalMs / 60_000 / interval)))
    const gcRuns = snapshots / snapshotsPerGc
    const putClass = snapshots * b.putClassPerSnapshot + gcRuns * gcRun.putClass
    const getClass = snapshots * b.getClassPerSnapshot + gcRuns * gcRun.getClass
    const dollars = (putClass / 1000) * PRICES.putClassPer1000 + (getClass / 1000) * PRICES.getClassPer1000
    const renewals = partitions * MINUTES_PER_MONTH * b.claimRenewalsPerMinute
    const renewalDollars = (renewals / 1000) * PRICES.putClassPer1000
    rows.push(`| ${fmtInt(partitions)} | ${interval} min | ${fmtCount(putClass)} | ${fmtCount(getClass)} | **${fmtUsd(dollars)}** | ${fmtCount(renewals)} PUT, ${fmtUsd(renewalDollars)} |`)
  }
}

const storageRows: string[] = []
for (const partitions of PARTITIONS) {
  const low = partitions * STATE_GB
  const high = partitions * STATE_GB * MAX_AMPLIFICATION * 2
  storageRows.push(`| ${fmtInt(partitions)} | ${fmtInt(low)}–${fmtInt(high)} GB | ${fmtUsd(low * PRICES.storagePerGbMonth)}–${fmtUsd(high * PRICES.storagePerGbMonth)} |`)
}

const block = [
  START,
  `Computed by \`npm run readme:cost\` (scripts/readme-cost.ts) from \`npm run bench -- requests\` (radosgw, ${b.date.slice(0, 10)}, Node ${b.node}) and ${PRICES.source} list prices as of ${PRICES.date}: PUT, COPY, POST and LIST $${PRICES.putClassPer1000} per 1,000 requests, GET and HEAD $${PRICES.getClassPer1000} per 1,000, storage $${PRICES.storagePerGbMonth} per GB-month. A month is 30 days.`,
  '',
  `Measured per steady-state snapshot of a \`PartitionProcessor\` (claim checked before each manifest): **${b.putClassPerSnapshot} PUT-class** (one data object, one manifest), **${b.getClassPerSnapshot} GET-class** (the claim's HEAD), **${b.listPerSnapshot} LIST**. A GC run adds ${gcRun.putClass} PUT-class (two LISTs, one batched DELETE) and runs every ${b.gcEverySnapshots} snapshots or ${b.gcIntervalMs / 60_000} minutes, whichever comes first. A start on an intact local store costs ${requests(b.startLocal)}; a restore of a chain of ${b.startRestore.chain} snapshots ${requests(b.startRestore)}; a hand-off (snapshot, close, the next owner's start) ${requests(b.handoff.total)}.`,
  '',
  ...(b.snapshotterPutClassPerSnapshot === undefined ? [] : [
    `A \`Snapshotter\` used directly, with no claim ([snapshots.md](snapshots.md#a-snapshotter-used-directly)), measured the same way: with \`writerCheck: 'create-only'\` **${b.snapshotterPutClassPerSnapshot} PUT-class**, **${b.snapshotterGetClassPerSnapshot} GET-class** (the new data object's HEAD), **${b.snapshotterListPerSnapshot} LIST** per steady-state snapshot${b.snapshotterPutClassPerSnapshot === b.putClassPerSnapshot && b.snapshotterGetClassPerSnapshot === b.getClassPerSnapshot ? ', as a processor\'s, so the table below holds for it too' : ''}; with the default \`'listing'\` ${requests(b.snapshotterListingPerSnapshot ?? {})}.`,
    '',
  ]),
  '| partitions | snapshot every | PUT-class / month | GET-class / month | $ / month, snapshots + GC | claim renewals / month (standalone processor) |',
  '| ---: | ---: | ---: | ---: | ---: | ---: |',
  ...rows,
  '',
  `Claim renewals: a standalone \`PartitionProcessor\` renews its claim ${b.claimRenewalsPerMinute} times a minute with the default lease (${b.claimLeaseMs / 1000} s, renewed every third of it), one conditional PUT each, whatever the snapshot interval: at scale they cost more than the snapshots. A longer \`ownership.leaseMs\` lowers them in proportion (and lengthens the wait after a crash); claims in a consumer group have no lease and are not renewed.`,
  ...(b.renewalPutsPerMinutePerProcess100 === undefined ? [] : [
    '',
    `With a \`MemberLease\` ([ownership.md](ownership.md#member-leases)) the claims of a process hold by one lease that the process renews: measured ${b.renewalPutsPerMinutePerProcess1} renewal PUTs a minute for a process with 1 partition and ${b.renewalPutsPerMinutePerProcess100} with 100 (${b.renewalPutsPerMinutePerProcess100PerClaim} with a lease per claim), that is ${fmtUsd(b.renewalPutsPerMinutePerProcess100 * MINUTES_PER_MONTH / 1000 * PRICES.putClassPer1000)} a month per process whatever its partitions.`,
  ]),
  ...(b.standbyListsPerMinutePerMember500 === undefined || b.standbyListsPerMinutePerMember1 === undefined ? [] : [
    '',
    `Standby and warm-up copies of a \`StatefulConsumer\` member ([consumer-group.md](consumer-group.md)) list the store to find new snapshots, a LIST per sync, and the member's syncs take turns (\`standby.syncsPerInterval\`): measured ${b.standbyListsPerMinutePerMember1} LISTs a minute for a member with 1 copy and ${b.standbyListsPerMinutePerMember500} with 500, that is at most ${fmtUsd(b.standbyListsPerMinutePerMember500 * MINUTES_PER_MONTH / 1000 * PRICES.putClassPer1000)} a month per member whatever its copies, plus the downloads of what the snapshots added.`,
  ]),
  '',
  `Storage for ${STATE_GB} GB of state per partition, retain ${RETAIN}: at least the state itself; at most about ${MAX_AMPLIFICATION * 2} times it (each kept chain references at most \`maxAmplification\` = ${MAX_AMPLIFICATION} times the state before a compact point, and right after one the older chain is kept too until retention drops it). A bound, not a measurement:`,
  '',
  '| partitions | stored | per month |',
  '| ---: | ---: | ---: |',
  ...storageRows,
  END,
].join('\n')

writeDocBlock('docs/cost.md', START, END, block, `cost table written from ${file}`)
