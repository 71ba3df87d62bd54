import type { Kafka, KafkaMessage } from 'kafkajs'
import { Slots } from '../../../src/util/index.js'
import { kafkajsInternals, READ_COMMITTED, type KafkajsBatch, type KafkajsCluster } from './kafkajs-cluster.js'
import { WatermarkLookup, type Watermarks } from './watermarks.js'

export interface FetchedPartition {
  topic: string
  partition: number
}

export interface FetchedBatch extends FetchedPartition {
  /** The records to apply: no control records, nothing of an aborted transaction. */
  messages: KafkaMessage[]
  highWatermark: bigint
}

export interface PartitionFetcherOptions {
  kafka: Kafka
  maxWaitTimeInMs: number
  maxBytesPerPartition: number
  /** Batches handled at once, over every broker (kafkajs's partitionsConsumedConcurrently). */
  concurrency: number
  /** Applies a batch. The partition is not fetched again until it settles; a seek or pause meanwhile wins over its end. */
  handle(batch: FetchedBatch): Promise<void>
  /** The broker has no records at the partition's fetch offset (retention deleted them, or the log ends before it); the partition is paused. */
  outOfRange(tp: FetchedPartition, offset: bigint): void
  /** A fetch failed; it is retried with backoff (the partitions stay where they were). */
  fetchFailed(error: unknown, attempt: number): void
}

interface Entry {
  tp: FetchedPartition
  /** The next offset to fetch; undefined until the first seek. */
  position: bigint | undefined
  paused: boolean
  /**
   * A Fetch in flight asked for it, or its batch of one is not handled yet:
   * no other Fetch asks for it meanwhile, so that two batches of a partition
   * are never handled at once (a round's and a fresh partitions' Fetch run
   * side by side).
   */
  fetching: boolean
  /** Seeked or resumed since a fetch last asked for it: fetched on its own while its leader's round is handled. */
  fresh: boolean
  /** Bumped by every seek and removal: a batch handled across one does not move the position. */
  version: number
}

/** A partition's batch of one Fetch, with what the partition was when the Fetch asked for it. */
interface FetchedBatchOf {
  entry: Entry
  version: number
  batch: KafkajsBatch
  offset: bigint
  highWatermark: bigint
}

/** kafkajs's consumer defaults. */
const MIN_BYTES = 1
const MAX_BYTES = 10_485_760
/** Backoff after a failed fetch: doubled per failure in a row up to the maximum. */
const RETRY_MS = 100
const RETRY_MAX_MS = 5_000
/** Errors that mean the cluster's metadata (leaders, topics) is out of date. */
const STALE_METADATA = new Set(['NOT_LEADER_FOR_PARTITION', 'UNKNOWN_TOPIC_OR_PARTITION', 'LEADER_NOT_AVAILABLE', 'FENCED_LEADER_EPOCH', 'UNKNOWN_LEADER_EPOCH'])

/**
 * Fetches the partitions it is given, from each partition's leader, with
 * nothing of a consumer group in the way: a group round does not stop it.
 * The group (kafkajs's consumer, every partition paused there) only decides
 * membership and the assignment; this fetches what the member runs, and its
 * owner tells it what that is: seek() a partition to start it, retain()
 * what it still runs when an assignment took some away.
 *
 * One fetch loop per leader, like kafkajs's: a Fetch of every unpaused
 * partition the broker leads, then each partition's batch handed to
 * handle() (at most `concurrency` at once over all loops), and the next
 * Fetch once they settled. A partition resumed while its broker's fetch is
 * in flight waits for that fetch, up to `maxWaitTimeInMs`. One seeked or
 * resumed while the round's batches are handled does not wait for them: a
 * Fetch of its own goes out at once (one at a time per broker), and its
 * batch is handled ahead of the round's batches still waiting for a slot.
 * At hundreds of partitions a round's batches take hundreds of
 * milliseconds, and a partition just restored waited through up to two of
 * them (1.3 s at the new member of `npm run bench -- many-group`).
 */
export class PartitionFetcher {
  readonly #o: PartitionFetcherOptions
  readonly #cluster: KafkajsCluster
  readonly #Batch: new (topic: string, fetchedOffset: string, data: never) => KafkajsBatch
  readonly #entries = new Map<string, Entry>()
  /** Leaders with a fetch loop; a loop takes itself out in the same turn in which it finds nothing to fetch. */
  readonly #loops = new Set<string>()
  /** Leaders whose loop handles a round's batches now. */
  readonly #handling = new Set<string>()
  /** Leaders with a Fetch of fresh partitions in flight. */
  readonly #asides = new Set<string>()
  readonly #running = new Set<Promise<void>>()
  readonly #slots: Slots
  readonly #watermarks: WatermarkLookup
  readonly #topics = new Set<string>()
  /** A look for partitions without a loop is under way (#again: look once more after it). */
  #ensuring = false
  #again = false
  #connected: Promise<void> | undefined
  #stopped = false
  #failures = 0

  constructor(options: PartitionFetcherOptions) {
    const internals = kafkajsInternals(options.kafka)
    if ('missing' in internals) throw new TypeError(`the partition fetcher needs ${internals.missing}`)
    this.#o = options
    this.#cluster = internals.cluster()
    this.#Batch = internals.Batch as never
    this.#slots = new Slots(options.concurrency)
    this.#watermarks = new WatermarkLookup({
      ready: async (topics) => {
        await this.connect(topics)
        await this.#cluster.refreshMetadataIfNecessary()
      },
      cluster: () => this.#cluster,
    })
  }

  /** The partition's low and high watermarks (asked for together with the others of the same turn). */
  watermarks(tp: FetchedPartition): Promise<Watermarks> {
    return this.#watermarks.get(tp.topic, tp.partition)
  }

  /** Starts fetching `tp` at `offset` (also one that was paused stays paused until resume()). */
  seek(tp: FetchedPartition, offset: bigint): void {
    const e = this.#entry(tp)
    e.position = offset
    e.version++
    e.fresh = true
    this.#changedNow()
  }

  pause(tp: FetchedPartition): void {
    this.#entry(tp).paused = true
  }

  resume(tp: FetchedPartition): void {
    const e = this.#entry(tp)
    if (!e.paused) return
    e.paused = false
    e.fresh = true
    this.#changedNow()
  }

  /** Pauses every partition (the member stops, or its group membership ended for good). */
  pauseAll(): void {
    for (const e of this.#entries.values()) e.paused = true
  }

  /** Stops fetching the partitions not in `keep` and forgets them. */
  retain(keep: readonly FetchedPartition[]): void {
    const wanted = new Set(keep.map(key))
    for (const [k, e] of this.#entries) {
      if (wanted.has(k)) continue
      e.version++
      this.#entries.delete(k)
    }
  }

  /** Stops the loops and waits for the batches being handled. */
  async stop(): Promise<void> {
    this.#stopped = true
    this.pauseAll()
    while (this.#running.size > 0) await Promise.allSettled([...this.#running])
    await this.#connected?.catch(() => undefined)
    await this.#cluster.disconnect().catch(() => undefined)
  }

  #entry(tp: FetchedPartition): Entry {
    const k = key(tp)
    let e = this.#entries.get(k)
    if (e === undefined) {
      e = { tp: { topic: tp.topic, partition: tp.partition }, position: undefined, paused: false, fetching: false, fresh: false, version: 0 }
      this.#entries.set(k, e)
    }
    return e
  }

  #fetchable(e: Entry): boolean {
    return !e.paused && !e.fetching && e.position !== undefined
  }

  /** Something may have become fetchable: a loop for each leader that has none. */
  #changedNow(): void {
    if (this.#stopped) return
    if (this.#ensuring) {
      this.#again = true
      return
    }
    this.#ensuring = true
    void this.#ensureLoops().finally(() => {
      this.#ensuring = false
      if (this.#again) {
        this.#again = false
        this.#changedNow()
      }
    })
  }

  /**
   * Connects to the cluster and loads the metadata of `topics` ahead of the
   * first fetch, so that a partition's first fetch after its restore does not
   * wait for them. Optional: the first fetch connects otherwise.
   */
  async connect(also: readonly string[] = []): Promise<void> {
    const topics = [...new Set([...also, ...[...this.#entries.values()].map((e) => e.tp.topic)])].filter((t) => !this.#topics.has(t))
    // A failed connect is tried again by the next call.
    this.#connected ??= this.#cluster.connect().catch((error: unknown) => {
      this.#connected = undefined
      throw error
    })
    await this.#connected
    if (topics.length > 0) {
      await this.#cluster.addMultipleTargetTopics([...this.#topics, ...topics])
      for (const t of topics) this.#topics.add(t)
    }
  }

  /** The leader of every fetchable partition: loops for those that have none. */
  async #ensureLoops(): Promise<void> {
    try {
      await this.connect()
      await this.#cluster.refreshMetadataIfNecessary()
      let leaderless = false
      for (const [nodeId, entries] of this.#byLeader()) {
        if (nodeId === undefined) leaderless = true
        else if (!this.#loops.has(nodeId) && !this.#stopped && entries.length > 0) this.#startLoop(nodeId)
        else this.#fetchFresh(nodeId, entries)
      }
      if (leaderless) throw new Error('a partition to fetch has no known leader')
    } catch (error) {
      await this.#failed(error)
      await this.#cluster.refreshMetadata().catch(() => undefined)
      this.#again = true
    }
  }

  #startLoop(nodeId: string): void {
    this.#loops.add(nodeId)
    const loop = this.#loop(nodeId).catch((error: unknown) => {
      // A loop fails only on a bug of its own: say so, and let the next change start it again.
      this.#loops.delete(nodeId)
      this.#o.fetchFailed(error, 0)
    })
    this.#running.add(loop)
    void loop.finally(() => this.#running.delete(loop))
  }

  /** The fetchable partitions by leader (undefined: no known leader), from one metadata lookup per topic. */
  #byLeader(): Map<string | undefined, Entry[]> {
    const byTopic = new Map<string, Entry[]>()
    for (const e of this.#entries.values()) {
      if (!this.#fetchable(e)) continue
      const list = byTopic.get(e.tp.topic)
      if (list === undefined) byTopic.set(e.tp.topic, [e])
      else list.push(e)
    }
    const out = new Map<string | undefined, Entry[]>()
    const add = (nodeId: string | undefined, e: Entry): void => {
      const list = out.get(nodeId)
      if (list === undefined) out.set(nodeId, [e])
      else list.push(e)
    }
    for (const [topic, entries] of byTopic) {
      let leaders: Record<string, number[]> = {}
      try {
        leaders = this.#cluster.findLeaderForPartitions(topic, entries.map((e) => e.tp.partition))
      } catch {
        // Metadata not loaded: every partition of the topic is leaderless for now.
      }
      const leaderOf = new Map<number, string>()
      for (const [nodeId, partitions] of Object.entries(leaders)) for (const p of partitions) leaderOf.set(p, nodeId)
      for (const e of entries) add(leaderOf.get(e.tp.partition), e)
    }
    return out
  }

  async #loop(nodeId: string): Promise<void> {
    for (;;) {
      if (this.#stopped) {
        this.#loops.delete(nodeId)
        return
      }
      const mine = this.#byLeader().get(nodeId) ?? []
      if (mine.length === 0) {
        // Nothing here to fetch: a loop starts again when something led by this broker is fetchable.
        this.#loops.delete(nodeId)
        return
      }
      let batches: FetchedBatchOf[]
      try {
        batches = await this.#fetch(nodeId, mine)
      } catch (error) {
        if (this.#stopped) continue
        await this.#failed(error)
        const e = error as { name?: string; type?: string }
        if (STALE_METADATA.has(e.type ?? '') || e.name === 'KafkaJSBrokerNotFound' || e.name === 'KafkaJSConnectionError' || e.name === 'KafkaJSConnectionClosedError') {
          await this.#cluster.refreshMetadata().catch(() => undefined)
          // The partitions may have other leaders now: their loops start.
          this.#changedNow()
        }
        continue
      }
      this.#handling.add(nodeId)
      try {
        // Seeked or resumed while this round's Fetch was in flight: fetched now, not after the round.
        this.#fetchFresh(nodeId)
        await Promise.all(batches.map((b) => this.#handle(b, false)))
      } finally {
        this.#handling.delete(nodeId)
      }
    }
  }

  /**
   * One Fetch of `entries` from broker `nodeId`: their batches, in the
   * order of the response. A partition whose offset is out of range is
   * paused and reported, and has no batch; other failures throw.
   */
  async #fetch(nodeId: string, entries: readonly Entry[]): Promise<FetchedBatchOf[]> {
    const asked = new Map(entries.map((e) => [key(e.tp), { e, version: e.version, offset: e.position! }]))
    for (const e of entries) {
      e.fetching = true
      e.fresh = false
    }
    // Entries with a batch stay `fetching` until #handle is done with it.
    const handed = new Set<Entry>()
    try {
      const broker = await this.#cluster.findBroker({ nodeId })
      const byTopic = new Map<string, Array<{ partition: number; fetchOffset: string; maxBytes: number }>>()
      for (const a of asked.values()) {
        const list = byTopic.get(a.e.tp.topic) ?? []
        list.push({ partition: a.e.tp.partition, fetchOffset: String(a.offset), maxBytes: this.#o.maxBytesPerPartition })
        byTopic.set(a.e.tp.topic, list)
      }
      const { responses } = await broker.fetch({
        maxWaitTime: this.#o.maxWaitTimeInMs,
        minBytes: MIN_BYTES,
        maxBytes: MAX_BYTES,
        isolationLevel: READ_COMMITTED,
        topics: [...byTopic].map(([topic, partitions]) => ({ topic, partitions })),
      })
      this.#failures = 0
      const batches: FetchedBatchOf[] = []
      for (const { topicName, partitions } of responses) {
        for (const data of partitions) {
          const a = asked.get(key({ topic: topicName, partition: data.partition }))
          if (a === undefined) continue
          batches.push({ entry: a.e, version: a.version, offset: a.offset, batch: new this.#Batch(topicName, String(a.offset), data as never), highWatermark: BigInt(data.highWatermark) })
        }
      }
      for (const b of batches) handed.add(b.entry)
      return batches
    } catch (error) {
      const e = error as { name?: string; topic?: string; partition?: number }
      if (this.#stopped || e.name !== 'KafkaJSOffsetOutOfRange' || e.topic === undefined || e.partition === undefined) throw error
      const a = asked.get(key({ topic: e.topic, partition: e.partition }))
      if (a !== undefined && a.version === a.e.version) {
        a.e.paused = true
        this.#o.outOfRange(a.e.tp, a.offset)
      }
      return []
    } finally {
      for (const e of entries) if (!handed.has(e)) e.fetching = false
    }
  }

  /**
   * While broker `nodeId`'s loop handles a round, a Fetch of the partitions
   * seeked or resumed since (one such Fetch at a time; the next once it
   * answered), their batches handled ahead of the round's. A failed one is
   * not retried here: the loop's next Fetch asks for them, and reports its
   * own failure.
   */
  #fetchFresh(nodeId: string, led?: readonly Entry[]): void {
    if (this.#stopped || !this.#handling.has(nodeId) || this.#asides.has(nodeId)) return
    // Once per round: the leaders are looked up only when some partition is fresh.
    if (led === undefined && ![...this.#entries.values()].some((e) => e.fresh)) return
    const fresh = (led ?? this.#byLeader().get(nodeId) ?? []).filter((e) => e.fresh)
    if (fresh.length === 0) return
    this.#asides.add(nodeId)
    const run = (async () => {
      let batches: FetchedBatchOf[] = []
      try {
        batches = await this.#fetch(nodeId, fresh)
      } catch {
        // See above: the loop fetches them next.
      } finally {
        this.#asides.delete(nodeId)
      }
      this.#fetchFresh(nodeId)
      await Promise.all(batches.map((b) => this.#handle(b, true)))
      // The loop may have ended meanwhile, finding nothing else to fetch.
      if (!this.#loops.has(nodeId)) this.#changedNow()
    })()
    this.#running.add(run)
    void run.finally(() => this.#running.delete(run))
  }

  async #handle(b: FetchedBatchOf, ahead: boolean): Promise<void> {
    const { entry, version, batch } = b
    try {
      if (entry.version !== version || entry.paused || this.#entries.get(key(entry.tp)) !== entry) return
      const within = batch.messagesWithinOffset
      // Where the next fetch starts: after the last record returned, control
      // records included; past a fetch offset compaction removed (kafkajs's rule).
      let next = b.offset
      if (within.length > 0) next = BigInt(within[within.length - 1]!.offset) + 1n
      else if (batch.isEmptyDueToLogCompactedMessages()) next = b.offset + 1n
      if (next === b.offset) return
      if (batch.messages.length > 0) {
        await this.#slots.run(() => this.#o.handle({ ...entry.tp, messages: batch.messages, highWatermark: b.highWatermark }), ahead)
      }
      if (entry.version === version) entry.position = next
    } finally {
      entry.fetching = false
    }
  }

  async #failed(error: unknown): Promise<void> {
    this.#failures++
    this.#o.fetchFailed(error, this.#failures)
    const ms = Math.min(RETRY_MAX_MS, RETRY_MS * 2 ** Math.min(this.#failures - 1, 10))
    await new Promise<void>((resolve) => setTimeout(resolve, ms * (0.8 + Math.random() * 0.4)).unref())
  }
}

function key(tp: FetchedPartition): string {
  return `${tp.topic}\u0000${tp.partition}`
}
