// The incremental snapshot / restore round trip and a fallback on the S3
// server of the test setup (radosgw, or TIDEMARK_S3_ENDPOINT).
import { CreateBucketCommand, DeleteBucketCommand, DeleteObjectsCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { S3SnapshotStore } from '../../connectors/s3/index.js'
import { restoreSnapshot, Snapshotter, type RestoreEvent } from '../../src/index.js'
import { s3Service } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { levelDigest, openKvStore, range, storeDigest, waitForCompactions, writeKeys } from './helpers.js'

const KEYS = Number(process.env.TIDEMARK_SNAPSHOT_KEYS ?? 1_000_000)
const bucket = randomName('snap')
let admin: S3Client

beforeAll(async () => {
  const { endpoint, region, accessKeyId, secretAccessKey } = s3Service()
  admin = new S3Client({ endpoint, region, forcePathStyle: true, credentials: { accessKeyId, secretAccessKey } })
  await admin.send(new CreateBucketCommand({ Bucket: bucket }))
})

afterAll(async () => {
  for (let more = true; more;) {
    const page = await admin.send(new ListObjectsV2Command({ Bucket: bucket }))
    const keys = (page.Contents ?? []).map((o) => ({ Key: o.Key }))
    if (keys.length > 0) await admin.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: keys, Quiet: true } }))
    more = page.IsTruncated === true
  }
  await admin.send(new DeleteBucketCommand({ Bucket: bucket }))
  admin.destroy()
})

function s3Store(): S3SnapshotStore {
  const { endpoint, region, forcePathStyle, accessKeyId, secretAccessKey } = s3Service()
  return new S3SnapshotStore({ endpoint, region, forcePathStyle, credentials: { accessKeyId, secretAccessKey }, bucket, prefix: randomName('p'), partSize: 5 * 1024 * 1024 })
}

describe(`snapshots on S3 (${KEYS} keys)`, () => {
  it('upload only what changed, restore each snapshot exactly, and fall back past a missing object', { timeout: 120_000 }, async () => {
    const dir = tempDir('tidemark-s3snap-')
    const dfs = s3Store()
    const store = await openKvStore(join(dir, 'store'))
    try {
      const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'orders', partition: 7, maxObjectBytes: 4 * 1024 * 1024 })
      const last1 = await writeKeys(store, range(0, KEYS), 1, 0n)
      const digest1 = await storeDigest(store)
      await waitForCompactions(store.path)
      const first = await snapshotter.takeSnapshot()
      const changed = (function* () { for (let i = 0; i < KEYS; i += 100) yield i })()
      await writeKeys(store, changed, 2, last1 + 1n)
      const second = await snapshotter.takeSnapshot()
      const digest2 = await storeDigest(store)
      console.log(`[s3] first ${first.bytesUploaded} bytes in ${first.objects.length} objects, second ${second.bytesUploaded} bytes (${(second.bytesUploaded / first.bytesUploaded * 100).toFixed(2)}%)`)

      expect(first.objects.length).toBeGreaterThan(1) // multipart objects, several of them
      expect(second.full).toBe(false)
      expect(second.bytesUploaded).toBeLessThanOrEqual(first.bytesUploaded * 0.1)
      expect((await snapshotter.listSnapshots()).map((s) => s.key)).toEqual([second.key, first.key])

      for (const [snap, digest] of [[first, digest1], [second, digest2]] as const) {
        const target = join(dir, `restored-${snap.id}`)
        const result = await restoreSnapshot({ snapshotStore: dfs, job: 'orders', partition: 7, target, snapshot: snap.id, rangeBytes: 1024 * 1024 })
        expect(result.positions).toEqual(snap.positions)
        expect(await levelDigest(target)).toEqual(digest)
      }

      await dfs.deleteMany(second.objects)
      const events: RestoreEvent[] = []
      const target = join(dir, 'restored-latest')
      const result = await restoreSnapshot({ snapshotStore: dfs, job: 'orders', partition: 7, target, onEvent: (e) => events.push(e) })
      expect(result.snapshot?.id).toBe(first.id)
      expect(result.skipped).toMatchObject([{ id: second.id, reason: 'object-missing' }])
      expect(events.map((e) => e.type)).toEqual(['snapshot-restoring', 'snapshot-skipped', 'snapshot-restoring'])
      expect(await levelDigest(target)).toEqual(digest1)
    } finally {
      await store.close()
      await dfs.close()
    }
  })
})
