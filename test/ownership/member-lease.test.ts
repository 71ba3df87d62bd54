// Member leases (src/ownership/member-lease.ts): one lease per process that
// every claim of the process holds by, so that renewals do not grow with
// partitions; a claim whose member lease ran out is taken like an expired
// one; a stopped process that resumes looks at its claims before it commits.
import { join } from 'node:path'
import { afterEach, expect, it, onTestFinished } from 'vitest'
import { acquireClaim, FsSnapshotStore, MemberLease, openFileLog, PartitionProcessor, readClaim, valueState, type SnapshotStore } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'

const stores: FsSnapshotStore[] = []
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close()
})

function store(): FsSnapshotStore {
  const s = new FsSnapshotStore({ root: join(tempDir('tidemark-member-'), 'snapshots') })
  stores.push(s)
  return s
}

/** Counts puts by key kind, and resolves `renewed(n)` once the member object was written n times. */
function countPuts(s: FsSnapshotStore): { claims: () => number; renewed: (n: number) => Promise<void> } {
  const put = s.put.bind(s)
  let claims = 0
  let members = 0
  const waiting: Array<{ n: number; resolve: () => void }> = []
  s.put = async (key, body, options) => {
    const result = await put(key, body, options)
    if (key.endsWith('/owner.json')) claims++
    if (key.includes('/_members/')) {
      members++
      for (const w of waiting.splice(0)) {
        if (members >= w.n) w.resolve()
        else waiting.push(w)
      }
    }
    return result
  }
  return { claims: () => claims, renewed: (n) => members >= n ? Promise.resolve() : new Promise((resolve) => waiting.push({ n, resolve })) }
}

const counts = valueState<number>('counts')

function processor(options: { s: SnapshotStore; dir: string; partition: number; memberLease: MemberLease; log: Awaited<ReturnType<typeof openFileLog>> }): PartitionProcessor<{ n: number }> {
  return new PartitionProcessor<{ n: number }>({
    job: 'job', log: options.log, topic: 'src', partition: options.partition, path: join(options.dir, `p${options.partition}`), states: [counts],
    handler: (tx, event) => { tx.value(counts).put('n', (tx.value(counts).getSync('n') ?? 0) + event.n) },
    snapshots: { store: options.s, schedule: { intervalMs: 0, everyEvents: 0 } },
    ownership: { memberLease: options.memberLease },
  })
}

/** A processor of partition 0 on a member lease with a clock the test moves, caught up on 10 events; `append(n)` adds n more. */
async function caughtUp(s: FsSnapshotStore): Promise<{ lease: MemberLease; p: PartitionProcessor<{ n: number }>; advance(ms: number): void; clock(): number; append(n: number): Promise<void> }> {
  let now = Date.now()
  const lease = await MemberLease.start({ store: s, job: 'job', leaseMs: 60_000, clock: () => now })
  const log = await openFileLog(join(tempDir(), 'log'))
  onTestFinished(() => log.close())
  const append = async (n: number): Promise<void> => {
    for (let i = 0; i < n; i++) await log.append(Buffer.from(JSON.stringify({ n: 1 })))
  }
  await append(10)
  const p = processor({ s, dir: tempDir(), partition: 0, memberLease: lease, log })
  await p.start()
  expect(await p.catchUp()).toBe(10)
  return { lease, p, advance: (ms) => { now += ms }, clock: () => now, append }
}

it('20 processors of one process hold their claims by one member lease: renewals write the member object only', async () => {
  const s = store()
  const puts = countPuts(s)
  const lease = await MemberLease.start({ store: s, job: 'job', leaseMs: 300 })
  const log = await openFileLog(join(tempDir(), 'log'))
  onTestFinished(() => log.close())
  const dir = tempDir()
  const processors = Array.from({ length: 20 }, (_, p) => processor({ s, dir, partition: p, memberLease: lease, log }))
  for (const p of processors) await p.start()
  const claimsAtStart = puts.claims()
  expect(claimsAtStart).toBe(20)
  const claim = await readClaim(s, 'job', 7)
  expect(claim?.record).toMatchObject({ leaseMs: null, leaseUntil: null, member: lease.key })
  // Three renewals of the member lease (every 100 ms): the claims are not written again.
  await puts.renewed(4)
  expect(puts.claims()).toBe(claimsAtStart)
  for (const p of processors) await p.close()
  // Each close releases its own claim.
  expect(puts.claims()).toBe(claimsAtStart + 20)
  await lease.release()
  expect(lease.state).toBe('released')
})

it('a claim is taken by another process once its member lease has run out by that process\'s clock, not before', async () => {
  const s = store()
  const lease = await MemberLease.start({ store: s, job: 'job', leaseMs: 60_000 })
  const held = await acquireClaim({ store: s, job: 'job', partition: 0, memberLease: lease })
  await expect(acquireClaim({ store: s, job: 'job', partition: 0 })).rejects.toMatchObject({ code: 'TIDEMARK_OWNERSHIP_CONFLICT', details: { reason: 'live-member' } })
  // Another host whose clock is past the lease (the process was killed a minute ago).
  const next = await acquireClaim({ store: s, job: 'job', partition: 0, clock: () => Date.now() + 61_000 })
  expect(next.epoch).toBeGreaterThan(held.epoch)
  await expect(held.check()).rejects.toMatchObject({ code: 'TIDEMARK_OWNERSHIP_LOST' })
  await lease.release()
})

it('a stopped process whose member lease ran out and whose claim was taken commits nothing when it resumes', async () => {
  const s = store()
  let now = Date.now()
  const lease = await MemberLease.start({ store: s, job: 'job', leaseMs: 60_000, clock: () => now })
  const log = await openFileLog(join(tempDir(), 'log'))
  onTestFinished(() => log.close())
  for (let i = 0; i < 10; i++) await log.append(Buffer.from(JSON.stringify({ n: 1 })))
  const zombie = processor({ s, dir: tempDir(), partition: 0, memberLease: lease, log })
  await zombie.start()
  expect(await zombie.catchUp()).toBe(10)
  // The process is stopped (SIGSTOP) past its lease: another one takes the claim.
  now += 61_000
  const next = await acquireClaim({ store: s, job: 'job', partition: 0, clock: () => now })
  // It resumes with more events to apply: its lease has run out by its own clock,
  // so before the commit it renews the lease and looks at its claim.
  for (let i = 0; i < 5; i++) await log.append(Buffer.from(JSON.stringify({ n: 1 })))
  await expect(zombie.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_OWNERSHIP_LOST' })
  expect(zombie.offset).toBe(9n)
  expect(lease.expirations).toBe(1)
  await zombie.close()
  await expect(next.check()).resolves.toBeUndefined()
  await next.release()
  await lease.release()
})

it('a renewal that starts in time but lands after another process marked the lease run out counts an expiration: the claim taken meanwhile is found before the next commit', async () => {
  const s = store()
  const { lease, p: zombie, advance, clock, append } = await caughtUp(s)
  // The renewal's write is held up in the store (a slow disk, a stopped NFS server)...
  const put = s.put.bind(s)
  let land!: () => void
  const landed = new Promise<void>((resolve) => { land = resolve })
  let held = false
  s.put = async (key, body, options) => {
    if (key === lease.key && !held) {
      held = true
      await landed
    }
    return put(key, body, options)
  }
  advance(59_000)
  const renewal = lease.renew()
  // ...past the lease, and meanwhile another process reads the lease as run out and takes the claim.
  advance(2_000)
  const next = await acquireClaim({ store: s, job: 'job', partition: 0, clock })
  land()
  await renewal
  expect(lease.expired).toBe(false)
  expect(lease.expirations).toBe(1)
  // The zombie committed nothing while the lease was out; its next commit looks at the claim first.
  await append(5)
  await expect(zombie.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_OWNERSHIP_LOST' })
  expect(zombie.offset).toBe(9n)
  await zombie.close()
  await next.release()
  await lease.release()
})

it('a lease that ran out and was renewed with nobody taking a claim counts no expiration, and no claim is looked at', async () => {
  const s = store()
  const { lease, p, advance, clock, append } = await caughtUp(s)
  const head = s.head.bind(s)
  let claimHeads = 0
  s.head = (key) => {
    if (key.endsWith('/owner.json')) claimHeads++
    return head(key)
  }
  // The process was stopped past its lease; nobody took anything.
  advance(61_000)
  await append(5)
  expect(await p.catchUp()).toBe(5)
  expect(lease.expired).toBe(false)
  expect(lease.expirations).toBe(0)
  expect(claimHeads).toBe(0)
  // Marked by an acquirer that found it run out: the renewal counts it, and the claim is looked at.
  advance(61_000)
  const other = await readClaim(s, 'job', 0)
  await expect(acquireClaim({ store: s, job: 'job', partition: 0, clock })).resolves.toMatchObject({ epoch: other!.record!.epoch + 1 })
  await append(5)
  claimHeads = 0
  await expect(p.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_OWNERSHIP_LOST' })
  expect(lease.expirations).toBe(1)
  expect(claimHeads).toBeGreaterThanOrEqual(1)
  await p.close()
  await lease.release()
})

it('an acquirer whose mark loses to the holder\'s renewal finds the lease live and takes nothing', async () => {
  const s = store()
  let now = Date.now()
  const lease = await MemberLease.start({ store: s, job: 'job', leaseMs: 60_000, clock: () => now })
  const held = await acquireClaim({ store: s, job: 'job', partition: 0, memberLease: lease })
  now += 61_000
  // The holder renews between the acquirer's read of its lease and the acquirer's mark.
  const get = s.get.bind(s)
  let renewed = false
  s.get = async (key) => {
    const body = await get(key)
    if (key === lease.key && !renewed) {
      renewed = true
      await lease.renew()
    }
    return body
  }
  await expect(acquireClaim({ store: s, job: 'job', partition: 0, clock: () => now })).rejects.toMatchObject({ code: 'TIDEMARK_OWNERSHIP_CONFLICT', details: { reason: 'live-member' } })
  expect(renewed).toBe(true)
  expect(lease.expirations).toBe(0)
  await expect(held.check()).resolves.toBeUndefined()
  await held.release()
  await lease.release()
})

it('acquirers taking several claims of a run-out lease at once mark it once, and its holder\'s release goes on from the mark', async () => {
  const s = store()
  let now = Date.now()
  const lease = await MemberLease.start({ store: s, job: 'job', leaseMs: 60_000, clock: () => now })
  const held = await Promise.all([0, 1, 2, 3, 4, 5].map((partition) => acquireClaim({ store: s, job: 'job', partition, memberLease: lease })))
  const put = s.put.bind(s)
  let marks = 0
  s.put = async (key, body, options) => {
    const result = await put(key, body, options)
    if (key === lease.key && body.toString().includes('"takenAt"')) marks++
    return result
  }
  now += 61_000
  const taken = await Promise.all(held.map((claim) => acquireClaim({ store: s, job: 'job', partition: claim.partition, clock: () => now })))
  expect(taken.map((claim, i) => claim.epoch - held[i]!.epoch)).toEqual([1, 1, 1, 1, 1, 1])
  expect(marks).toBe(1)
  for (const claim of held) await expect(claim.check()).rejects.toMatchObject({ code: 'TIDEMARK_OWNERSHIP_LOST' })
  await lease.release()
  expect(lease.state).toBe('released')
  expect(lease.expirations).toBe(1)
})

it('a lease object changed by anything but a mark is lost', async () => {
  const s = store()
  const events: string[] = []
  const lease = await MemberLease.start({ store: s, job: 'job', leaseMs: 60_000, onEvent: (e) => events.push(e.type) })
  const chunks: Buffer[] = []
  for await (const chunk of await s.get(lease.key)) chunks.push(chunk as Buffer)
  const record = JSON.parse(Buffer.concat(chunks).toString()) as Record<string, unknown>
  await s.put(lease.key, Buffer.from(JSON.stringify({ ...record, takenAt: 1, leaseUntil: 1 })))
  await expect(lease.renew()).rejects.toMatchObject({ code: 'TIDEMARK_OWNERSHIP_LOST', details: { reason: 'member-lease-changed' } })
  expect(lease.state).toBe('lost')
  expect(events).toEqual(['lost'])
})
