import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { afterEach, describe, expect, it } from 'vitest'
import { restoreSnapshot, Snapshotter, TidemarkError, type PutOptions, type PutResult } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { fixture, levelDigest, storeDigest, type Fixture } from './helpers.js'

const fixtures: Fixture[] = []
afterEach(async () => {
  await Promise.all(fixtures.splice(0).map((f) => f.close()))
})

async function setup(keys = 10_000, options: Parameters<typeof fixture>[2] = {}): Promise<Fixture> {
  const f = await fixture(tempDir('tidemark-faults-'), keys, { gcAfterSnapshot: false, ...options })
  fixtures.push(f)
  return f
}

type Put = (key: string, body: Readable | Uint8Array, options?: PutOptions) => Promise<PutResult>

/** Wraps the store's put: `fail(key, n)` decides for the n-th call (from 1) whether to throw instead. */
function failPut(f: Fixture, fail: (key: string, n: number, body: Readable | Uint8Array) => Promise<Error | undefined> | Error | undefined): () => void {
  const put: Put = f.dfs.put.bind(f.dfs)
  let n = 0
  f.dfs.put = async (key, body, options) => {
    const error = await fail(key, ++n, body)
    if (error !== undefined) throw error
    return put(key, body, options)
  }
  return () => { f.dfs.put = put }
}

const unavailable = (): TidemarkError => new TidemarkError('TIDEMARK_DFS_UNAVAILABLE', 'injected: 503 Slow Down, after 5 attempts')

describe('snapshot store faults', () => {
  for (const which of ['data object', 'manifest'] as const) {
    it(`a ${which} put that fails after the store's retries fails the snapshot; the previous one stays the latest and processing goes on`, async () => {
      const f = await setup()
      const previous = await f.snapshotter.takeSnapshot()
      await f.write(0, 1000, 2)
      const restorePut = failPut(f, (key) => ((which === 'manifest') === key.includes('/manifests/') ? unavailable() : undefined))

      const err = await f.snapshotter.takeSnapshot().catch((e: unknown) => e)
      expect(err).toMatchObject({ code: 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', retriable: true, cause: { code: 'TIDEMARK_DFS_UNAVAILABLE' } })
      expect((err as Error).message).toMatch(/previous snapshot stays the latest/)
      expect((await f.snapshotter.latest())?.id).toBe(previous.id)
      expect(f.snapshotter.inFlight).toBe(false)

      // Commits go on, and the next snapshot (the store is back) is complete.
      await f.write(1000, 2000, 3)
      restorePut()
      const next = await f.snapshotter.takeSnapshot()
      const digest = await storeDigest(f.store)
      expect((await f.snapshotter.latest())?.id).toBe(next.id)
      const target = join(f.dir, 'restored')
      const restored = await restoreSnapshot({ snapshotStore: f.dfs, job: 'job', partition: 0, target })
      expect(restored.snapshot?.id).toBe(next.id)
      expect(await levelDigest(target)).toEqual(digest)

      // What the failed attempt uploaded is referenced by nothing; gc sweeps it.
      const gc = await new Snapshotter({ snapshotStore: f.dfs, partitionStore: f.store, job: 'job', partition: 0, graceMs: 0 }).gc()
      if (which === 'manifest') expect(gc.deletedObjects).toHaveLength(1)
      expect(gc.deletedManifests).toEqual([])
    })
  }

  it('a connection that drops in the middle of an object fails the snapshot without leaving anything half-read', async () => {
    const f = await setup()
    await f.snapshotter.takeSnapshot()
    await f.write(0, 5000, 2)
    failPut(f, async (key, _n, body) => {
      if (!key.includes('/data/')) return undefined
      let read = 0
      for await (const chunk of body as AsyncIterable<Buffer>) {
        read += chunk.length
        if (read > 100_000) break
      }
      return new TidemarkError('TIDEMARK_DFS_UNAVAILABLE', 'injected: connection reset')
    })
    await expect(f.snapshotter.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED' })
    await f.write(5000, 6000, 3)
  })

  it('a store that refuses for good (access denied) is not retriable', async () => {
    const f = await setup(1000)
    failPut(f, () => new TidemarkError('TIDEMARK_DFS_ACCESS_DENIED', 'injected: 403'))
    await expect(f.snapshotter.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', retriable: false })
  })
})

describe('ownership', () => {
  it('a snapshot of a newer epoch fences the old owner (TIDEMARK_SNAPSHOT_FENCED)', async () => {
    const f = await setup(2000)
    await f.snapshotter.takeSnapshot()
    const newOwner = new Snapshotter({ snapshotStore: f.dfs, partitionStore: f.store, job: 'job', partition: 0, epoch: 1 })
    const taken = await newOwner.takeSnapshot()
    expect(taken).toMatchObject({ epoch: 1, sequence: 1, full: false })
    await expect(f.snapshotter.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_FENCED', retriable: false, details: { newerEpoch: 1 } })
    expect((await newOwner.latest())?.id).toBe(taken.id)
  })

  it('a writer that loses the race for a sequence is fenced, and its manifest is not written', async () => {
    const f = await setup(2000)
    await f.snapshotter.takeSnapshot()
    let other: Buffer | undefined
    failPut(f, async (key) => {
      if (key.includes('/manifests/') && other === undefined) {
        // Another writer commits the same (epoch, sequence) a moment earlier.
        other = Buffer.from('{"written by":"someone else"}')
        await writeFile(join(f.dir, 'dfs', ...key.split('/')), other)
      }
      return undefined
    })
    await expect(f.snapshotter.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_FENCED', cause: { code: 'TIDEMARK_DFS_OBJECT_EXISTS' } })
  })

  it('the loser is fenced (not a retriable upload failure) also when the winner\'s manifest is larger than its own', async () => {
    const f = await setup(2000)
    await f.snapshotter.takeSnapshot()
    let ours: number | undefined
    failPut(f, async (key, _n, body) => {
      if (key.includes('/manifests/') && ours === undefined) {
        // The other writer's snapshot lists more files: a longer manifest.
        ours = (body as Uint8Array).byteLength
        await writeFile(join(f.dir, 'dfs', ...key.split('/')), Buffer.alloc(ours * 3, 'x'))
      }
      return undefined
    })
    await expect(f.snapshotter.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_FENCED', retriable: false, cause: { code: 'TIDEMARK_DFS_OBJECT_EXISTS' } })
    expect(ours).toBeGreaterThan(0)
  })
})

describe('one snapshot at a time', () => {
  it('a second takeSnapshot while one runs is refused with TIDEMARK_SNAPSHOT_IN_PROGRESS, also from another Snapshotter of the store', async () => {
    const f = await setup(5000)
    const other = new Snapshotter({ snapshotStore: f.dfs, partitionStore: f.store, job: 'job', partition: 0 })
    const first = f.snapshotter.takeSnapshot()
    expect(f.snapshotter.inFlight).toBe(true)
    await expect(f.snapshotter.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_IN_PROGRESS', retriable: true })
    await expect(other.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_IN_PROGRESS' })
    await first
    await other.takeSnapshot()
  })

  it('a checkpoint that cannot be made fails with TIDEMARK_SNAPSHOT_CHECKPOINT_FAILED and uploads nothing', async () => {
    const f = await setup(1000)
    const blocker = join(f.dir, 'not-a-directory')
    await writeFile(blocker, '')
    const snapshotter = new Snapshotter({ snapshotStore: f.dfs, partitionStore: f.store, job: 'job', partition: 0, checkpointDir: join(blocker, 'checkpoints') })
    await expect(snapshotter.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_CHECKPOINT_FAILED', retriable: true })
    expect(await snapshotter.listSnapshots()).toEqual([])
    await f.write(0, 10, 2)
  })

  it('options are checked once, with messages that name the option', () => {
    const f = { snapshotStore: {} as never, partitionStore: {} as never, job: 'job', partition: 0 }
    expect(() => new Snapshotter(f)).toThrow(/snapshotStore must be a SnapshotStore/)
    expect(() => new Snapshotter({ ...f, snapshotStore: fixtures[0]?.dfs ?? ({ put() {}, get() {}, list() {} } as never), partitionStore: 1 as never })).toThrow(/partitionStore must be an open PartitionStore/)
  })
})
