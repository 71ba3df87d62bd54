// A PartitionProcessor restarted on the same host after its previous owner
// was SIGKILLed takes the claim at once instead of waiting out the lease
// (docs/ownership.md, "A holder proven dead"), and says so in an `ownership`
// event; an owner that still runs keeps it. The lease never runs out here:
// the restart's clock stands at the moment the killed owner took the claim.
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { expect, it, onTestFinished } from 'vitest'
import { FsSnapshotStore, PartitionProcessor, openFileLog, readClaim, type OwnershipEvent } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { addSale, fold, readTotals, saleAt, TOPIC, totals, type Sale } from './fixtures/totals.js'

it('a restart after a SIGKILL of the owner takes the claim at once, with a holder-dead ownership event; while the owner ran, it was refused', async () => {
  const dir = tempDir('tidemark-dead-owner-')
  const root = join(dir, 'snapshots')
  const fill = await openFileLog(join(dir, 'log'), { sync: false })
  for (let i = 0; i < 400; i++) await fill.append(Buffer.from(JSON.stringify(saleAt(i))))
  await fill.close()
  const path = join(dir, 'state')
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'owner.ts'), JSON.stringify({ log: join(dir, 'log'), path, snapshots: { kind: 'fs', root } })], { stdio: ['pipe', 'pipe', 'inherit'] })
  onTestFinished(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  const exited = new Promise((resolve) => child.on('exit', resolve))
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]()
  const next = async (): Promise<Record<string, unknown>> => JSON.parse((await lines.next()).value as string) as Record<string, unknown>
  expect(await next()).toEqual({ type: 'ready' })
  child.stdin!.write('go\n')
  const started = await next()
  expect(started).toMatchObject({ type: 'started', epoch: 1 })

  const store = new FsSnapshotStore({ root })
  onTestFinished(() => store.close())
  const log = await openFileLog(join(dir, 'log'), { sync: false })
  onTestFinished(() => log.close())
  const takenAt = (await readClaim(store, 'owned-job', 0))!.record!.takenAt
  const restart = (at: string): PartitionProcessor<Sale> => new PartitionProcessor<Sale>({
    job: 'owned-job', topic: TOPIC, partition: 0, log, path: at, states: [totals], handler: addSale, batchSize: 100,
    snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    ownership: { clock: () => takenAt },
  })
  // The owner runs: refused, as before (another directory: the owner's is under its LevelDB lock).
  await expect(restart(join(dir, 'other')).start()).rejects.toMatchObject({ code: 'TIDEMARK_OWNERSHIP_CONFLICT', details: { reason: 'live-lease' } })

  child.kill('SIGKILL')
  await exited
  const processor = restart(path)
  const events: OwnershipEvent[] = []
  processor.on('ownership', (event) => events.push(event))
  expect(await processor.start()).toMatchObject({ epoch: 2 })
  expect(events).toEqual([{ type: 'holder-dead', holder: expect.objectContaining({ pid: child.pid, name: `child-${child.pid}` }), epoch: 1, pid: child.pid, reason: 'no-process' }])
  await processor.catchUp()
  expect(await readTotals(processor.store)).toEqual(fold(399))
  await processor.close()
  expect((await readClaim(store, 'owned-job', 0))?.record).toMatchObject({ epoch: 2, leaseUntil: 0 })
})
