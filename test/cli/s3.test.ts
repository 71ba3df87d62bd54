import { join } from 'node:path'
import { expect, it, onTestFinished } from 'vitest'
import { S3SnapshotStore } from '../../connectors/s3/index.js'
import { PartitionStore, Snapshotter } from '../../src/index.js'
import { useTestBucket } from '../helpers/s3-bucket.js'
import { s3Service } from '../helpers/services.js'
import { tempDir } from '../helpers/tmp.js'
import { counts, tidemark } from './helpers.js'

const bucket = useTestBucket('tidemark-cli-')

it('restores and verifies from radosgw with credentials from the environment and no region anywhere (us-east-1 by default)', async () => {
  const dir = tempDir()
  const store = await PartitionStore.open({ path: join(dir, 'store'), states: [counts] })
  const tx = store.transaction()
  tx.value(counts).put('a', 1)
  await tx.commit({ topic: 't', partition: 0, offset: 7n })
  const snapshots = new S3SnapshotStore(bucket.storeOptions('cli'))
  const snap = await new Snapshotter({ snapshotStore: snapshots, partitionStore: store, job: 'j', partition: 0 }).takeSnapshot()
  await store.close()
  await snapshots.close()

  const { endpoint, accessKeyId, secretAccessKey } = s3Service()
  // The README's form: endpoint and path style in the URL, credentials in the environment, no region.
  const url = `s3://${bucket.name}/cli?endpoint=${encodeURIComponent(endpoint)}&forcePathStyle=true`
  // The SDK's credential chain reads this process's environment (a worker
  // process of its own: pool 'forks'); main() gets an environment without a
  // region, so only the CLI's default can supply one.
  process.env.AWS_ACCESS_KEY_ID = accessKeyId
  process.env.AWS_SECRET_ACCESS_KEY = secretAccessKey
  onTestFinished(() => {
    delete process.env.AWS_ACCESS_KEY_ID
    delete process.env.AWS_SECRET_ACCESS_KEY
  })
  const [restored, verified] = await Promise.all([
    tidemark('restore', url, '--job', 'j', '--partition', '0', '--target', join(dir, 'restored'), '--json'),
    tidemark('snapshots', 'verify', url, '--job', 'j', '--partition', '0'),
  ])
  expect(restored.code).toBe(0)
  expect(verified.code).toBe(0)
  expect(JSON.parse(restored.stdout)).toMatchObject({ source: 'snapshot', snapshot: { id: snap.id }, positions: [{ offset: '7' }] })
  expect(restored.stderr).toMatch(/^restore: (\d+)\/\1 bytes$/m)
  expect(verified.stdout).toMatch(new RegExp(`^ok      ${snap.id}: \\d+ files, \\d+ bytes\\n$`))
})
