// tidemark/kafka: Tidemark's pieces that need a Kafka client (kafkajs).
export { KafkaLog, openKafkaLog } from './kafka-log.js'
export { KAFKA_LOG_DEFAULTS } from './options.js'
export type { KafkaLogOptions } from './options.js'
