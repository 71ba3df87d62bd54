// When a closing owner releases its claim (src/runtime/partition-lifecycle.ts):
// an assigned claim (a consumer group's) while the store closes, so that the
// new owner, another member, does not wait for the LevelDB close; a claim
// with a lease only after the store closed, since its next owner may be
// another process on this host that opens the same directory at once.
// The store's close is held until the claim reads released: with the
// release after the close, the assigned case never finishes its shutdown.
import { describe, expect, it, onTestFinished } from 'vitest'
import { noopLogger } from '../../src/logging/logger.js'
import { readClaim } from '../../src/ownership/claim.js'
import { PartitionLifecycle, type ClaimPolicy } from '../../src/runtime/partition-lifecycle.js'
import { PartitionOutputs } from '../../src/outputs/partition-outputs.js'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { tempDir } from '../helpers/tmp.js'
import { TOPIC, totals } from './fixtures/totals.js'

async function startOwner(job: string, claim: ClaimPolicy): Promise<{ life: PartitionLifecycle; store: FsSnapshotStore }> {
  const store = new FsSnapshotStore({ root: tempDir() })
  onTestFinished(() => store.close())
  const none = (): void => undefined
  const life = new PartitionLifecycle({
    job, key: 0, topic: TOPIC, partition: 0, path: `${tempDir()}/p0`, states: [totals], allowEmpty: true, logger: noopLogger,
    snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    claim,
    outputs: new PartitionOutputs({ job, topic: TOPIC, partition: 0, outputs: undefined, dedupe: 'off' }),
    events: { restore: none, snapshot: none, snapshotFailed: none, snapshotter: none, ownership: none, stateSize: none, stateSizeExceeded: none },
  })
  onTestFinished(() => life.shutdown())
  await life.start()
  return { life, store }
}

/** Whether the claim reads released (leaseUntil 0). */
async function released(store: FsSnapshotStore, job: string): Promise<boolean> {
  return (await readClaim(store, job, 0))?.record?.leaseUntil === 0
}

describe('PartitionLifecycle: the claim\'s release on shutdown', () => {
  it('releases an assigned claim while the store closes', async () => {
    const job = 'release-assigned'
    const { life, store } = await startOwner(job, { kind: 'assigned', waitMs: 1000 })
    // The claim's writes: the release is the one after which it reads released.
    let landed!: () => void
    const release = new Promise<void>((resolve) => { landed = resolve })
    const put = store.put.bind(store)
    store.put = async (...args) => {
      const result = await put(...args)
      if (args[0].endsWith('owner.json') && await released(store, job)) landed()
      return result
    }
    // The store's close waits for the release.
    const partitionStore = life.store!
    const close = partitionStore.close.bind(partitionStore)
    partitionStore.close = async () => {
      await release
      return close()
    }
    await life.shutdown()
    expect(await released(store, job)).toBe(true)
  })

  it('releases a leased claim only after the store closed', async () => {
    const job = 'release-lease'
    const { life, store } = await startOwner(job, { kind: 'lease', leaseMs: 30_000, takeover: 'if-expired', clock: Date.now })
    const partitionStore = life.store!
    const close = partitionStore.close.bind(partitionStore)
    let releasedAtClose: boolean | undefined
    partitionStore.close = async () => {
      releasedAtClose = await released(store, job)
      return close()
    }
    await life.shutdown()
    expect(releasedAtClose).toBe(false)
    expect(await released(store, job)).toBe(true)
  })
})
