/**
 * What Tidemark asks of S3, by request kind (issue 13), counted through a
 * wrapper around the real S3 store on radosgw (bench/_counting-store.ts),
 * for a PartitionProcessor wired as users run it (claim, scheduler,
 * defaults): per snapshot in steady state (with and without changes), per
 * GC run, per start (empty, on an intact local store, by restore of a
 * chain of snapshots) and per hand-off (close with a snapshot, next start).
 * Then the same per steady-state snapshot for a Snapshotter used directly
 * (no claim; `snapshotter*PerSnapshot`), as a stream engine embeds it.
 *
 * Claim renewals are not per snapshot but per minute (a conditional PUT
 * every leaseMs / 3); the bench holds a long lease so that none falls into
 * a measured window, and reports the default's rate beside. Then renewals
 * per process: standalone processors of one process holding 1 and 100
 * partitions by one MemberLease (`renewalPutsPerMinutePerProcess1`,
 * `...100`), and by a lease per claim for comparison; counted over a window
 * at a 3 s lease and scaled to the default 30 s one.
 *
 * Then the LISTs of a member's standby copies per minute
 * (`standbyListsPerMinutePerMember1`, `...500`): SnapshotFollowers of 1 and
 * 500 partitions sharing one SnapshotPacer, as a StatefulConsumer member's
 * copies do (standby.syncsPerInterval, default 16), with nothing new to
 * download; counted over 5 intervals at a tenth of the default interval and
 * scaled to it.
 *
 * Prints one JSON line and saves it with the other benches' figures
 * (bench/results/requests.json, committed; TIDEMARK_REQUESTS_FILE writes a
 * copy elsewhere too); `npm run readme:cost` (scripts/readme-cost.ts)
 * turns it into docs/cost.md.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'
import { CLAIM_DEFAULTS, MemberLease, openFileLog, PartitionProcessor, PartitionStore, SnapshotFollower, SnapshotPacer, Snapshotter, valueState, type FileLog, type SnapshotSettings } from '../src/index.js'
import { CONSUMER_DEFAULTS } from '../connectors/kafka/consumer/options.js'
import { GC_CADENCE_DEFAULTS } from '../src/snapshot/gc.js'
import { CountingStore, diffCounts, getClass, putClass, zeroCounts, type RequestCounts } from './_counting-store.js'
import { saveFigures } from './_figures.js'
import { benchDir, emit, intFlags, loadAvg, round } from './_util.js'
import { benchS3 } from './snapshot.js'

interface Event { key: string; amount: number }
const totals = valueState<number>('totals')
const kv = valueState<string>('kv')

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { snapshots: 30, eventsPerSnapshot: 200, keys: 2000, chain: 8, directSnapshots: 20, directKeys: 5000 })
  const dir = benchDir('requests')
  const s3 = await benchS3('bench-requests')
  try {
    const counting = new CountingStore(s3.store('requests'))
    const log = await openFileLog(join(dir.path, 'log'), { sync: false })
    let next = 0
    const append = async (n: number): Promise<void> => {
      for (let i = 0; i < n; i++, next++) await log.append(Buffer.from(JSON.stringify({ key: `k${(next * 7919) % opts.keys}`, amount: 1 })))
    }
    const processor = (path: string): PartitionProcessor<Event> => new PartitionProcessor<Event>({
      job: 'bench', log, topic: 'events', partition: 0, path, states: [totals],
      handler: async (tx, e) => { tx.value(totals).put(e.key, ((await tx.value(totals).get(e.key)) ?? 0) + e.amount) },
      // Snapshots only when asked, so that each one is measured alone.
      snapshots: { store: counting, schedule: { intervalMs: 0, everyBytes: 0 } } satisfies SnapshotSettings,
      // No renewal inside a measured window (reported separately below).
      ownership: { leaseMs: 3_600_000, takeover: 'force' },
    })
    const measure2 = async <T>(store: CountingStore, fn: () => Promise<T>): Promise<{ counts: RequestCounts; value: T }> => {
      const before = store.snapshot()
      const value = await fn()
      return { counts: diffCounts(store.snapshot(), before), value }
    }
    const measure = <T>(fn: () => Promise<T>): Promise<{ counts: RequestCounts; value: T }> => measure2(counting, fn)

    // The first start: nothing anywhere.
    await append(opts.keys)
    const a = processor(join(dir.path, 'a'))
    const firstStart = await measure(() => a.start())
    await a.catchUp()
    const first = await measure(() => a.snapshot())

    // Steady state: events, then a snapshot; GC runs on its cadence.
    const steady: RequestCounts[] = []
    const gcSnapshots: RequestCounts[] = []
    const unchanged: RequestCounts[] = []
    for (let i = 0; i < opts.snapshots; i++) {
      await append(opts.eventsPerSnapshot)
      await a.catchUp()
      const { counts, value } = await measure(() => a.snapshot())
      if (value === undefined) throw new Error('a snapshot failed')
      ;(value.gc === undefined ? steady : gcSnapshots).push(counts)
      if (i % 10 === 5) {
        // Nothing committed since the last one.
        const again = await measure(() => a.snapshot())
        if (again.value?.gc === undefined) unchanged.push(again.counts)
      }
    }
    // A chain for the restore below: opts.chain more incremental snapshots.
    for (let i = 0; i < opts.chain; i++) {
      await append(opts.eventsPerSnapshot)
      await a.catchUp()
      await a.snapshot()
    }
    const close = await measure(() => a.close())

    // A start on the intact local store it left.
    const local = processor(join(dir.path, 'a'))
    const localStart = await measure(() => local.start())
    if (localStart.value.source !== 'local') throw new Error(`expected a local start, got ${localStart.value.source}`)
    await local.close()

    // A start by restore, into an empty directory.
    const restorer = processor(join(dir.path, 'b'))
    const restoreStart = await measure(() => restorer.start())
    if (restoreStart.value.source !== 'snapshot') throw new Error(`expected a restore, got ${restoreStart.value.source}`)
    await restorer.catchUp()

    // A hand-off: the owner closes with a snapshot, the next one restores it.
    await append(opts.eventsPerSnapshot)
    await restorer.catchUp()
    const handoffClose = await measure(async () => {
      await restorer.snapshot()
      await restorer.close()
    })
    const arriving = processor(join(dir.path, 'c'))
    const handoffStart = await measure(() => arriving.start())
    await arriving.close()

    // The Snapshotter used directly (a stream engine's own wiring): no
    // claim, no beforeCommit, default GC cadence; 20 snapshots of a
    // 20,000-key store changing 5,000 keys each. Steady state: neither the
    // first snapshot nor one that ran a GC. writerCheck 'create-only' is
    // what docs/snapshots.md tells such a user to set; the default
    // ('listing') is measured beside it for information.
    const directRun = async (writerCheck: 'listing' | 'create-only'): Promise<{ steady: RequestCounts[]; gcRuns: number }> => {
      const store = new CountingStore(s3.store(`snapshotter-${writerCheck}`))
      const partitionStore = await PartitionStore.open({ path: join(dir.path, `direct-${writerCheck}`), states: [kv] })
      const snapshotter = new Snapshotter({ snapshotStore: store, partitionStore, job: 'bench', partition: 0, writerCheck })
      const steady: RequestCounts[] = []
      let gcRuns = 0
      let offset = 0n
      for (let s = 0; s < opts.directSnapshots; s++) {
        for (let i = 0; i < opts.directKeys; i += 1000) {
          const tx = partitionStore.transaction()
          for (let k = i; k < Math.min(i + 1000, opts.directKeys); k++) {
            const key = (s * opts.directKeys + k) % (4 * opts.directKeys)
            tx.value(kv).put(`k${String(key).padStart(8, '0')}`, `v${s}:${key}:${'abcdefghij'.repeat(4)}`)
          }
          await tx.commit({ topic: 'events', partition: 0, offset: offset++ })
        }
        const { counts, value } = await measure2(store, () => snapshotter.takeSnapshot())
        if (value.gc !== undefined) gcRuns++
        else if (s > 0) steady.push(counts)
      }
      await snapshotter.close()
      await partitionStore.close()
      return { steady, gcRuns }
    }
    const direct = await directRun('create-only')
    const listing = await directRun('listing')

    const avg = (xs: readonly RequestCounts[], f: (c: RequestCounts) => number): number => (xs.length === 0 ? 0 : round(xs.reduce((s, c) => s + f(c), 0) / xs.length, 3))
    const sum = (xs: readonly RequestCounts[]): RequestCounts => xs.reduce((t, c) => ({ put: t.put + c.put, get: t.get + c.get, head: t.head + c.head, list: t.list + c.list, delete: t.delete + c.delete }), zeroCounts())
    const perKind = (xs: readonly RequestCounts[]): RequestCounts => ({ put: avg(xs, (c) => c.put), get: avg(xs, (c) => c.get), head: avg(xs, (c) => c.head), list: avg(xs, (c) => c.list), delete: avg(xs, (c) => c.delete) })
    const steadyAvg = perKind(steady)
    const gcRun = gcSnapshots.length === 0 ? undefined : {
      putClass: round(avg(gcSnapshots, putClass) - avg(steady, putClass), 3),
      getClass: round(avg(gcSnapshots, getClass) - avg(steady, getClass), 3),
      list: round(avg(gcSnapshots, (c) => c.list) - avg(steady, (c) => c.list), 3),
      delete: round(avg(gcSnapshots, (c) => c.delete) - avg(steady, (c) => c.delete), 3),
    }
    const renewals1 = await renewalPutsPerMinute(counting, dir.path, log, 1, true)
    const renewals100 = await renewalPutsPerMinute(counting, dir.path, log, 100, true)
    const perClaim100 = await renewalPutsPerMinute(counting, dir.path, log, 100, false)
    const standbys1 = await standbyListsPerMinute(counting, dir.path, 1)
    const standbys500 = await standbyListsPerMinute(counting, dir.path, 500)
    const renewIntervalMs = Math.floor(CLAIM_DEFAULTS.leaseMs / 3)
    const line = {
      bench: 'requests',
      store: 'radosgw',
      putClassPerSnapshot: avg(steady, putClass),
      getClassPerSnapshot: avg(steady, getClass),
      listPerSnapshot: avg(steady, (c) => c.list),
      requestsPerStart: putClass(localStart.counts) + getClass(localStart.counts),
      steadySnapshots: steady.length,
      steadyPerSnapshot: steadyAvg,
      unchangedPerSnapshot: unchanged.length === 0 ? undefined : { putClass: avg(unchanged, putClass), getClass: avg(unchanged, getClass), list: avg(unchanged, (c) => c.list) },
      gcEverySnapshots: GC_CADENCE_DEFAULTS.gcEverySnapshots,
      gcIntervalMs: GC_CADENCE_DEFAULTS.gcIntervalMs,
      gcRuns: gcSnapshots.length,
      perGcRun: gcRun,
      firstStart: firstStart.counts,
      firstSnapshot: first.counts,
      startLocal: localStart.counts,
      startRestore: { ...restoreStart.counts, chain: opts.snapshots + opts.chain + 1 },
      close: close.counts,
      handoff: { close: handoffClose.counts, start: handoffStart.counts, total: sum([handoffClose.counts, handoffStart.counts]) },
      snapshotterPutClassPerSnapshot: avg(direct.steady, putClass),
      snapshotterGetClassPerSnapshot: avg(direct.steady, getClass),
      snapshotterListPerSnapshot: avg(direct.steady, (c) => c.list),
      snapshotterSteadySnapshots: direct.steady.length,
      snapshotterPerSnapshot: perKind(direct.steady),
      snapshotterGcRuns: direct.gcRuns,
      snapshotterSetup: `a Snapshotter used directly (no claim, no beforeCommit, writerCheck 'create-only', other options default): ${opts.directSnapshots} snapshots of a store changing ${opts.directKeys} keys each`,
      snapshotterListingPerSnapshot: perKind(listing.steady),
      claimRenewalsPerMinute: round(60_000 / renewIntervalMs, 3),
      renewalPutsPerMinutePerProcess1: renewals1,
      renewalPutsPerMinutePerProcess100: renewals100,
      renewalPutsPerMinutePerProcess100PerClaim: perClaim100,
      renewalSetup: 'PUTs to claim and member-lease objects while N standalone processors of one process hold their partitions, idle: by one MemberLease (…PerProcess1, …PerProcess100), and by a lease per claim (…PerClaim); counted over 5 renewal intervals at leaseMs 3000 and scaled to the default 30 s lease',
      claimLeaseMs: CLAIM_DEFAULTS.leaseMs,
      standbyListsPerMinutePerMember1: standbys1,
      standbyListsPerMinutePerMember500: standbys500,
      standbySetup: `LISTs of SnapshotFollowers of 1 and 500 partitions of one member sharing one SnapshotPacer of ${CONSUMER_DEFAULTS.standbySyncsPerInterval} slots (standby.syncsPerInterval), nothing new to follow; counted over 5 intervals at a tenth of the default ${CONSUMER_DEFAULTS.standbyIntervalMs} ms and scaled to it`,
      loadAvg: loadAvg(),
      date: new Date().toISOString(),
      node: process.version,
    }
    emit(line)
    // For `npm run readme:cost` (docs/cost.md) and `npm run
    // readme:bench` (the bench table), like every bench's figures: in
    // bench/results, which is committed, so that a fresh clone regenerates
    // the same tables (this line used to go to an ignored file only).
    saveFigures('requests', args, line)
    if (process.env.TIDEMARK_REQUESTS_FILE !== undefined) writeFileSync(process.env.TIDEMARK_REQUESTS_FILE, `${JSON.stringify(line)}\n`)
    await log.close()
  } finally {
    await s3.close()
    dir.cleanup()
  }
}

/** Renewal PUTs per minute, at the default lease, of one process whose `partitions` idle processors hold their claims. */
async function renewalPutsPerMinute(store: CountingStore, dir: string, log: FileLog, partitions: number, byMember: boolean): Promise<number> {
  const leaseMs = 3000
  const job = `renew-${partitions}-${byMember ? 'member' : 'claim'}`
  const memberLease = byMember ? await MemberLease.start({ store, job, leaseMs }) : undefined
  const processors = Array.from({ length: partitions }, (_, p) => new PartitionProcessor<Event>({
    job, log, topic: 'events', partition: p, path: join(dir, job, `p${p}`), states: [totals],
    handler: () => undefined,
    snapshots: { store, schedule: { intervalMs: 0, everyBytes: 0, everyEvents: 0 } },
    ownership: memberLease === undefined ? { leaseMs } : { memberLease },
  }))
  for (const p of processors) await p.start()
  // Five renewal intervals, after the starts' own writes.
  const windowMs = (5 * leaseMs) / 3
  const before = store.snapshot()
  await delay(windowMs)
  const puts = diffCounts(store.snapshot(), before).put
  for (const p of processors) await p.close()
  await memberLease?.release()
  return round((puts / windowMs) * 60_000 * (leaseMs / CLAIM_DEFAULTS.leaseMs), 2)
}

/** LISTs per minute, at the consumer's default standby interval, of one member's `copies` standby copies sharing a pacer. */
async function standbyListsPerMinute(store: CountingStore, dir: string, copies: number): Promise<number> {
  const intervalMs = CONSUMER_DEFAULTS.standbyIntervalMs / 10
  const pacer = new SnapshotPacer({ slots: CONSUMER_DEFAULTS.standbySyncsPerInterval })
  const job = `standby-${copies}`
  const followers = Array.from({ length: copies }, (_, p) => new SnapshotFollower({ snapshotStore: store, job, partition: p, dir: join(dir, job, `p${p}`) }))
  for (const f of followers) f.start({ intervalMs, pacer })
  // After the first turns, five intervals.
  await delay(intervalMs)
  const windowMs = 5 * intervalMs
  const before = store.snapshot()
  await delay(windowMs)
  const lists = diffCounts(store.snapshot(), before).list
  await Promise.all(followers.map((f) => f.dispose()))
  return round((lists / windowMs) * 60_000 * (intervalMs / CONSUMER_DEFAULTS.standbyIntervalMs), 2)
}
