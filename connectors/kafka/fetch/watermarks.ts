/**
 * Partitions' low and high watermarks, asked for one partition at a time and
 * sent as one ListOffsets pair per leader for every partition asked for in
 * the same turn of the event loop. A member that is assigned hundreds of
 * partitions starts them all in one turn, each asking for its bounds; one
 * kafkajs admin.fetchTopicOffsets per partition was a metadata look and
 * two requests each (about 2,000 requests for 1,024 partitions, 8 s on the
 * mock). A call never gets an answer from a request sent before it.
 */
import { TidemarkError } from '../../../src/errors.js'
import type { KafkajsCluster } from './kafkajs-cluster.js'

export interface Watermarks {
  low: bigint
  high: bigint
}

/** What the lookup needs of a kafkajs cluster, connected and knowing the topics' metadata. */
export interface WatermarkSource {
  /** Connects and loads the metadata of `topics`. */
  ready(topics: readonly string[]): Promise<void>
  cluster(): Pick<KafkajsCluster, 'refreshMetadata' | 'fetchTopicsOffset'>
}

interface Waiter {
  topic: string
  partition: number
  resolve(w: Watermarks): void
  reject(error: unknown): void
}

/** Attempts of one batch; the metadata is refreshed between them (a leader moved, a topic was just created). */
const ATTEMPTS = 3

export class WatermarkLookup {
  readonly #source: WatermarkSource
  #batch: Waiter[] | undefined

  constructor(source: WatermarkSource) {
    this.#source = source
  }

  /** The partition's watermarks, from a request sent after this call. */
  get(topic: string, partition: number): Promise<Watermarks> {
    return new Promise<Watermarks>((resolve, reject) => {
      if (this.#batch === undefined) {
        const batch: Waiter[] = []
        this.#batch = batch
        setImmediate(() => {
          this.#batch = undefined
          void this.#send(batch)
        })
      }
      this.#batch.push({ topic, partition, resolve, reject })
    })
  }

  async #send(batch: readonly Waiter[]): Promise<void> {
    const byTopic = new Map<string, Set<number>>()
    for (const w of batch) {
      let ps = byTopic.get(w.topic)
      if (ps === undefined) byTopic.set(w.topic, ps = new Set())
      ps.add(w.partition)
    }
    const request = (fromBeginning: boolean): Array<{ topic: string; fromBeginning: boolean; partitions: Array<{ partition: number }> }> =>
      [...byTopic].map(([topic, ps]) => ({ topic, fromBeginning, partitions: [...ps].map((partition) => ({ partition })) }))
    let lastError: unknown
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      try {
        await this.#source.ready([...byTopic.keys()])
        const cluster = this.#source.cluster()
        const [high, low] = await Promise.all([cluster.fetchTopicsOffset(request(false)), cluster.fetchTopicsOffset(request(true))])
        const his = offsetsByPartition(high)
        const lows = offsetsByPartition(low)
        for (const w of batch) {
          const h = his.get(`${w.topic}/${w.partition}`)
          const l = lows.get(`${w.topic}/${w.partition}`)
          if (h === undefined || l === undefined) w.reject(new TidemarkError('TIDEMARK_LOG_UNAVAILABLE', `topic ${w.topic} has no partition ${w.partition}`, { details: { topic: w.topic, partition: w.partition } }))
          else w.resolve({ low: l, high: h })
        }
        return
      } catch (error) {
        lastError = error
        await this.#source.cluster().refreshMetadata().catch(() => undefined)
      }
    }
    for (const w of batch) w.reject(lastError)
  }
}

function offsetsByPartition(offsets: ReadonlyArray<{ topic: string; partitions: ReadonlyArray<{ partition: number; offset: string }> }>): Map<string, bigint> {
  const by = new Map<string, bigint>()
  for (const t of offsets) for (const p of t.partitions) by.set(`${t.topic}/${p.partition}`, BigInt(p.offset))
  return by
}
