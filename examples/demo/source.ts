/**
 * Where the demo's events and snapshots live: the embedded defaults (file log,
 * file-system snapshot store) or, with --kafka/--s3, Kafka and S3/MinIO as
 * docker-compose.yml runs them.
 */
import { join } from 'node:path'
import { openFileLog, openSnapshotStore, type RevisionedLog, type SnapshotStore } from '../../src/index.js'

export interface DemoTarget {
  /** The demo's working directory (stores, and the log on embedded defaults). */
  dir: string
  /** Kafka bootstrap brokers; the file log when absent. */
  kafka?: string
  /** Kafka topic of this run. */
  topic: string
  /** Events between two snapshots. */
  snapshotEvery: number
  /** A snapshot store URL; `file://<dir>/snapshots` when absent. */
  s3?: string
}

export async function openSource(t: DemoTarget): Promise<RevisionedLog> {
  if (t.kafka === undefined) return openFileLog(join(t.dir, 'log'), { sync: false })
  const { openKafkaLog } = await import('../../connectors/kafka/index.js')
  return openKafkaLog({ brokers: t.kafka.split(','), topic: t.topic })
}

export async function openSnapshots(t: DemoTarget): Promise<SnapshotStore> {
  return openSnapshotStore(t.s3 ?? `file://${join(t.dir, 'snapshots')}`)
}

/** A fresh MinIO has no buckets: create the demo's (credentials come from the standard AWS chain). */
export async function ensureBucket(t: DemoTarget): Promise<void> {
  if (t.s3 === undefined) return
  const { S3SnapshotStore } = await import('../../connectors/s3/index.js')
  const { CreateBucketCommand } = await import('@aws-sdk/client-s3')
  const store = await openSnapshots(t)
  try {
    if (!(store instanceof S3SnapshotStore)) return
    await store.client.send(new CreateBucketCommand({ Bucket: store.options.bucket })).catch((err: { name?: string }) => {
      if (err.name !== 'BucketAlreadyOwnedByYou' && err.name !== 'BucketAlreadyExists') throw err
    })
  } finally {
    await store.close()
  }
}
