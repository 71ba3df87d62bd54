/**
 * kafkajs, an optional peer dependency: every value Tidemark takes from it
 * comes from here (types are imported from 'kafkajs' directly; they leave
 * nothing in the JavaScript). In an app without kafkajs, loading
 * tidemark/kafka then fails with TIDEMARK_KAFKA_CLIENT_MISSING, which says
 * what to install, instead of Node's bare module-not-found error
 * (src/util/optional-peer.ts). kafkajs is CommonJS: require() gives the
 * module an import would.
 */
import { createRequire } from 'node:module'
import type * as KafkaJs from 'kafkajs'
import { requireOptionalPeer } from '../../src/util/index.js'

const kafkajs = requireOptionalPeer<typeof KafkaJs>(createRequire(import.meta.url), 'kafkajs', 'TIDEMARK_KAFKA_CLIENT_MISSING', 'tidemark/kafka')

export const { Kafka, Partitioners, logLevel, AssignerProtocol } = kafkajs
export type Kafka = KafkaJs.Kafka
export type logLevel = KafkaJs.logLevel
