import type { Consumer } from 'kafkajs'
import type { TopicPartition } from './task-types.js'

/** How long a group-offset commit that failed (a round under way) waits before it is tried again. */
const RETRY_MS = 1000

/**
 * The group's committed offsets, for the lag tools people use
 * (kafka-consumer-groups, Burrow, exporters): best effort, since the
 * store's position, not the group offset, says where a partition resumes.
 * One commit in flight at a time, later offsets merged into the next; one
 * the coordinator refused (a stale generation during a round) is tried again
 * a second later unless a newer offset of that partition came meanwhile.
 */
export class GroupOffsets {
  readonly #consumer: Consumer
  /** Whether an offset of this partition may still be committed here (it did not move away). */
  readonly #mine: (tp: TopicPartition) => boolean
  readonly #pending = new Map<string, TopicPartition & { offset: bigint }>()
  #committing: Promise<void> | undefined
  #retry: ReturnType<typeof setTimeout> | undefined
  #stopped = false

  constructor(consumer: Consumer, mine: (tp: TopicPartition) => boolean) {
    this.#consumer = consumer
    this.#mine = mine
  }

  /** `offset`: the next offset to read, as Kafka's group offsets count. */
  queue(tp: TopicPartition, offset: bigint): void {
    this.#pending.set(`${tp.topic}-${tp.partition}`, { topic: tp.topic, partition: tp.partition, offset })
    if (this.#committing === undefined) void this.flush()
  }

  /** Commits what is pending (once more after a commit in flight); resolves when done or refused. */
  async flush(): Promise<void> {
    while (this.#committing !== undefined) await this.#committing
    if (this.#pending.size > 0) await this.#commit()
  }

  /** Commits nothing more after the flush under way; cancels a retry. */
  stop(): void {
    this.#stopped = true
    clearTimeout(this.#retry)
  }

  #commit(): Promise<void> {
    this.#committing ??= (async () => {
      while (this.#pending.size > 0) {
        const offsets = [...this.#pending.values()].filter((o) => this.#mine(o))
        this.#pending.clear()
        if (offsets.length === 0) return
        try {
          await this.#consumer.commitOffsets(offsets.map((o) => ({ topic: o.topic, partition: o.partition, offset: String(o.offset) })))
        } catch {
          for (const o of offsets) {
            const k = `${o.topic}-${o.partition}`
            if (!this.#pending.has(k)) this.#pending.set(k, o)
          }
          if (!this.#stopped) {
            clearTimeout(this.#retry)
            this.#retry = setTimeout(() => void this.#commit(), RETRY_MS)
            this.#retry.unref()
          }
          return
        }
      }
    })().finally(() => {
      this.#committing = undefined
    })
    return this.#committing
  }
}
