// transformState into the same job while its owner runs: the transform takes
// the partition's claim by force, so the running owner stops with
// TIDEMARK_OWNERSHIP_LOST (docs/ownership.md); the transformed snapshot is
// the partition's newest, and the next owner, started on the old owner's
// very directory, restores it (the old store is of another lineage), replays
// the rest of the log and loses nothing. The old owner learns of the
// takeover from its lease renewal; its rejection is awaited, never slept for.
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import {
  FsSnapshotStore, PartitionProcessor, PartitionStore, openFileLog, readClaim, transformState,
  type FileLog, type OwnershipEvent, type RestoreEvent, type SnapshotStore,
} from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import {
  NEW_STATES, OLD_STATES, TOPIC, foldRest, newHandler, oldHandler, oldTotals, readNewState, saleAt, toNewProgram, transformed, type Sale,
} from './fixtures/jobs.js'

const lost = { name: 'TidemarkError', code: 'TIDEMARK_OWNERSHIP_LOST', retriable: false }

function nextEvent<T>(subscribe: (listener: (value: T) => void) => () => void, accept: (value: T) => boolean): Promise<T> {
  return new Promise((resolve) => {
    const off = subscribe((value) => {
      if (!accept(value)) return
      off()
      resolve(value)
    })
  })
}

describe('transformState into the same job while an owner runs', () => {
  it('fences the owner (it stops with TIDEMARK_OWNERSHIP_LOST), publishes the newest snapshot, and the next owner on the same directory resumes from it with nothing lost', async () => {
    const dir = tempDir('tidemark-fence-')
    const log: FileLog = await openFileLog(join(dir, 'log'), { sync: false })
    onTestFinished(() => log.close())
    const append = async (from: number, to: number): Promise<void> => {
      for (let i = from; i < to; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
    }
    await append(0, 200)
    const store: SnapshotStore = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    onTestFinished(() => store.close())
    const path = join(dir, 'owner')

    // The old program runs, renewing a short lease (every 200 ms): that is how it learns of the takeover.
    const old = new PartitionProcessor<Sale>({
      job: 'sales', topic: TOPIC, partition: 0, log, path, states: OLD_STATES, handler: oldHandler,
      batchSize: 20, pollIntervalMs: 5, ownership: { leaseMs: 600 },
      snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    })
    const started = await old.start()
    await old.catchUp({ end: 100n })
    const before = (await old.snapshot())!
    expect(before.positions).toEqual([{ topic: TOPIC, partition: 0, offset: 99n }])
    const stop = new AbortController()
    onTestFinished(() => stop.abort())
    const running = old.run(stop.signal)
    running.catch(() => undefined)
    // The owner is past the snapshot when the transform fences it.
    await nextEvent<{ offset: bigint }>((l) => { old.on('commit', l); return () => old.off('commit', l) }, (c) => c.offset >= 150n)
    const lostEvent = nextEvent<OwnershipEvent>((l) => { old.on('ownership', l); return () => old.off('ownership', l) }, (e) => e.type === 'lost')

    const result = await transformState({
      snapshotStore: store,
      from: { job: 'sales', partition: 0, states: OLD_STATES },
      to: { job: 'sales' },
      states: NEW_STATES,
      transform: toNewProgram,
      workDir: join(dir, 'work'),
    })
    // The source was the newest snapshot; the new one is above the owner's epoch.
    expect(result).toMatchObject({ positions: [{ topic: TOPIC, partition: 0, offset: 99n }], source: { snapshot: before.id } })
    expect(result.snapshot.epoch).toBeGreaterThan(started.epoch)

    // The running owner stops with its lost-claim error.
    await expect(running).rejects.toMatchObject(lost)
    expect(await lostEvent).toMatchObject({ type: 'lost', error: lost })
    expect(old.claim?.state).toBe('lost')
    const reached = await positionOf(path)
    expect(reached).toBeGreaterThanOrEqual(150n)
    // The claim was released by the transform with its snapshot named, and not by the fenced owner.
    expect((await readClaim(store, 'sales', 0))?.record).toMatchObject({ epoch: result.snapshot.epoch, leaseUntil: 0, lastSnapshot: result.snapshot.key })

    // More events; the new program starts where the old one ran, and its local store is of the old lineage.
    await append(200, 260)
    const restoreEvents: RestoreEvent[] = []
    const next = new PartitionProcessor<Sale>({
      job: 'sales', topic: TOPIC, partition: 0, log, path, states: NEW_STATES, handler: newHandler,
      batchSize: 20, snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    })
    next.on('restore', (e) => restoreEvents.push(e))
    expect(await next.start()).toMatchObject({ source: 'snapshot', snapshot: result.snapshot.id, offset: 99n, epoch: result.snapshot.epoch + 1 })
    expect(restoreEvents).toContainEqual({ type: 'local-store-replaced', reason: expect.stringContaining('another lineage') })
    await next.catchUp()
    // Every event exactly once: the transformed state at 99, then 100..259 through the new program.
    expect(await readNewState(next.store.transaction())).toEqual(foldRest(transformed(oldTotals(99n)), 100n, 259n))
    // Its snapshots carry the lineage on.
    const after = (await next.snapshot())!
    await next.close()
    const manifest = JSON.parse(await readText(store, after.key)) as { lineage?: string }
    expect(manifest.lineage).toBe(result.lineage)
  })
})

async function positionOf(path: string): Promise<bigint | undefined> {
  const store = await PartitionStore.open({ path })
  try {
    return store.position(TOPIC, 0)
  } finally {
    await store.close()
  }
}

async function readText(store: SnapshotStore, key: string): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of await store.get(key)) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8')
}
