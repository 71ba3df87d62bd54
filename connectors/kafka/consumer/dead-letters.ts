import type { IHeaders, Kafka, Producer } from 'kafkajs'
import { Partitioners } from '../kafkajs.js'
import { TidemarkError } from '../../../src/errors.js'
import type { DeadLetter } from './task-types.js'

/** Headers a dead-lettered record carries besides its own: where it came from and why it failed. */
export const DEAD_LETTER_HEADERS = Object.freeze({
  topic: 'tidemark-dlq-source-topic',
  partition: 'tidemark-dlq-source-partition',
  offset: 'tidemark-dlq-source-offset',
  error: 'tidemark-dlq-error',
})

/** Produces undecodable records to the dead-letter topic (onDecodeError: { deadLetter }), with a producer made on first use. */
export class DeadLetters {
  readonly #kafka: Kafka
  readonly #topic: string
  #producer: Promise<Producer> | undefined

  constructor(kafka: Kafka, topic: string) {
    this.#kafka = kafka
    this.#topic = topic
  }

  async send(records: DeadLetter[]): Promise<void> {
    try {
      this.#producer ??= (async () => {
        const producer = this.#kafka.producer({ allowAutoTopicCreation: true, idempotent: false, createPartitioner: Partitioners.DefaultPartitioner })
        await producer.connect()
        return producer
      })()
      const producer = await this.#producer
      await producer.send({
        topic: this.#topic,
        acks: -1,
        messages: records.map((r) => {
          const headers: IHeaders = {
            ...r.message.headers,
            [DEAD_LETTER_HEADERS.topic]: r.topic,
            [DEAD_LETTER_HEADERS.partition]: String(r.partition),
            [DEAD_LETTER_HEADERS.offset]: String(r.offset),
            [DEAD_LETTER_HEADERS.error]: String((r.error as Error)?.message ?? r.error),
          }
          return { key: r.message.key, value: r.message.value, headers, timestamp: r.message.timestamp }
        }),
      })
    } catch (err) {
      this.#producer = undefined
      throw new TidemarkError(
        'TIDEMARK_LOG_UNAVAILABLE',
        `could not produce ${records.length} undecodable record(s) of ${records[0]!.topic}/${records[0]!.partition} to the dead-letter topic ${this.#topic}: ${(err as Error)?.message ?? err}`,
        { cause: err },
      )
    }
  }

  async close(): Promise<void> {
    await this.#producer?.then((p) => p.disconnect())
  }
}
