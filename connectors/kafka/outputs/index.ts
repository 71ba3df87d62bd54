export { kafkaSink } from './kafka-sink.js'
export type { KafkaSinkOptions } from './kafka-sink.js'
