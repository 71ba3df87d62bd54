// A full disk (ENOSPC, injected by wrapping one call: test/torture/enospc.ts
// and test/helpers/faults.ts) on the partition store, the checkpoint
// directory, the file-system snapshot store and a restore's target: each
// fails with one documented error, loses nothing, and works again once
// space returns.
import { enospc } from './enospc.js' // first: it wraps the fs calls src/ binds when it loads
import { readdir, readFile, writeFile } from 'node:fs/promises'
import { join, sep } from 'node:path'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { FsSnapshotStore, openFileLog, PartitionProcessor, restoreSnapshot, Snapshotter } from '../../src/index.js'
import { interceptBatchWrites } from '../helpers/faults.js'
import { tempDir } from '../helpers/tmp.js'
import { addSale, fold, readTotals, saleAt, TOPIC, totals, type Sale } from '../runtime/fixtures/totals.js'
import { levelDigest, openKvStore, range, storeDigest, writeKeys } from '../snapshot/helpers.js'
import { deadline, recordFigures, rng, scaled } from './common.js'

const ROUNDS = scaled(2, 6)
const figures = { diskFullCases: 0, diskFullInjected: 0, diskFullErrors: {} as Record<string, number> }
afterEach(() => enospc.clear())
afterAll(() => {
  figures.diskFullInjected += enospc.injected
  recordFigures('disk-full', figures)
})

function noted(error: unknown): { code?: string; retriable?: boolean; cause?: { code?: string } } {
  expect(error, 'the call that found the disk full failed').toBeInstanceOf(Error)
  const e = error as { code?: string; retriable?: boolean; cause?: { code?: string } }
  figures.diskFullErrors[e.code ?? String(error)] = (figures.diskFullErrors[e.code ?? String(error)] ?? 0) + 1
  return e
}

async function walk(dir: string): Promise<string[]> {
  const out: string[] = []
  for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) out.push(...(await walk(path)))
    else out.push(path)
  }
  return out
}

describe('disk full', () => {
  it(`the partition store: a commit that finds the disk full fails with TIDEMARK_COMMIT_FAILED, nothing is lost, and the partition resumes (${ROUNDS} rounds)`, async () => {
    const r = rng('disk-full-store')
    const dir = tempDir('tidemark-torture-enospc-')
    const log = await openFileLog(join(dir, 'log'), { sync: false })
    try {
      // Enough for every round: at most 8 batches of 500 up to the full disk, then at most 3000 more.
      const events = 8000 * ROUNDS
      await Promise.all(Array.from({ length: events }, (_, i) => log.append(Buffer.from(JSON.stringify(saleAt(i))))))
      const expired = deadline(120_000)
      for (let round = 0; round < ROUNDS && !expired(); round++) {
        const processor = new PartitionProcessor<Sale>({ job: 'job', topic: TOPIC, partition: 0, log, path: join(dir, 'store'), states: [totals], handler: addSale, batchSize: 500 })
        const started = await processor.start()
        // An independent fold up to the position: nothing committed was lost.
        expect(await readTotals(processor.store)).toEqual(fold(Number(started.offset ?? -1n)))
        const at = r.int(1, 8)
        let reached = false
        const restore = interceptBatchWrites(async (n, real) => {
          if (n !== at) return real()
          reached = true
          figures.diskFullInjected++
          throw Object.assign(new Error('IO error: 000005.log: No space left on device'), { code: 'LEVEL_IO_ERROR' })
        })
        let committed = started.offset ?? -1n
        processor.on('commit', ({ offset }) => { committed = offset })
        const error = await processor.catchUp().then(() => undefined, (e: unknown) => e)
        restore()
        expect(reached, `round ${round}: batch write ${at} happened`).toBe(true)
        figures.diskFullCases++
        expect(noted(error), `round ${round}: the batch write ${at} found the disk full`).toMatchObject({ code: 'TIDEMARK_COMMIT_FAILED', retriable: true })
        await processor.close()
        // Space is back: a restart resumes after the last commit that returned.
        const again = new PartitionProcessor<Sale>({ job: 'job', topic: TOPIC, partition: 0, log, path: join(dir, 'store'), states: [totals], handler: addSale, batchSize: 500 })
        const resumed = await again.start()
        expect(resumed.offset, `round ${round}: every commit that returned is there`).toBe(committed === -1n ? undefined : committed)
        expect(await readTotals(again.store)).toEqual(fold(Number(committed)))
        await again.catchUp({ end: BigInt(Math.min(events, Number(committed) + 1 + r.int(500, 3000))) })
        await again.close()
      }
      const last = new PartitionProcessor<Sale>({ job: 'job', topic: TOPIC, partition: 0, log, path: join(dir, 'store'), states: [totals], handler: addSale })
      await last.start()
      await last.catchUp()
      expect(await readTotals(last.store)).toEqual(fold(events - 1))
      await last.close()
    } finally {
      await log.close()
    }
  })

  it('the checkpoint directory: a snapshot fails with TIDEMARK_SNAPSHOT_CHECKPOINT_FAILED, commits go on, nothing is left behind, and the next snapshot works', async () => {
    const dir = tempDir('tidemark-torture-enospc-')
    const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
    const store = await openKvStore(join(dir, 'store'))
    try {
      const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0 })
      let offset = (await writeKeys(store, range(0, 5000), 1, 0n, 1000)) + 1n
      const first = await snapshotter.takeSnapshot()
      const expired = deadline(120_000)
      for (let round = 0; round < ROUNDS && !expired(); round++) {
        offset = (await writeKeys(store, range(round * 100, round * 100 + 2000), round + 2, offset, 500)) + 1n
        // copyFile: a checkpoint that closes the store; write: one that keeps it open (copies of the logs and the MANIFEST).
        enospc.set((op, path) => (op === 'copyFile' || op === 'write') && path.startsWith(`${store.path}.checkpoints${sep}`))
        const injected = enospc.injected
        const error = await snapshotter.takeSnapshot().then(() => undefined, (e: unknown) => e)
        figures.diskFullCases++
        enospc.clear()
        expect(enospc.injected, 'the disk was full').toBeGreaterThan(injected)
        expect(noted(error), String(error)).toMatchObject({ code: 'TIDEMARK_SNAPSHOT_CHECKPOINT_FAILED', retriable: true })
        expect((await snapshotter.latest())?.id, 'the previous snapshot stays the latest').toBe(first.id)
        // Commits go on; the half-made checkpoint is gone.
        offset = (await writeKeys(store, range(9000, 9100), round + 2, offset, 50)) + 1n
        expect(await readdir(`${store.path}.checkpoints`).catch(() => [])).toEqual([])
      }
      const next = await snapshotter.takeSnapshot()
      const target = join(dir, 'restored')
      expect((await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target })).snapshot?.id).toBe(next.id)
      expect(await levelDigest(target)).toEqual(await storeDigest(store))
    } finally {
      await store.close()
      await dfs.close()
    }
  })

  for (const which of ['data object', 'manifest'] as const) {
    it(`the file-system snapshot store (${which}): TIDEMARK_SNAPSHOT_UPLOAD_FAILED caused by TIDEMARK_DFS_UNAVAILABLE, no temporary file left, the previous snapshot restores, and the next one works`, async () => {
      const dir = tempDir('tidemark-torture-enospc-')
      const root = join(dir, 'dfs')
      const dfs = new FsSnapshotStore({ root })
      const store = await openKvStore(join(dir, 'store'))
      try {
        const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0, graceMs: 0 })
        let offset = (await writeKeys(store, range(0, 5000), 1, 0n, 1000)) + 1n
        const first = await snapshotter.takeSnapshot()
        const firstDigest = await storeDigest(store)
        offset = (await writeKeys(store, range(0, 3000), 2, offset, 500)) + 1n
        const folder = which === 'manifest' ? `${sep}manifests${sep}` : `${sep}data${sep}`
        enospc.set((op, path) => op === 'write' && path.startsWith(root) && path.includes(folder))
        const injected = enospc.injected
        const error = await snapshotter.takeSnapshot().then(() => undefined, (e: unknown) => e)
        figures.diskFullCases++
        enospc.clear()
        expect(enospc.injected, 'the disk was full').toBeGreaterThan(injected)
        expect(noted(error), String(error)).toMatchObject({ code: 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', retriable: true, cause: { code: 'TIDEMARK_DFS_UNAVAILABLE' } })
        expect((await walk(root)).filter((p) => p.includes('.tidemark-tmp')), 'no temporary file is left').toEqual([])
        expect((await snapshotter.latest())?.id).toBe(first.id)
        const before = join(dir, 'restored-before')
        expect((await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target: before })).snapshot?.id).toBe(first.id)
        expect(await levelDigest(before)).toEqual(firstDigest)

        await writeKeys(store, range(0, 10), 3, offset, 10)
        const next = await snapshotter.takeSnapshot()
        const after = join(dir, 'restored-after')
        expect((await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target: after })).snapshot?.id).toBe(next.id)
        expect(await levelDigest(after)).toEqual(await storeDigest(store))
      } finally {
        await store.close()
        await dfs.close()
      }
    })
  }

  it("a restore's target: the restore fails, the local store and the user's files are untouched, nothing is left half-written, and a retry works", async () => {
    const dir = tempDir('tidemark-torture-enospc-')
    const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
    const store = await openKvStore(join(dir, 'store'))
    try {
      const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0 })
      const last = await writeKeys(store, range(0, 4000), 1, 0n, 1000)
      const site = join(dir, 'site')
      const target = join(site, 'target')
      // An older local store at the target, and the user's file beside it.
      const old = await openKvStore(target)
      await writeKeys(old, range(0, 10), 9, 0n, 10)
      await old.close()
      const oldDigest = await levelDigest(target)
      await writeFile(join(site, 'notes.txt'), 'mine\n')
      await writeKeys(store, range(0, 10), 2, last + 1n, 10)
      const snapshot = await snapshotter.takeSnapshot()

      enospc.set((op, path) => op === 'write' && path.startsWith(site))
      const injected = enospc.injected
      const error = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target }).then(() => undefined, (e: unknown) => e)
      figures.diskFullCases++
      enospc.clear()
      expect(enospc.injected, 'the disk was full').toBeGreaterThan(injected)
      noted(error)
      expect(error, 'the restore fails with its documented code').toMatchObject({ code: 'TIDEMARK_RESTORE_WRITE_FAILED', retriable: true, details: { errno: 'ENOSPC' } })
      expect(await levelDigest(target), 'the local store is untouched').toEqual(oldDigest)
      expect(await readFile(join(site, 'notes.txt'), 'utf8')).toBe('mine\n')
      expect((await readdir(site)).sort(), 'no temporary directory is left').toEqual(['notes.txt', 'target'])

      const result = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target })
      expect(result.snapshot?.id).toBe(snapshot.id)
      expect(await levelDigest(target)).toEqual(await storeDigest(store))
    } finally {
      await store.close()
      await dfs.close()
    }
  })
})
