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

it('a renewal that starts in time but lands after the lease ran out counts as an expiration: a claim taken meanwhile is found before the next commit', async () => {
  const s = store()
  let now = Date.now()
  const lease = await MemberLease.start({ store: s, job: 'job', leaseMs: 60_000, clock: () => now })
  const log = await openFileLog(join(tempDir(), 'log'))
  onTestFinished(() => log.close())
  for (let i = 0; i < 10; i++) await log.append(Buffer.from(JSON.stringify({ n: 1 })))
  const zombie = processor({ s, dir: tempDir(), partition: 0, memberLease: lease, log })
  await zombie.start()
  expect(await zombie.catchUp()).toBe(10)
  // The renewal's write is held up in the store (a slow disk, a stopped NFS server)...
  const put = s.put.bind(s)
  let land!: () => void
  const landed = new Promise<void>((resolve) => { land = resolve })
  s.put = async (key, body, options) => {
    if (key === lease.key) await landed
    return put(key, body, options)
  }
  now += 59_000
  const renewal = lease.renew()
  // ...past the lease, and meanwhile another process reads the lease as run out and takes the claim.
  now += 2_000
  const next = await acquireClaim({ store: s, job: 'job', partition: 0, clock: () => now })
  land()
  await renewal
  expect(lease.expired).toBe(false)
  expect(lease.expirations).toBe(1)
  // The zombie committed nothing while the lease was out; its next commit looks at the claim first.
  for (let i = 0; i < 5; i++) await log.append(Buffer.from(JSON.stringify({ n: 1 })))
  await expect(zombie.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_OWNERSHIP_LOST' })
  expect(zombie.offset).toBe(9n)
  await zombie.close()
  await next.release()
  await lease.release()
})

it('a renewal that lands before the lease runs out counts no expiration', async () => {
  const s = store()
  let now = Date.now()
  const lease = await MemberLease.start({ store: s, job: 'job', leaseMs: 60_000, clock: () => now })
  now += 59_999
  await lease.renew()
  expect(lease.expirations).toBe(0)
  now += 60_000
  await lease.renew()
  expect(lease.expirations).toBe(1)
  await lease.release()
})
