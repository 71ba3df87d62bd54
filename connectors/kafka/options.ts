import type { KafkaConfig } from 'kafkajs'
import { describeValue, checkIntegerOption } from '../../src/util/index.js'

export interface KafkaLogOptions {
  /** Bootstrap brokers, `host:port`. */
  brokers: string[]
  /** The topic that holds the log. Created on first use if the cluster allows auto-creation. */
  topic: string
  /** The one partition of the topic that is the log. */
  partition?: number
  clientId?: string
  /**
   * Duplicates of a record (from producer retries) are recognised within this
   * many offsets after it. Readers that start mid-log read this many records
   * before their start, and truncate() keeps them.
   */
  dedupeWindow?: number
  /** How long the broker holds a fetch at the tail open waiting for new records. */
  fetchWaitMs?: number
  /** A read or a conditional append that sees no progress for this long fails with TIDEMARK_LOG_UNAVAILABLE. */
  readTimeoutMs?: number
  /** Records read ahead of the readers are kept up to this many bytes. */
  cacheBytes?: number
  /** Passed to kafkajs as is: ssl, sasl, connectionTimeout, requestTimeout, retry, logLevel, logCreator. Logging is off unless set. */
  kafka?: Omit<KafkaConfig, 'brokers' | 'clientId'>
}

export type ResolvedKafkaLogOptions = Readonly<Required<Omit<KafkaLogOptions, 'kafka'>>> & { readonly kafka: Omit<KafkaConfig, 'brokers' | 'clientId'> }

export const KAFKA_LOG_DEFAULTS = Object.freeze({
  partition: 0,
  clientId: 'tidemark',
  dedupeWindow: 1000,
  fetchWaitMs: 200,
  readTimeoutMs: 30_000,
  cacheBytes: 16 * 1024 * 1024,
})

const TOPIC = /^[a-zA-Z0-9._-]{1,249}$/

export function validateKafkaLogOptions(options: KafkaLogOptions): ResolvedKafkaLogOptions {
  if (typeof options !== 'object' || options === null) throw new TypeError(`options must be an object, got ${describeValue(options)}`)
  const defined = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) as KafkaLogOptions
  const merged = { ...KAFKA_LOG_DEFAULTS, kafka: {}, ...defined }
  const { brokers, topic } = merged
  if (!Array.isArray(brokers) || brokers.length === 0 || !brokers.every((b) => typeof b === 'string' && /^[^\s:]+:\d+$/.test(b))) {
    throw new TypeError(`brokers must be a non-empty array of 'host:port' strings, got ${JSON.stringify(brokers)}`)
  }
  if (typeof topic !== 'string' || !TOPIC.test(topic) || topic === '.' || topic === '..') {
    throw new TypeError(`topic must be a Kafka topic name (letters, digits, '.', '_', '-'), got ${describeValue(topic)}`)
  }
  if (typeof merged.clientId !== 'string' || merged.clientId === '') throw new TypeError(`clientId must be a non-empty string, got ${describeValue(merged.clientId)}`)
  checkIntegerOption(merged.partition, 'partition', 0, 2 ** 31 - 1)
  checkIntegerOption(merged.dedupeWindow, 'dedupeWindow', 1, 10_000_000)
  checkIntegerOption(merged.fetchWaitMs, 'fetchWaitMs', 1, 60_000)
  checkIntegerOption(merged.readTimeoutMs, 'readTimeoutMs', 1, 2 ** 31 - 1)
  checkIntegerOption(merged.cacheBytes, 'cacheBytes', 1024, 2 ** 40)
  if (typeof merged.kafka !== 'object' || merged.kafka === null) throw new TypeError(`kafka must be an object of kafkajs options, got ${describeValue(merged.kafka)}`)
  return Object.freeze({ ...merged, brokers: Object.freeze([...brokers]) as string[], kafka: Object.freeze({ ...merged.kafka }) })
}

