/**
 * The part of kafkajs 2.2.4's protocol layer that the partition fetcher
 * uses: a Cluster made the way the client makes its consumers' (same
 * brokers, TLS, SASL, socket factory and retry), a broker's Fetch request,
 * and kafkajs's Batch, which drops what a consumer must not see (records
 * before the fetch offset, control records, aborted transactions).
 *
 * These are internals: kafkajs has no public fetch without a consumer
 * group, and its group consumer stops fetching for every round
 * (docs/consumer-group.md, "Rebalances stop only what moves"). kafkajs is
 * frozen at 2.2.4, its last release, so they do not move; any other version
 * is refused when a StatefulConsumer is constructed, never used blindly.
 */
import type { Kafka, KafkaMessage } from 'kafkajs'
import { kafkajs224 } from '../kafkajs-fixes.js'

export interface RawPartitionData {
  partition: number
  errorCode: number
  highWatermark: string
  lastStableOffset?: string
  abortedTransactions?: Array<{ producerId: string; firstOffset: string }>
  messages: Array<KafkaMessage & { isControlRecord?: boolean }>
}

export interface FetchRequest {
  maxWaitTime: number
  minBytes: number
  maxBytes: number
  isolationLevel: number
  topics: Array<{ topic: string; partitions: Array<{ partition: number; fetchOffset: string; maxBytes: number }> }>
}

export interface KafkajsBroker {
  fetch(request: FetchRequest): Promise<{ responses: Array<{ topicName: string; partitions: RawPartitionData[] }> }>
}

export interface KafkajsCluster {
  connect(): Promise<void>
  disconnect(): Promise<void>
  addMultipleTargetTopics(topics: string[]): Promise<void>
  refreshMetadata(): Promise<void>
  refreshMetadataIfNecessary(): Promise<void>
  findLeaderForPartitions(topic: string, partitions: number[]): Record<string, number[]>
  findBroker(query: { nodeId: string }): Promise<KafkajsBroker>
  /** ListOffsets of the partitions named, per leader: the latest offsets, or the earliest with fromBeginning. */
  fetchTopicsOffset(topics: Array<{ topic: string; fromBeginning: boolean; partitions: Array<{ partition: number }> }>): Promise<Array<{ topic: string; partitions: Array<{ partition: number; offset: string }> }>>
}

/** kafkajs's Batch: `messages` is what a consumer hands on; `messagesWithinOffset` also holds control and aborted records. */
export interface KafkajsBatch {
  readonly messages: KafkaMessage[]
  readonly messagesWithinOffset: KafkaMessage[]
  isEmptyDueToLogCompactedMessages(): boolean
}

type BatchClass = new (topic: string, fetchedOffset: string, data: RawPartitionData) => KafkajsBatch
type EmitterClass = new () => unknown

/** kafkajs's ISOLATION_LEVEL.READ_COMMITTED, its consumers' default. */
export const READ_COMMITTED = 1

/** The kafkajs internals the fetcher needs, or why they are not there. */
export function kafkajsInternals(kafka: Kafka): { cluster: () => KafkajsCluster; Batch: BatchClass } | { missing: string } {
  const Batch = kafkajs224<BatchClass>('kafkajs/src/consumer/batch.js')
  const Emitter = kafkajs224<EmitterClass>('kafkajs/src/instrumentation/emitter.js')
  const key = Object.getOwnPropertySymbols(kafka).find((s) => s.description === 'private:Kafka:createCluster')
  const create = key === undefined ? undefined : (kafka as unknown as Record<symbol, unknown>)[key]
  if (Batch === undefined || Emitter === undefined || typeof create !== 'function') return { missing: 'kafkajs 2.2.4' }
  return {
    Batch,
    cluster: () => (create as (o: object) => KafkajsCluster).call(kafka, {
      metadataMaxAge: 300_000,
      allowAutoTopicCreation: true,
      maxInFlightRequests: null,
      instrumentationEmitter: new Emitter(),
      isolationLevel: READ_COMMITTED,
    }),
  }
}
