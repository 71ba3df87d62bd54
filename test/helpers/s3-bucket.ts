// A throwaway bucket for one test file: created before its tests, emptied
// and deleted after them. Call at the top level of the file.
import { CreateBucketCommand, DeleteBucketCommand, DeleteObjectsCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3'
import { afterAll, beforeAll } from 'vitest'
import type { S3SnapshotStoreOptions } from '../../connectors/s3/index.js'
import { s3Service } from './services.js'
import { randomName } from './tmp.js'

export interface TestBucket {
  readonly name: string
  /** Options of an S3SnapshotStore on this bucket under `prefix`, with quick retries. */
  storeOptions(prefix: string): S3SnapshotStoreOptions
  /** Deletes every object under `prefix`. */
  emptyPrefix(prefix: string): Promise<void>
}

export function useTestBucket(namePrefix: string): TestBucket {
  const name = randomName(namePrefix)
  let admin: S3Client | undefined

  async function emptyPrefix(prefix: string): Promise<void> {
    for (let more = true; more;) {
      const page = await admin!.send(new ListObjectsV2Command({ Bucket: name, Prefix: prefix }))
      const keys = (page.Contents ?? []).map((object) => ({ Key: object.Key }))
      if (keys.length > 0) await admin!.send(new DeleteObjectsCommand({ Bucket: name, Delete: { Objects: keys, Quiet: true } }))
      more = page.IsTruncated === true
    }
  }

  beforeAll(async () => {
    const { endpoint, region, accessKeyId, secretAccessKey } = s3Service()
    admin = new S3Client({ endpoint, region, forcePathStyle: true, credentials: { accessKeyId, secretAccessKey } })
    await admin.send(new CreateBucketCommand({ Bucket: name }))
  })

  afterAll(async () => {
    await emptyPrefix('')
    await admin!.send(new DeleteBucketCommand({ Bucket: name }))
    admin!.destroy()
  })

  return {
    name,
    storeOptions(prefix) {
      const { endpoint, region, forcePathStyle, accessKeyId, secretAccessKey } = s3Service()
      return { endpoint, region, forcePathStyle, credentials: { accessKeyId, secretAccessKey }, bucket: name, prefix, retryBaseDelayMs: 1 }
    },
    emptyPrefix,
  }
}
