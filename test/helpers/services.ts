// The S3 server and Kafka peer that test/setup/services.ts started (or found
// in TIDEMARK_S3_ENDPOINT / TIDEMARK_KAFKA_BROKERS) for this test run.
import { inject } from 'vitest'
import type { Services } from '../setup/services.js'

export interface S3ServiceConfig {
  endpoint: string
  region: string
  accessKeyId: string
  secretAccessKey: string
  forcePathStyle: true
}

export interface KafkaServiceConfig {
  brokers: string[]
}

/**
 * Where the test S3 server is. Pass it to `new S3Client({ endpoint, region,
 * forcePathStyle, credentials: { accessKeyId, secretAccessKey } })`.
 */
export function s3Service(): S3ServiceConfig {
  const { endpoint, region, accessKeyId, secretAccessKey } = services().s3
  return { endpoint, region, accessKeyId, secretAccessKey, forcePathStyle: true }
}

/** The bootstrap brokers of the test Kafka peer, for `new Kafka({ brokers })`. */
export function kafkaService(): KafkaServiceConfig {
  return { brokers: [...services().kafka.brokers] }
}

/**
 * What is behind the endpoints: `radosgw`/`mock` when the setup started them,
 * `external` when they came from the environment. The Kafka mock refuses admin
 * createTopics/deleteRecords/setOffsets and idempotent or transactional
 * producers; a test that needs those must say so rather than silently skip.
 */
export function serviceKinds(): { s3: Services['s3']['kind']; kafka: Services['kafka']['kind'] } {
  const { s3, kafka } = services()
  return { s3: s3.kind, kafka: kafka.kind }
}

function services(): Services {
  const value = inject('services') as Services | undefined
  if (value === undefined) {
    throw new Error('no services were provided: run the tests through vitest.config.ts (its globalSetup starts them)')
  }
  return value
}
