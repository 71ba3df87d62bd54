// tidemark/kafka: Tidemark's pieces that need a Kafka client (kafkajs).
// The declarations use Node's types (Buffer, node:stream, ...): this pulls
// @types/node into an app's program even when its tsconfig lists no "types"
// (TypeScript 7's default).
/// <reference types="node" preserve="true" />
import { logKinds } from '../../src/log/index.js'
import { sinkKinds } from '../../src/outputs/index.js'
import { openKafkaLog } from './kafka-log.js'
import { kafkaSink } from './outputs/index.js'

export { KafkaLog, openKafkaLog } from './kafka-log.js'
export { KAFKA_LOG_DEFAULTS } from './options.js'
export type { KafkaLogOptions } from './options.js'
export { StatefulConsumer, DEAD_LETTER_HEADERS, CONSUMER_DEFAULTS, stateAwareAssigner, computeAssignment, ASSIGNOR_NAME } from './consumer/index.js'
export { kafkaSink } from './outputs/index.js'
export type { KafkaSinkOptions } from './outputs/index.js'
export type {
  StatefulConsumerOptions, StatefulConsumerEvents, ConsumerRecord, RecordHandler, DecodeErrorPolicy, ConsumerSnapshotSettings,
  TopicPartition, PartitionStarted, PartitionClosed, PartitionCounts, PartitionStatus, CloseResult, CloseOptions,
  StateAwareAssignerOptions, WarmupOptions, AssignmentInput, AssignmentMember, ComputedAssignment, MemberPlan, Move, MemberState, LocalCopy, CopyLag, AssignmentInfo,
} from './consumer/index.js'

// `tidemark replay --brokers` and `--output-brokers` open their log and sink
// through these registrations (src/log/kinds.ts, src/outputs/sink-kinds.ts),
// made when this entry point is first imported.
logKinds.register('kafka', (address) => openKafkaLog(address))
sinkKinds.register('kafka', (options) => kafkaSink(options))
