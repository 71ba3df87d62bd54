// Partition claims (src/ownership/) on both snapshot stores: the file system
// and radosgw. Lease expiry is driven by the `clock` option, never by waiting.
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { describe, expect, it, onTestFinished, vi } from 'vitest'
import { S3SnapshotStore, type S3SnapshotStoreOptions } from '../../connectors/s3/index.js'
import {
  CLAIM_DEFAULTS,
  FsSnapshotStore,
  SnapshotLayout,
  Snapshotter,
  TidemarkError,
  acquireClaim,
  readClaim,
  type AcquireClaimOptions,
  type SnapshotStore,
} from '../../src/index.js'
import { openKvStore, range, writeKeys } from '../snapshot/helpers.js'
import { useTestBucket } from '../helpers/s3-bucket.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { readAll } from '../../src/testing/streams.js'

type StoreSpec = { kind: 'fs'; root: string } | { kind: 's3'; options: S3SnapshotStoreOptions }

const bucket = useTestBucket('claims')

const backends: { name: string; open: () => { store: SnapshotStore; spec: StoreSpec } }[] = [
  {
    name: 'the file system',
    open: () => {
      const root = tempDir('tidemark-claims-')
      const store = new FsSnapshotStore({ root })
      onTestFinished(() => store.close())
      return { store, spec: { kind: 'fs', root } }
    },
  },
  {
    name: 'radosgw',
    open: () => {
      const options = bucket.storeOptions(randomName('t'))
      const store = new S3SnapshotStore(options)
      onTestFinished(async () => {
        await bucket.emptyPrefix(store.options.prefix)
        await store.close()
      })
      return { store, spec: { kind: 's3', options } }
    },
  },
]

/**
 * Starts two processes that each acquire job/0's claim when told "go", tells
 * both at once, and checks that exactly one won while the other got
 * TIDEMARK_OWNERSHIP_CONFLICT; returns the winner's outcome.
 */
async function raceTwoProcesses(spec: StoreSpec): Promise<{ epoch: number; id: string }> {
  const children = [0, 1].map(() => spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'acquire-child.ts'), JSON.stringify(spec)], { stdio: ['pipe', 'pipe', 'inherit'] }))
  const exited = children.map((child) => new Promise((resolve) => child.on('exit', resolve)))
  const lines = children.map((child) => createInterface({ input: child.stdout! })[Symbol.asyncIterator]())
  for (const line of lines) expect((await line.next()).value).toBe('READY')
  for (const child of children) child.stdin!.end('go\n')
  const outcomes = await Promise.all(lines.map(async (line) => JSON.parse((await line.next()).value as string) as { ok: boolean; epoch?: number; id?: string; code?: string }))
  await Promise.all(exited)
  expect(outcomes.filter((o) => !o.ok)).toEqual([{ ok: false, code: 'TIDEMARK_OWNERSHIP_CONFLICT' }])
  const won = outcomes.filter((o) => o.ok)
  expect(won).toHaveLength(1)
  return won[0] as { epoch: number; id: string }
}

/** A clock the test moves. */
function manualClock(start = 1_800_000_000_000): { now: () => number; advance: (ms: number) => void } {
  let t = start
  return { now: () => t, advance: (ms) => { t += ms } }
}

const conflict = (reason: string) => ({ name: 'TidemarkError', code: 'TIDEMARK_OWNERSHIP_CONFLICT', retriable: true, details: { reason } })
const lost = (reason: string) => ({ name: 'TidemarkError', code: 'TIDEMARK_OWNERSHIP_LOST', retriable: false, details: { reason } })

for (const backend of backends) {
  describe(`partition claims on ${backend.name}`, () => {
    const base = (store: SnapshotStore, more: Partial<AcquireClaimOptions> = {}): AcquireClaimOptions => ({ store, job: 'job', partition: 0, ...more })

    it('creates <job>/<partition>/owner.json with epoch above minEpoch, and reads it back', async () => {
      const { store } = backend.open()
      const clock = manualClock()
      const claim = await acquireClaim(base(store, { minEpoch: 41, owner: 'worker-a', generation: 7, clock: clock.now }))
      expect(claim.epoch).toBe(42)
      expect(claim.key).toBe(new SnapshotLayout('job', 0).claimKey)
      expect(claim.key).toBe('job/0/owner.json')
      expect(claim.leaseMs).toBe(CLAIM_DEFAULTS.leaseMs)
      expect(claim.leaseUntil).toBe(clock.now() + 30_000)
      expect(claim.renewIntervalMs).toBe(10_000)
      expect(claim.state).toBe('held')
      expect(claim.etag).toBe((await store.head(claim.key))?.etag)
      const stored = await readClaim(store, 'job', 0)
      expect(stored).toEqual({ etag: claim.etag, record: claim.record })
      expect(JSON.parse((await readAll(await store.get(claim.key))).toString())).toEqual({
        format: 'tidemark-claim/1', job: 'job', partition: '0', epoch: 42,
        owner: { id: claim.owner.id, name: 'worker-a', host: expect.any(String), pid: process.pid, bootId: expect.any(String), pidNamespace: expect.any(String), startTime: expect.any(Number) },
        leaseMs: 30_000, leaseUntil: clock.now() + 30_000, generation: 7, takenAt: clock.now(),
      })
      expect(claim.owner.id).toMatch(/^[0-9a-f]{16}$/)
      expect(await readClaim(store, 'job', 1)).toBeUndefined()
    })

    it('of acquirers racing for a free partition, exactly one wins; the others get TIDEMARK_OWNERSHIP_CONFLICT', async () => {
      const { store } = backend.open()
      const results = await Promise.allSettled(Array.from({ length: 6 }, (_, i) => acquireClaim(base(store, { owner: `racer-${i}` }))))
      const won = results.filter((r) => r.status === 'fulfilled')
      expect(won).toHaveLength(1)
      // A slower acquirer reads the winner's claim instead of racing its write.
      for (const result of results) if (result.status === 'rejected') expect(result.reason).toMatchObject({ code: 'TIDEMARK_OWNERSHIP_CONFLICT', details: { reason: expect.stringMatching(/^(race|live-lease)$/) } })
      const winner = (won[0] as PromiseFulfilledResult<Awaited<ReturnType<typeof acquireClaim>>>).value
      expect(winner.epoch).toBe(1)
      expect((await readClaim(store, 'job', 0))?.record?.owner.id).toBe(winner.owner.id)
      await winner.check()
    })

    it('of acquirers racing for an expired claim, exactly one wins, with a higher epoch', async () => {
      const { store } = backend.open()
      const clock = manualClock()
      const old = await acquireClaim(base(store, { clock: clock.now, leaseMs: 1000 }))
      clock.advance(1001)
      const results = await Promise.allSettled(Array.from({ length: 6 }, () => acquireClaim(base(store, { clock: clock.now }))))
      const won = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []))
      expect(won).toHaveLength(1)
      // A slower acquirer reads the winner's claim instead of racing its write.
      for (const result of results) if (result.status === 'rejected') expect(result.reason).toMatchObject({ code: 'TIDEMARK_OWNERSHIP_CONFLICT', details: { reason: expect.stringMatching(/^(race|live-lease)$/) } })
      expect(won[0]!.epoch).toBe(old.epoch + 1)
      await expect(old.check()).rejects.toMatchObject({ ...lost('taken-over'), details: { epoch: old.epoch, currentEpoch: old.epoch + 1, currentOwner: won[0]!.owner } })
    })

    it('of two processes started at the same moment, exactly one holds the claim (create-only, then compare-and-swap)', async () => {
      const { store, spec } = backend.open()
      // A free partition: both create-only puts race.
      const first = await raceTwoProcesses(spec)
      expect((await readClaim(store, 'job', 0))?.record).toMatchObject({ epoch: 1, owner: { id: first.id } })
      // A released claim: both compare-and-swaps race against the same etag.
      const operator = await acquireClaim(base(store, { takeover: 'force' }))
      expect(await operator.release()).toBe(true)
      const second = await raceTwoProcesses(spec)
      expect((await readClaim(store, 'job', 0))?.record).toMatchObject({ epoch: 3, owner: { id: second.id } })
    })

    it('does not take a live lease without force; force takes it, and the old owner\'s check and renew fail with TIDEMARK_OWNERSHIP_LOST', async () => {
      const { store } = backend.open()
      const clock = manualClock()
      const first = await acquireClaim(base(store, { clock: clock.now, owner: 'first' }))
      clock.advance(29_999)
      await expect(acquireClaim(base(store, { clock: clock.now }))).rejects.toMatchObject({ ...conflict('live-lease'), details: { epoch: 1, holder: { name: 'first' } }, message: /takeover: 'force'/ })
      await first.check() // the failed attempt changed nothing
      const second = await acquireClaim(base(store, { clock: clock.now, takeover: 'force', owner: 'second' }))
      expect(second.epoch).toBe(2)
      await expect(first.check()).rejects.toMatchObject({ ...lost('taken-over'), message: /second .* epoch 2; stop processing/ })
      // Lost for good: no further request is needed to say so.
      await expect(first.renew()).rejects.toMatchObject(lost('taken-over'))
      expect(first.state).toBe('lost')
      expect(await first.release()).toBe(false)
      await second.check()
    })

    it('takes over an expired lease with a higher epoch; the old owner\'s renew fails with TIDEMARK_OWNERSHIP_LOST', async () => {
      const { store } = backend.open()
      const clock = manualClock()
      const old = await acquireClaim(base(store, { clock: clock.now, leaseMs: 5000, minEpoch: 3 }))
      clock.advance(4000)
      await old.renew() // renewed: runs until 9000
      expect(old.leaseUntil).toBe(clock.now() + 5000)
      clock.advance(4999)
      await expect(acquireClaim(base(store, { clock: clock.now }))).rejects.toMatchObject(conflict('live-lease'))
      clock.advance(1)
      const next = await acquireClaim(base(store, { clock: clock.now }))
      expect(next.epoch).toBe(old.epoch + 1)
      await expect(old.renew()).rejects.toMatchObject({ ...lost('taken-over'), details: { currentEpoch: next.epoch } })
      await expect(old.check()).rejects.toMatchObject(lost('taken-over'))
      expect((await readClaim(store, 'job', 0))?.record?.owner.id).toBe(next.owner.id)
    })

    it('release lets the next owner in at once, keeping the epoch growing', async () => {
      const { store } = backend.open()
      const clock = manualClock()
      const first = await acquireClaim(base(store, { clock: clock.now }))
      expect(await first.release()).toBe(true)
      expect(first.state).toBe('released')
      expect(first.leaseUntil).toBe(0)
      expect(await first.release()).toBe(false)
      await expect(first.check()).rejects.toMatchObject(lost('released'))
      await expect(first.renew()).rejects.toMatchObject(lost('released'))
      expect((await readClaim(store, 'job', 0))?.record).toMatchObject({ epoch: 1, leaseUntil: 0, releasedAt: clock.now() })
      const second = await acquireClaim(base(store, { clock: clock.now }))
      expect(second.epoch).toBe(2)
    })

    it('epochs only grow: above the previous claim and above minEpoch, whichever is higher', async () => {
      const { store } = backend.open()
      const epochs: number[] = []
      for (const minEpoch of [0, 10, 3, 3, 20]) {
        const claim = await acquireClaim(base(store, { minEpoch }))
        epochs.push(claim.epoch)
        expect(await claim.release()).toBe(true)
      }
      expect(epochs).toEqual([1, 11, 12, 13, 21])
    })

    it('a claim without a lease is taken only by force, and records the group generation', async () => {
      const { store } = backend.open()
      const clock = manualClock()
      const member = await acquireClaim(base(store, { clock: clock.now, leaseMs: null, generation: 3, takeover: 'force' }))
      expect(member.leaseUntil).toBeNull()
      expect(member.renewIntervalMs).toBeUndefined()
      clock.advance(365 * 24 * 3600 * 1000)
      await expect(acquireClaim(base(store, { clock: clock.now }))).rejects.toMatchObject(conflict('no-lease'))
      await member.renew()
      expect(member.leaseUntil).toBeNull()
      const next = await acquireClaim(base(store, { clock: clock.now, leaseMs: null, generation: 4, takeover: 'force' }))
      expect(next.record).toMatchObject({ epoch: 2, generation: 4, leaseUntil: null })
      await expect(member.check()).rejects.toMatchObject(lost('taken-over'))
    })

    it('force does not take a live claim of a newer group generation back for an older one', async () => {
      const { store } = backend.open()
      const clock = manualClock()
      const current = await acquireClaim(base(store, { clock: clock.now, generation: 6, takeover: 'force' }))
      // The member that generation 5 assigned the partition to, acquiring late.
      await expect(acquireClaim(base(store, { clock: clock.now, generation: 5, takeover: 'force' }))).rejects.toMatchObject({
        ...conflict('newer-generation'), details: { generation: 6, epoch: 1 },
      })
      await current.check()
      // Once the newer generation's lease has run out (a group that was recreated starts counting again), it is taken.
      clock.advance(30_000)
      const recreated = await acquireClaim(base(store, { clock: clock.now, generation: 1, takeover: 'force' }))
      expect(recreated.record).toMatchObject({ epoch: 2, generation: 1 })
      // And an operator's force without a generation always takes it.
      const operator = await acquireClaim(base(store, { clock: clock.now, takeover: 'force' }))
      expect(operator.epoch).toBe(3)
      await expect(recreated.check()).rejects.toMatchObject(lost('taken-over'))
    })

    it('an unreadable claim object needs force; its holder finds its claim lost', async () => {
      const { store } = backend.open()
      const holder = await acquireClaim(base(store))
      const key = holder.key
      await store.put(key, Buffer.from('{ not json'))
      await expect(holder.check()).rejects.toMatchObject(lost('unreadable'))
      await expect(acquireClaim(base(store))).rejects.toMatchObject({ ...conflict('unreadable'), message: /not JSON.*pass takeover: 'force'/ })
      // The epoch of a junk claim is unknown: minEpoch is the floor.
      const forced = await acquireClaim(base(store, { takeover: 'force', minEpoch: 7 }))
      expect(forced.epoch).toBe(8)
      for (const junk of ['', '[]', JSON.stringify({ ...forced.record, job: 'other' }), JSON.stringify({ ...forced.record, epoch: 0 }), 'x'.repeat(20_000)]) {
        await store.put(key, Buffer.from(junk))
        await expect(acquireClaim(base(store))).rejects.toMatchObject(conflict('unreadable'))
      }
      expect((await acquireClaim(base(store, { takeover: 'force' }))).epoch).toBe(1)
    })

    it('a conditional write whose first answer was lost, and whose retry failed the condition, counts as done', async () => {
      const { store } = backend.open()
      const claim = await acquireClaim(base(store))
      // One wrapped call: the real put lands, then the caller sees what a retry of it would answer.
      const put = store.put.bind(store)
      const spy = vi.spyOn(store, 'put').mockImplementationOnce(async (key, body, options) => {
        await put(key, body, options)
        throw new TidemarkError('TIDEMARK_DFS_PRECONDITION_FAILED', 'injected: the retry found the version the first attempt wrote', { details: { key } })
      })
      await claim.renew()
      expect(spy).toHaveBeenCalledTimes(1)
      expect(claim.etag).toBe((await store.head(claim.key))?.etag)
      await claim.check()
      await claim.renew()
    })

    it('a race that nobody won (both conditional puts refused, as radosgw does with 409) is run again, and one acquirer gets the claim', async () => {
      const { store } = backend.open()
      const first = await acquireClaim(base(store))
      await first.release()
      // One wrapped call: the compare-and-swap is refused without landing, as
      // when two conditional requests were in flight at once and both got 409.
      const spy = vi.spyOn(store, 'put').mockImplementationOnce(async (key) => {
        throw new TidemarkError('TIDEMARK_DFS_PRECONDITION_FAILED', 'injected: a conflicting conditional request was in flight', { details: { key } })
      })
      const claim = await acquireClaim(base(store))
      expect(spy.mock.calls.length).toBeGreaterThanOrEqual(2)
      expect(claim.epoch).toBe(first.epoch + 1)
      await claim.check()
    })

    it('check costs one HEAD while the claim is held; renewals and checks run in call order', async () => {
      const { store } = backend.open()
      const claim = await acquireClaim(base(store))
      const head = vi.spyOn(store, 'head')
      const get = vi.spyOn(store, 'get')
      await claim.check()
      expect(head).toHaveBeenCalledTimes(1)
      expect(get).not.toHaveBeenCalled()
      // Started together, the check must compare against the renewal's etag, not race it.
      await Promise.all([claim.renew(), claim.check(), claim.renew(), claim.check()])
      expect(claim.state).toBe('held')
    })

    it('snapshots take the claim\'s epoch, and garbage collection leaves the claim alone', async () => {
      const { store } = backend.open()
      const claim = await acquireClaim(base(store, { minEpoch: 4 }))
      const partitionStore = await openKvStore(join(tempDir(), 'store'))
      onTestFinished(() => partitionStore.close())
      const snapshotter = new Snapshotter({ snapshotStore: store, partitionStore, job: 'job', partition: 0, epoch: claim.epoch, retain: 1, graceMs: 0, gcEverySnapshots: 1 })
      const offset = await writeKeys(partitionStore, range(0, 100), 1, 0n)
      const first = await snapshotter.takeSnapshot({ full: true })
      await writeKeys(partitionStore, range(0, 100), 2, offset + 1n)
      await snapshotter.takeSnapshot({ full: true })
      const keys: string[] = []
      for await (const info of store.list('job/0/')) keys.push(info.key)
      // The first snapshot is gone (its manifest and objects), the claim is not.
      expect(keys.filter((key) => key.includes(first.id))).toEqual([])
      expect(keys).toContain('job/0/owner.json')
      expect(keys.filter((key) => key.includes('/manifests/'))).toEqual([expect.stringMatching(/manifests\/0000000005-/)])
      await claim.check()
    })
  })
}

describe('acquireClaim options', () => {
  it('refuses bad options with errors that name them', async () => {
    const store = new FsSnapshotStore({ root: tempDir() })
    await expect(acquireClaim(undefined as unknown as AcquireClaimOptions)).rejects.toThrow(TypeError)
    await expect(acquireClaim({ store: {} as SnapshotStore, job: 'j', partition: 0 })).rejects.toThrow(/store must be a SnapshotStore/)
    const noCas = Object.create(store, { capabilities: { value: { conditionalPut: true, compareAndSwap: false } } }) as SnapshotStore
    await expect(acquireClaim({ store: noCas, job: 'j', partition: 0 })).rejects.toThrow(/capabilities.compareAndSwap/)
    await expect(acquireClaim({ store, job: 'j', partition: 0, leaseMs: 0 })).rejects.toThrow(/leaseMs \(0\)/)
    await expect(acquireClaim({ store, job: 'j', partition: 0, takeover: 'always' as 'force' })).rejects.toThrow(/takeover must be/)
    await expect(acquireClaim({ store, job: 'j', partition: 0, minEpoch: -1 })).rejects.toThrow(/minEpoch \(-1\)/)
    await expect(acquireClaim({ store, job: 'j', partition: 0, generation: 1.5 })).rejects.toThrow(/generation \(1.5\)/)
    await expect(acquireClaim({ store, job: 'j', partition: 0, owner: '' })).rejects.toThrow(/owner/)
    await expect(acquireClaim({ store, job: 'a/b', partition: 0 })).rejects.toThrow(/job/)
    await expect(acquireClaim({ store, job: 'j', partition: 0, minEpoch: 9_999_999_999 })).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED' })
    expect(await readClaim(store, 'j', 0)).toBeUndefined()
  })
})
