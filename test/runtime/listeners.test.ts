import { join } from 'node:path'
import { expect, it } from 'vitest'
import { FsSnapshotStore, openFileLog, PartitionProcessor, valueState, type OwnershipEvent } from '../../src/index.js'
import type { PutOptions, PutResult } from '../../src/snapshot-store/snapshot-store.js'
import { tempDir } from '../helpers/tmp.js'

const counts = valueState<number>('counts')

/** A file-system store whose puts of the partition's claim fail while `failClaims` is set. */
class ClaimFailingStore extends FsSnapshotStore {
  failClaims = false
  override put(key: string, body: Parameters<FsSnapshotStore['put']>[1], options?: PutOptions): Promise<PutResult> {
    if (this.failClaims && key.endsWith('owner.json')) return Promise.reject(new Error('injected claim put failure'))
    return super.put(key, body, options)
  }
}

it('an ownership listener that throws on a renewal failure (sent from the lease timer) does not end the process; processing goes on', async () => {
  const dir = tempDir()
  const log = await openFileLog(join(dir, 'log'), { sync: false })
  for (let i = 0; i < 100; i++) await log.append(Buffer.from(JSON.stringify({ word: `w${i % 7}` })))
  const store = new ClaimFailingStore({ root: join(dir, 'snapshots') })
  const p = new PartitionProcessor<{ word: string }>({
    job: 'listeners', topic: 'words', partition: 0, log, path: join(dir, 'state'), states: [counts],
    snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    ownership: { leaseMs: 600 },
    handler: (tx, { word }) => {
      const view = tx.value(counts)
      view.put(word, (view.getSync(word) ?? 0) + 1)
    },
  })
  let renewFailed!: (event: OwnershipEvent) => void
  const failed = new Promise<OwnershipEvent>((resolve) => { renewFailed = resolve })
  p.on('ownership', (event) => {
    renewFailed(event)
    // An unhandled rejection here fails the test run (vitest reports it).
    throw new Error(`the ownership listener's bug on ${event.type}`)
  })
  await p.start()
  store.failClaims = true
  expect((await failed).type).toBe('renew-failed')
  store.failClaims = false
  expect(await p.catchUp()).toBe(100)
  await p.close()
  await log.close()
})
