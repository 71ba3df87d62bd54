// Kafka pieces shared by the consumer-group benchmarks (rebalance, idle): the
// mock cluster, a socket factory that counts connections, and a producer.
import { execFileSync } from 'node:child_process'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { Kafka, Partitioners, logLevel, type Producer } from 'kafkajs'

const MOCK = join(import.meta.dirname, '../scripts/services/kafka-mock.sh')

export interface BenchKafka {
  brokers: string[]
  /** 'mock' when this process started librdkafka's mock cluster, else 'external'. */
  kind: 'mock' | 'external'
  stop(): void
}

/** TIDEMARK_KAFKA_BROKERS, or librdkafka's mock cluster started in `dir` (stopped by stop(), or when this process dies). */
export function benchKafka(dir: string): BenchKafka {
  const external = process.env.TIDEMARK_KAFKA_BROKERS?.trim()
  if (external !== undefined && external !== '') return { brokers: external.split(','), kind: 'external', stop: () => {} }
  const ready = execFileSync('bash', [MOCK, 'start', dir], { encoding: 'utf8', env: { ...process.env, TIDEMARK_WATCH_PID: String(process.pid) } })
  const brokers = /brokers=(\S+)/.exec(ready)![1]!.split(',')
  return { brokers, kind: 'mock', stop: () => { execFileSync('bash', [MOCK, 'stop', dir], { stdio: 'ignore' }) } }
}

/** A kafkajs socket factory that counts the connections a client opens. */
export function countingSockets(): { socketFactory: (o: { host: string; port: number; onConnect: () => void }) => Socket; opened(): number } {
  let opened = 0
  return {
    socketFactory: ({ host, port, onConnect }) => {
      opened++
      const socket = connect({ host, port }, onConnect)
      socket.setKeepAlive(true, 60_000)
      return socket
    },
    opened: () => opened,
  }
}

export async function benchProducer(brokers: string[]): Promise<{ kafka: Kafka; producer: Producer }> {
  const kafka = new Kafka({ brokers, clientId: 'bench', logLevel: logLevel.NOTHING })
  const producer = kafka.producer({ allowAutoTopicCreation: true, idempotent: false, createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  return { kafka, producer }
}

/** The median of `xs` (the mean of the middle two for an even count). */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}
