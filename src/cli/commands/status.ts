import { SnapshotLayout } from '../../snapshot/layout.js'
import { EXIT, help, JSON_OPTION, need, noMore, parse, positionsText, print, snapshotStoreArg, table, UsageError, withSnapshotStore, type CliIO, type Command } from '../context.js'
import { readJobStatus, type JobStatus, type MemberStatus, type PartitionOwner } from '../job-status.js'
import { shellWord } from '../holdings.js'

const USAGE = `usage:
  tidemark status <snapshot-store-url> --job J [--region R] [--json]
      the job's partitions: who holds each one's claim (owner, member lease,
      epoch, lease left), its newest snapshot (id, positions, age, state
      size) and how many snapshots are kept; and its member leases (one per
      process that holds claims by one), with the partitions each holds.
      Leases are judged by this host's clock; read as the store is now

  --region R   the region of an s3:// store (default: the URL's region
               parameter, else AWS_REGION, AWS_DEFAULT_REGION, else us-east-1)`

export const status: Command = {
  name: 'status',
  usage: USAGE,
  async run(argv: string[], io: CliIO): Promise<number> {
    const parsed = parse(argv, { ...JSON_OPTION, job: { type: 'string' }, region: { type: 'string' } })
    if (parsed === undefined) return help(io, USAGE)
    const { positionals: [arg, ...extra], values } = parsed
    const url = snapshotStoreArg(arg)
    noMore(extra)
    const job = need(values.job, '--job')
    try {
      // Checked as the store's layout checks it, before anything is opened.
      new SnapshotLayout(job, 0)
    } catch (err) {
      throw new UsageError(`--job ${JSON.stringify(job)}: ${(err as Error).message}`, { cause: err })
    }
    const report = await withSnapshotStore(url, values.region, io, (store) => readJobStatus(store, job, Date.now()))
    if (report.partitions.length === 0 && report.members.length === 0) {
      // On stderr: --json's stdout stays the (empty) report.
      io.stderr.write(`tidemark: ${url} holds nothing of job ${job}; \`tidemark jobs ${shellWord(url)}\` lists its jobs\n`)
    }
    print(io, values.json, report, () => statusText(report))
    return EXIT.ok
  },
}

function statusText(r: JobStatus): string {
  const held = r.partitions.filter((p) => p.owner?.state === 'held').length
  const lines = [`job ${r.job}: ${r.partitions.length} partition${r.partitions.length === 1 ? '' : 's'} (${held} held), ${r.members.length} member lease${r.members.length === 1 ? '' : 's'}`]
  if (r.partitions.length > 0) {
    lines.push('', table(
      ['partition', 'owner', 'member', 'epoch', 'lease', 'newest', 'positions', 'age', 'state bytes', 'snapshots'],
      r.partitions.map((p) => [
        p.partition, p.owner?.owner?.name ?? '-', p.owner?.member ?? '-', p.owner?.epoch === undefined ? '-' : String(p.owner.epoch), ownerLease(p.owner),
        p.newest?.id ?? '-', p.newest === null ? '-' : positionsText(p.newest.positions), p.newest === null ? '-' : duration(p.newest.ageMs),
        p.newest === null ? '-' : String(p.newest.stateBytes), String(p.snapshots),
      ]),
    ))
    for (const p of r.partitions) {
      for (const u of p.unreadable) lines.push(`${p.partition}: newer snapshot ${u.id} does not read: ${u.message}`)
      if (p.owner?.state === 'unreadable') lines.push(`${p.partition}: its claim does not read: ${p.owner.problem}`)
    }
  }
  if (r.members.length > 0) {
    lines.push('', table(['member', 'owner', 'lease', 'partitions'], r.members.map((m) => [m.id, m.owner?.name ?? '-', memberLease(m), m.partitions.join(', ') || '-'])))
    for (const m of r.members) if (m.state === 'unreadable') lines.push(`member ${m.id}: its lease does not read: ${m.problem}`)
  }
  return lines.join('\n')
}

function ownerLease(o: PartitionOwner | null): string {
  if (o === null) return 'no claim'
  if (o.state === 'released' || o.state === 'unreadable') return o.state
  if (o.leaseLeftMs === null || o.leaseLeftMs === undefined) return o.state === 'held' ? 'held, no lease' : `${o.state}, member lease gone`
  return o.state === 'held' ? `held, ${duration(o.leaseLeftMs)} left` : `expired ${duration(-o.leaseLeftMs)} ago`
}

function memberLease(m: MemberStatus): string {
  if (m.state !== 'held' && m.state !== 'expired') return m.state
  return m.state === 'held' ? `held, ${duration(m.leaseLeftMs!)} left` : `expired ${duration(-m.leaseLeftMs!)} ago`
}

/** A length of time for people: 850 ms, 12.5 s, 4 min, 3 h, 2 d. */
export function duration(ms: number): string {
  const abs = Math.max(0, ms)
  if (abs < 1000) return `${Math.round(abs)} ms`
  if (abs < 60_000) return `${(abs / 1000).toFixed(abs < 10_000 ? 1 : 0)} s`
  if (abs < 3_600_000) return `${Math.floor(abs / 60_000)} min`
  if (abs < 86_400_000) return `${Math.floor(abs / 3_600_000)} h`
  return `${Math.floor(abs / 86_400_000)} d`
}
