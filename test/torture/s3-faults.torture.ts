// Snapshots and restores through test/torture/s3-fault-proxy.ts in front of
// radosgw: 503 SlowDown, connection resets, truncated bodies and stalls
// longer than the client's timeout, picked at random (seeded) per request.
// Every snapshot succeeds or fails with TIDEMARK_SNAPSHOT_UPLOAD_FAILED
// (retriable, caused by TIDEMARK_DFS_UNAVAILABLE); every restore succeeds
// with exactly the state that was snapshotted at its position, or fails with
// TIDEMARK_DFS_UNAVAILABLE and leaves nothing behind. A transient fault is
// never taken for a corrupt snapshot (which would restore older data).
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { restoreSnapshot, Snapshotter, type PartitionStore } from '../../src/index.js'
import { levelDigest, openKvStore, range, storeDigest, writeKeys } from '../snapshot/helpers.js'
import { s3Service } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { count, deadline, makeBucket, recordFigures, rng, s3Store, scaled } from './common.js'
import { startFaultProxy, type Fault, type FaultProxy } from './s3-fault-proxy.js'

const ROUNDS = scaled(10, 60)
const KEYS_PER_ROUND = scaled(4000, 8000)
/** The client gives up on a request that moves no byte for this long; a stall lasts three times as long. */
const IDLE_MS = 400

let bucket: Awaited<ReturnType<typeof makeBucket>>
let proxy: FaultProxy
beforeAll(async () => {
  bucket = await makeBucket('torture-faults')
  proxy = await startFaultProxy(s3Service().endpoint, { stallMs: IDLE_MS * 3 })
})
afterAll(async () => {
  await proxy?.close()
  await bucket?.remove()
})

describe('S3 faults', () => {
  it(`${ROUNDS} rounds of snapshots and restores through a faulty S3: documented codes only, never different data`, async () => {
    const r = rng('s3-faults')
    const dir = tempDir('tidemark-torture-s3-')
    const prefix = randomName('p')
    const clean = s3Store(bucket.bucket, prefix)
    const faulty = s3Store(bucket.bucket, prefix, {
      endpoint: proxy.endpoint, maxAttempts: 3, retryBaseDelayMs: 5, retryMaxDelayMs: 50, idleTimeoutMs: IDLE_MS, connectTimeoutMs: IDLE_MS,
    })
    const figures = { snapshotsOk: 0, snapshotsFailed: 0, restoresOk: 0, restoresFailed: 0, faultsInjected: 0, faultKinds: {} as Record<string, number>, s3FaultOutcomes: {} as Record<string, number> }
    let store: PartitionStore | undefined
    try {
      store = await openKvStore(join(dir, 'store'))
      const snapshotter = new Snapshotter({ snapshotStore: faulty, partitionStore: store, job: 'job', partition: 0, graceMs: 0, retain: 3, maxObjectBytes: 1024 * 1024 })
      /** Digest of the store at each committed offset that a snapshot may have captured. */
      const digests = new Map<bigint, { sha256: string; entries: number }>()
      let offset = 0n
      const kinds: Fault[] = ['slowdown', 'reset', 'truncate', 'stall']
      // Light rounds the retries absorb; heavy ones that exhaust them.
      let rate = 0
      const faults = (): Fault => (r.chance(rate) ? r.pick(kinds) : 'none')
      const expired = deadline(scaled(90_000, 900_000))
      let round = 0
      for (; round < ROUNDS && !expired(); round++) {
        rate = r.pick([0.1, 0.3, 0.6])
        const from = r.int(0, KEYS_PER_ROUND * 3)
        offset = (await writeKeys(store, range(from, from + KEYS_PER_ROUND), round + 2, offset, 1000)) + 1n
        digests.set(offset - 1n, await storeDigest(store))

        proxy.setDecide(faults)
        const taken = await snapshotter.takeSnapshot().then((s) => ({ ok: true as const, s }), (error: unknown) => ({ ok: false as const, error }))
        if (taken.ok) {
          figures.snapshotsOk++
          count(figures.s3FaultOutcomes, 'snapshot-ok')
        } else {
          figures.snapshotsFailed++
          const e = taken.error as { code?: string; retriable?: boolean; cause?: { code?: string } }
          count(figures.s3FaultOutcomes, `snapshot-${e.code}/${e.cause?.code}`)
          expect({ code: e.code, retriable: e.retriable, cause: e.cause?.code }, `round ${round}: a snapshot that fails under transient faults says so with the documented code: ${String(taken.error)}`)
            .toEqual({ code: 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', retriable: true, cause: 'TIDEMARK_DFS_UNAVAILABLE' })
        }

        // The newest snapshot, as the clean store lists it.
        proxy.setDecide(() => 'none')
        const newest = (await restoreSnapshot({ snapshotStore: clean, job: 'job', partition: 0, target: join(dir, `truth-${round}`), allowEmpty: true })).positions[0]?.offset
        proxy.setDecide(faults)
        const target = join(dir, `restored-${round}`)
        const restored = await restoreSnapshot({ snapshotStore: faulty, job: 'job', partition: 0, target, allowEmpty: true }).then((result) => ({ ok: true as const, result }), (error: unknown) => ({ ok: false as const, error }))
        proxy.setDecide(() => 'none')
        if (restored.ok) {
          figures.restoresOk++
          count(figures.s3FaultOutcomes, 'restore-ok')
          const { result } = restored
          expect(result.skipped, `round ${round}: a transient fault is not a corrupt snapshot`).toEqual([])
          expect(result.positions[0]?.offset, `round ${round}: the restore picks the newest snapshot`).toBe(newest)
          if (result.source === 'snapshot') {
            const expected = digests.get(result.positions[0]!.offset)
            expect(expected, `round ${round}: the restored position ${result.positions[0]!.offset} was snapshotted`).toBeDefined()
            expect(await levelDigest(target), `round ${round}: the restored state is exactly the snapshotted one`).toEqual(expected)
          }
        } else {
          figures.restoresFailed++
          const e = restored.error as { code?: string; retriable?: boolean }
          count(figures.s3FaultOutcomes, `restore-${e.code}`)
          expect({ code: e.code, retriable: e.retriable }, `round ${round}: a restore that fails under transient faults fails with the store's error: ${String(restored.error)}`)
            .toEqual({ code: 'TIDEMARK_DFS_UNAVAILABLE', retriable: true })
          const left = (await readdir(dir)).filter((n) => n.startsWith(`restored-${round}`) || n.startsWith(`.restored-${round}`))
          expect(left, `round ${round}: a failed restore leaves no partial store`).toEqual([])
        }
      }

      console.log(`[torture] s3 faults: ${round} of ${ROUNDS} rounds within the time bound`)
      expect(round, 'rounds done within the time bound').toBeGreaterThanOrEqual(Math.min(ROUNDS, 3))
      // With the faults gone, the newest snapshot restores exactly.
      proxy.setDecide(() => 'none')
      const latest = await snapshotter.takeSnapshot()
      const target = join(dir, 'restored-final')
      const result = await restoreSnapshot({ snapshotStore: faulty, job: 'job', partition: 0, target })
      expect(result.snapshot?.id).toBe(latest.id)
      expect(await levelDigest(target)).toEqual(await storeDigest(store))
      console.log(`[torture] s3 faults: ${JSON.stringify(proxy.injected)}; ${JSON.stringify(figures.s3FaultOutcomes)}`)
    } finally {
      for (const [kind, n] of Object.entries(proxy.injected)) {
        figures.faultsInjected += n
        count(figures.faultKinds, kind, n)
      }
      recordFigures('s3-faults', figures)
      await store?.close()
      await faulty.close()
      await clean.close()
    }
  })
})
