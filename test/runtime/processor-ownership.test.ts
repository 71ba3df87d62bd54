// The partition's claim as a PartitionProcessor with snapshots takes and
// holds it (docs/ownership.md): one owner at a time, a fenced owner stops
// within the batch in flight, a released claim lets the next owner in at
// once. On the file system and on radosgw. Lease expiry is driven by the
// `clock` option and failed renewals are awaited as events, never slept for.
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { describe, expect, it, onTestFinished } from 'vitest'
import { S3SnapshotStore, type S3SnapshotStoreOptions } from '../../connectors/s3/index.js'
import {
  FsSnapshotStore, PartitionProcessor, PartitionStore, TidemarkError, acquireClaim, openFileLog, readClaim,
  type EventHandler, type FileLog, type OwnershipEvent, type SnapshotStore,
} from '../../src/index.js'
import { useTestBucket } from '../helpers/s3-bucket.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { addSale, fold, readTotals, saleAt, TOPIC, totals, type Sale } from './fixtures/totals.js'

type Options = ConstructorParameters<typeof PartitionProcessor<Sale>>[0]
type StoreSpec = { kind: 'fs'; root: string } | { kind: 's3'; options: S3SnapshotStoreOptions }

const JOB = 'owned-job'
const MANIFESTS = `${JOB}/0/manifests/`
const CLAIM_KEY = `${JOB}/0/owner.json`

const bucket = useTestBucket('owned')

/** One snapshot location; open() gives another store object on it (another process's, in effect), so that a wrapped call of one owner's store leaves the other's alone. */
interface Backend { name: string; location(): { spec: StoreSpec; open(): SnapshotStore } }

const backends: Backend[] = [
  {
    name: 'the file system',
    location: () => {
      const spec: StoreSpec = { kind: 'fs', root: tempDir('tidemark-owned-') }
      return {
        spec,
        open: () => {
          const store = new FsSnapshotStore({ root: spec.root })
          onTestFinished(() => store.close())
          return store
        },
      }
    },
  },
  {
    name: 'radosgw',
    location: () => {
      const spec: StoreSpec = { kind: 's3', options: bucket.storeOptions(randomName('t')) }
      onTestFinished(() => bucket.emptyPrefix(spec.options.prefix!))
      return {
        spec,
        open: () => {
          const store = new S3SnapshotStore(spec.options)
          onTestFinished(() => store.close())
          return store
        },
      }
    },
  },
]

async function filledLog(dir: string, events: number): Promise<FileLog> {
  const log = await openFileLog(dir, { sync: false })
  for (let i = 0; i < events; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
  onTestFinished(() => log.close())
  return log
}

function processor(path: string, log: FileLog, store: SnapshotStore, overrides: Partial<Options> = {}): PartitionProcessor<Sale> {
  return new PartitionProcessor<Sale>({
    job: JOB, topic: TOPIC, partition: 0, log, path, states: [totals], handler: addSale,
    batchSize: 100, pollIntervalMs: 5, snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    ...overrides,
  })
}

/** The processor's next 'ownership' event of this type. */
function nextOwnershipEvent<T extends OwnershipEvent['type']>(p: PartitionProcessor<Sale>, type: T): Promise<Extract<OwnershipEvent, { type: T }>> {
  return new Promise((resolve) => {
    const listener = (event: OwnershipEvent): void => {
      if (event.type !== type) return
      p.off('ownership', listener)
      resolve(event as Extract<OwnershipEvent, { type: T }>)
    }
    p.on('ownership', listener)
  })
}

/** addSale, except that it waits at `offset` (once) until released. */
function gatedHandler(offset: bigint): { handler: EventHandler<Sale>; reached: Promise<void>; release: () => void } {
  let reached!: () => void
  let release!: () => void
  const reachedP = new Promise<void>((resolve) => { reached = resolve })
  const released = new Promise<void>((resolve) => { release = resolve })
  return {
    reached: reachedP,
    release,
    handler: async (tx, sale, context) => {
      if (context.offset === offset) {
        reached()
        await released
      }
      await addSale(tx, sale, context)
    },
  }
}

/** The store's next put of a data object waits until released (an upload in flight); later ones are left alone. */
function holdNextDataPut(store: SnapshotStore): { started: Promise<void>; release: () => void } {
  const put = store.put.bind(store)
  let started!: () => void
  let release!: () => void
  const startedP = new Promise<void>((resolve) => { started = resolve })
  const released = new Promise<void>((resolve) => { release = resolve })
  store.put = async (key, body, options) => {
    if (!key.includes('/data/')) return put(key, body, options)
    store.put = put
    started()
    await released
    return put(key, body, options)
  }
  return { started: startedP, release }
}

/** While `blocked`, the store's compare-and-swaps of the claim (renewals) fail as a network error would. */
function failClaimRenewals(store: SnapshotStore): { blocked: boolean } {
  const state = { blocked: false }
  const put = store.put.bind(store)
  store.put = async (key, body, options) => {
    if (state.blocked && key === CLAIM_KEY && options?.ifMatch !== undefined) {
      throw new TidemarkError('TIDEMARK_DFS_REQUEST_FAILED', `injected: could not reach the store to put ${key}`, { retriable: true })
    }
    return put(key, body, options)
  }
  return state
}

async function manifestKeys(store: SnapshotStore): Promise<string[]> {
  const keys: string[] = []
  for await (const info of store.list(MANIFESTS)) keys.push(info.key)
  return keys
}

async function positionAt(path: string): Promise<bigint | undefined> {
  const store = await PartitionStore.open({ path, states: [totals] })
  try {
    return store.position(TOPIC, 0)
  } finally {
    await store.close()
  }
}

const conflict = (reason: string) => ({ name: 'TidemarkError', code: 'TIDEMARK_OWNERSHIP_CONFLICT', retriable: true, details: { reason } })
const lost = (details: Record<string, unknown>) => ({ name: 'TidemarkError', code: 'TIDEMARK_OWNERSHIP_LOST', retriable: false, details })

for (const backend of backends) {
  describe(`PartitionProcessor ownership on ${backend.name}`, () => {
    it('two processors of one partition started at the same moment (start() together): exactly one holds the claim; the other fails with TIDEMARK_OWNERSHIP_CONFLICT and touches nothing', async () => {
      const dir = tempDir()
      const log = await filledLog(join(dir, 'log'), 600)
      const at = backend.location()
      // An earlier owner left a snapshot and released the claim.
      const earlier = processor(join(dir, 'earlier'), log, at.open())
      await earlier.start()
      await earlier.catchUp({ end: 300n })
      const first = (await earlier.snapshot())!
      await earlier.close()

      const owners = [processor(join(dir, 'a'), log, at.open()), processor(join(dir, 'b'), log, at.open())]
      const outcomes = await Promise.allSettled(owners.map((p) => p.start()))
      const won = outcomes.findIndex((o) => o.status === 'fulfilled')
      expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1)
      const winner = owners[won]!
      const loser = owners[1 - won]!
      expect((outcomes[1 - won] as PromiseRejectedResult).reason).toMatchObject(conflict((outcomes[1 - won] as PromiseRejectedResult).reason.details.reason))
      expect(['race', 'live-lease']).toContain((outcomes[1 - won] as PromiseRejectedResult).reason.details.reason)
      // The loser never opened (nor restored into) its store directory.
      expect(existsSync(join(dir, won === 0 ? 'b' : 'a'))).toBe(false)
      expect(loser.claim).toBeUndefined()
      expect(loser.offset).toBeUndefined()
      await loser.close()

      const epoch = (outcomes[won] as PromiseFulfilledResult<{ epoch: number }>).value.epoch
      expect(epoch).toBe(first.epoch + 1)
      expect((await readClaim(at.open(), JOB, 0))?.record).toMatchObject({ epoch, owner: { id: winner.claim!.owner.id } })
      await winner.catchUp()
      const snap = (await winner.snapshot())!
      expect(snap.epoch).toBe(epoch)
      expect(await manifestKeys(at.open())).toEqual([first.key, snap.key].sort())
      expect(await readTotals(winner.store)).toEqual(fold(599))
      await winner.close()
    })

    it('two owners in two processes started on one go signal: exactly one holds the claim; the other fails with TIDEMARK_OWNERSHIP_CONFLICT and commits nothing', async () => {
      const dir = tempDir()
      await (await filledLog(join(dir, 'log'), 400)).close()
      const at = backend.location()
      const paths = [join(dir, 'c0'), join(dir, 'c1')]
      const children = paths.map((path) => spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'owner.ts'), JSON.stringify({ log: join(dir, 'log'), path, snapshots: at.spec })], { stdio: ['pipe', 'pipe', 'inherit'] }))
      onTestFinished(() => { for (const child of children) if (child.exitCode === null) child.kill('SIGKILL') })
      const exited = children.map((child) => new Promise<number | null>((resolve) => child.on('exit', resolve)))
      const lines = children.map((child) => createInterface({ input: child.stdout! })[Symbol.asyncIterator]())
      const next = async (i: number): Promise<Record<string, unknown>> => JSON.parse((await lines[i]!.next()).value as string) as Record<string, unknown>
      for (const i of [0, 1]) expect(await next(i)).toEqual({ type: 'ready' })
      for (const child of children) child.stdin!.write('go\n')
      const outcomes = await Promise.all([next(0), next(1)])
      const won = outcomes.findIndex((o) => o.type === 'started')
      expect(outcomes.filter((o) => o.type === 'started')).toHaveLength(1)
      expect(outcomes[1 - won]).toMatchObject({ type: 'refused', code: 'TIDEMARK_OWNERSHIP_CONFLICT', retriable: true })
      expect(await exited[1 - won]).toBe(0)
      expect(existsSync(paths[1 - won]!)).toBe(false)

      children[won]!.stdin!.end('finish\n')
      const done = await next(won)
      expect(done).toMatchObject({ type: 'done', epoch: outcomes[won]!.epoch, offset: '399' })
      expect(await exited[won]).toBe(0)
      // Every snapshot there is the winner's.
      expect(await manifestKeys(at.open())).toEqual([done.key])
      expect(await readClaim(at.open(), JOB, 0)).toMatchObject({ record: { epoch: outcomes[won]!.epoch, leaseUntil: 0 } })
    })

    it("a takeover with 'force' while the old owner runs: the old owner's run() rejects with TIDEMARK_OWNERSHIP_LOST within the batch in flight, and nothing of it commits afterwards", async () => {
      const dir = tempDir()
      const log = await filledLog(join(dir, 'log'), 1000)
      const at = backend.location()
      const gate = gatedHandler(550n)
      // Renewals every 500 ms: that is how the old owner learns of the takeover
      // here. (A forced acquire that loses the race to one of them tries again.)
      const old = processor(join(dir, 'a'), log, at.open(), { handler: gate.handler, ownership: { leaseMs: 1500 } })
      expect((await old.start()).epoch).toBe(1)
      await old.catchUp({ end: 300n })
      const before = (await old.snapshot())!
      const commits: bigint[] = []
      old.on('commit', ({ offset }) => commits.push(offset))
      const stop = new AbortController()
      const running = old.run(stop.signal)
      running.catch(() => undefined)
      await gate.reached // committed through 499, in the middle of batch 500..599

      const next = processor(join(dir, 'b'), log, at.open(), { ownership: { takeover: 'force' } })
      const lostEvent = nextOwnershipEvent(old, 'lost')
      expect(await next.start()).toMatchObject({ epoch: 2, source: 'snapshot', snapshot: before.id })
      expect((await lostEvent).error).toMatchObject(lost({ reason: 'taken-over', currentEpoch: 2 }))
      gate.release()
      await expect(running).rejects.toMatchObject(lost({ reason: 'taken-over', currentEpoch: 2, currentOwner: { id: next.claim!.owner.id } }))
      // The batch the handler was in (500..599) was not committed, nor any after it.
      expect(commits.every((offset) => offset <= 499n)).toBe(true)
      expect(await positionAt(join(dir, 'a'))).toBe(499n)
      await expect(old.snapshot()).rejects.toMatchObject({ code: 'TIDEMARK_PROCESSOR_CLOSED' })
      expect(await manifestKeys(at.open())).toEqual([before.key])

      await next.catchUp()
      expect(await readTotals(next.store)).toEqual(fold(999))
      expect(await next.snapshot()).toMatchObject({ epoch: 2 })
      await next.close()
      // The old owner did not release what it no longer held.
      expect((await readClaim(at.open(), JOB, 0))?.record).toMatchObject({ epoch: 2, owner: { id: next.claim!.owner.id } })
    })

    it('a snapshot whose upload is in flight when the claim is taken over does not commit: the claim is checked right before the manifest', async () => {
      const dir = tempDir()
      const log = await filledLog(join(dir, 'log'), 500)
      const at = backend.location()
      const oldStore = at.open()
      // The default lease: no renewal runs during the test, only the check before the manifest finds the takeover.
      const old = processor(join(dir, 'a'), log, oldStore)
      await old.start()
      await old.catchUp()
      const held = holdNextDataPut(oldStore)
      const failed: unknown[] = []
      old.on('snapshot-failed', (error) => failed.push(error))
      const snapshotting = old.snapshot()
      await held.started

      const next = processor(join(dir, 'b'), log, at.open(), { ownership: { takeover: 'force' } })
      expect((await next.start()).epoch).toBe(2)
      const lostEvent = nextOwnershipEvent(old, 'lost')
      held.release()
      expect(await snapshotting).toBeUndefined()
      expect((await lostEvent).error).toMatchObject(lost({ reason: 'taken-over', currentEpoch: 2 }))
      expect(failed).toEqual([]) // not a snapshot failure to retry: the end of this owner
      expect(await manifestKeys(at.open())).toEqual([])
      await expect(old.catchUp()).rejects.toMatchObject(lost({ reason: 'taken-over' }))

      await next.catchUp()
      expect(await next.snapshot()).toMatchObject({ epoch: 2, sequence: 0 })
      await next.close()
    })

    it('lease expiry: an owner whose renewals fail keeps the claim while its lease is live, is taken over with a higher epoch once it ran out, and then stops', async () => {
      const dir = tempDir()
      const log = await filledLog(join(dir, 'log'), 300)
      const at = backend.location()
      const oldStore = at.open()
      const renewals = failClaimRenewals(oldStore)
      const old = processor(join(dir, 'a'), log, oldStore, { ownership: { leaseMs: 6000 } })
      await old.start()
      await old.catchUp()
      const stop = new AbortController()
      const running = old.run(stop.signal)
      running.catch(() => undefined)
      renewals.blocked = true
      const failedRenewal = await nextOwnershipEvent(old, 'renew-failed')
      expect(failedRenewal.error).toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED' })
      expect(failedRenewal.leaseUntil).toBe(old.claim!.leaseUntil)

      // Still live: a new owner without force is refused, and touches nothing.
      const early = processor(join(dir, 'b'), log, at.open(), { ownership: { leaseMs: 6000 } })
      await expect(early.start()).rejects.toMatchObject(conflict('live-lease'))
      expect(existsSync(join(dir, 'b'))).toBe(false)

      // Past the lease by the new owner's clock: it takes over without force.
      const next = processor(join(dir, 'b'), log, at.open(), { ownership: { leaseMs: 6000, clock: () => Date.now() + 10_000 } })
      const started = await next.start()
      expect(started.epoch).toBeGreaterThan(old.claim!.epoch)
      expect(started.epoch).toBe(2)

      // The old owner's store answers again: its next renewal finds the new claim.
      renewals.blocked = false
      await expect(running).rejects.toMatchObject(lost({ reason: 'taken-over', currentEpoch: 2 }))
      await next.catchUp()
      expect(await readTotals(next.store)).toEqual(fold(299))
      await next.close()
    })

    it('close() releases the claim: the next owner starts at once without force; the old owner restarting in its old directory meanwhile is refused', async () => {
      const dir = tempDir()
      const log = await filledLog(join(dir, 'log'), 400)
      const at = backend.location()
      const first = processor(join(dir, 'a'), log, at.open())
      await first.start()
      await first.catchUp({ end: 200n })
      await first.close()
      expect(first.claim!.state).toBe('released')
      expect((await readClaim(at.open(), JOB, 0))?.record).toMatchObject({ epoch: 1, leaseUntil: 0, releasedAt: expect.any(Number) })

      const second = processor(join(dir, 'b'), log, at.open())
      expect((await second.start()).epoch).toBe(2)
      await second.catchUp()

      // The first owner comes back in its old directory: the live claim is not its to take.
      const back = processor(join(dir, 'a'), log, at.open())
      await expect(back.start()).rejects.toMatchObject(conflict('live-lease'))
      expect(await positionAt(join(dir, 'a'))).toBe(199n)
      expect(await second.snapshot()).toMatchObject({ epoch: 2 })
      await second.close()

      const again = processor(join(dir, 'a'), log, at.open())
      expect(await again.start()).toMatchObject({ epoch: 3, source: 'snapshot' })
      await again.catchUp()
      expect(await readTotals(again.store)).toEqual(fold(399))
      await again.close()
    })

    it('an owner that releases with a hand-off snapshot after the next owner listed the snapshots: the next owner restores that snapshot, not the one before', async () => {
      const dir = tempDir()
      const log = await filledLog(join(dir, 'log'), 400)
      const at = backend.location()
      const first = processor(join(dir, 'a'), log, at.open(), { snapshots: { store: at.open(), onClose: true, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } } })
      await first.start()
      await first.catchUp({ end: 100n })
      await first.snapshot() // the snapshot before, at 99
      await first.catchUp({ end: 300n })
      // The next owner's listing ends, then the first owner takes its
      // hand-off snapshot (at 299) and releases the claim, then the next
      // owner goes on to take the claim at once.
      const store = at.open()
      const list = store.list.bind(store)
      let handedOff: Promise<void> | undefined
      store.list = ((prefix: string, options?: Parameters<SnapshotStore['list']>[1]) => {
        const inner = list(prefix, options)
        if (!prefix.endsWith('/manifests/') || handedOff !== undefined) return inner
        handedOff = first.close()
        return (async function* () {
          const listed = []
          for await (const o of inner) listed.push(o)
          await handedOff
          yield* listed
        })()
      }) as SnapshotStore['list']
      const second = processor(join(dir, 'b'), log, store)
      const started = await second.start()
      expect(handedOff).toBeDefined()
      expect((await readClaim(at.open(), JOB, 0))?.record?.epoch).toBe(2)
      expect(started).toMatchObject({ source: 'snapshot', offset: 299n })
      expect(await second.catchUp()).toBe(100)
      expect(await readTotals(second.store)).toEqual(fold(399))
      await second.close()
    })
  })
}

describe('PartitionProcessor ownership', () => {
  it('an owner whose lease ran out by its own clock commits no batch until a renewal succeeds', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 400)
    const store = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const renewals = failClaimRenewals(store)
    let skew = 0
    // A lease of a minute: the timer does not renew during the test; the clock runs it out.
    const p = processor(join(dir, 'a'), log, store, { ownership: { leaseMs: 60_000, clock: () => Date.now() + skew } })
    await p.start()
    await p.catchUp({ end: 100n })
    skew = 61_000
    await p.catchUp({ end: 200n })
    // The commit renewed the lease first.
    expect(p.claim!.record.renewedAt).toBeGreaterThan(Date.now() + 60_000)
    expect(p.offset).toBe(199n)

    skew = 200_000
    renewals.blocked = true
    await expect(p.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_DFS_REQUEST_FAILED' })
    expect(await positionAt(join(dir, 'a'))).toBe(199n)
  })

  it('a snapshot fenced by a newer epoch (a writer that never held the claim) stops the partition too, not a snapshot failure to retry', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 400)
    const store = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    // GC (the full listing) after every snapshot: between listings the claim
    // check is what notices another owner, and this writer never claimed.
    const snapshots = { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 }, gcEverySnapshots: 1 }
    const p = processor(join(dir, 'a'), log, store, { snapshots })
    await p.start()
    await p.catchUp({ end: 200n })
    const mine = (await p.snapshot())!
    // An older Tidemark, which takes "highest epoch + 1" without a claim, commits epoch 2.
    const chunks: Buffer[] = []
    for await (const chunk of await store.get(mine.key)) chunks.push(chunk as Buffer)
    const doc = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>
    await store.put(`${MANIFESTS}0000000002-000000000001.json`, Buffer.from(`${JSON.stringify({ ...doc, epoch: 2, sequence: 1, id: '0000000002-000000000001' })}\n`))
    const failed: unknown[] = []
    p.on('snapshot-failed', (error) => failed.push(error))
    const lostEvent = nextOwnershipEvent(p, 'lost')
    await p.catchUp({ end: 250n })
    // Planned from what it knew (no listing since): it commits, below epoch 2,
    // so the planted manifest stays the latest; the GC run after it lists.
    expect(await p.snapshot()).toMatchObject({ epoch: 1 })
    await p.catchUp({ end: 300n })
    expect(await p.snapshot()).toBeUndefined()
    expect((await lostEvent).error).toMatchObject({ code: 'TIDEMARK_SNAPSHOT_FENCED', details: { newerEpoch: 2 } })
    expect(failed).toEqual([])
    await expect(p.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_FENCED' })
    expect(await positionAt(join(dir, 'a'))).toBe(299n)
  })

  it("a forced takeover that loses the race to a renewal of the holder it replaces tries again; one that loses to another new owner fails with TIDEMARK_OWNERSHIP_CONFLICT", async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 100)
    const root = join(dir, 'snapshots')
    const old = processor(join(dir, 'a'), log, new FsSnapshotStore({ root }))
    await old.start()
    /** A store whose first compare-and-swap of the claim lets `before()` run first. */
    const racing = (before: () => Promise<unknown>): FsSnapshotStore => {
      const store = new FsSnapshotStore({ root })
      const put = store.put.bind(store)
      let raced = false
      store.put = async (key, body, options) => {
        if (!raced && key === CLAIM_KEY && options?.ifMatch !== undefined) {
          raced = true
          await before()
        }
        return put(key, body, options)
      }
      onTestFinished(() => store.close())
      return store
    }
    const next = processor(join(dir, 'b'), log, racing(() => old.claim!.renew()), { ownership: { takeover: 'force' } })
    const lostEvent = nextOwnershipEvent(old, 'lost')
    expect((await next.start()).epoch).toBe(2)
    await old.snapshot()
    expect((await lostEvent).error).toMatchObject(lost({ reason: 'taken-over', currentEpoch: 2 }))

    const third = processor(join(dir, 'c'), log, racing(() => acquireClaim({ store: new FsSnapshotStore({ root }), job: JOB, partition: 0, takeover: 'force' })), { ownership: { takeover: 'force' } })
    await expect(third.start()).rejects.toMatchObject(conflict('race'))
    expect(existsSync(join(dir, 'c'))).toBe(false)
    await next.close()
  })

  it('validates the ownership options at construction', () => {
    const dir = tempDir()
    const store = new FsSnapshotStore({ root: dir })
    const base = {
      job: 'j', topic: 't', partition: 0, log: { read() {} } as unknown as FileLog, path: join(dir, 'x'), states: [], handler: () => {},
      snapshots: { store },
    }
    expect(() => new PartitionProcessor({ ...base, snapshots: undefined, ownership: {} })).toThrow(/options\.ownership needs options\.snapshots/)
    expect(() => new PartitionProcessor({ ...base, ownership: { leaseMs: 0 } })).toThrow(RangeError)
    expect(() => new PartitionProcessor({ ...base, ownership: { leaseMs: 2 ** 31 } })).toThrow(/ownership\.leaseMs must be an integer from 3 to 2147483647/)
    expect(() => new PartitionProcessor({ ...base, ownership: { leaseMs: '1s' as unknown as number } })).toThrow(/ownership\.leaseMs must be a number/)
    expect(() => new PartitionProcessor({ ...base, ownership: { takeover: 'always' as 'force' } })).toThrow(/ownership\.takeover/)
    expect(() => new PartitionProcessor({ ...base, ownership: { owner: '' } })).toThrow(/ownership\.owner/)
    expect(() => new PartitionProcessor({ ...base, ownership: { clock: 5 as unknown as () => number } })).toThrow(/ownership\.clock/)
    expect(() => new PartitionProcessor({ ...base, ownership: { lease: 5 } as never })).toThrow(/unknown option options\.ownership\.lease/)
    const noConditions = Object.assign(Object.create(store) as FsSnapshotStore, { capabilities: { conditionalPut: false, compareAndSwap: false } })
    expect(() => new PartitionProcessor({ ...base, snapshots: { store: noConditions } })).toThrow(/cannot hold the partition's claim/)
  })
})
