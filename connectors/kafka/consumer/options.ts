import type { IHeaders, KafkaConfig, PartitionAssigner } from 'kafkajs'
import type { SnapshotStore } from '../../../src/snapshot-store/index.js'
import { describeValue } from '../../../src/util/index.js'
import { jsonCodec, type Codec, type PartitionStoreOptions, type StateDefinition, type Transaction } from '../../../src/store/index.js'
import type { SnapshotSchedulerOptions, SnapshotterOptions } from '../../../src/snapshot/index.js'
import { resolveDedupe, resolveOutputs, type ResolvedOutputs, type DedupeMode, type EmitContext, type OutputsOptions } from '../../../src/outputs/index.js'
import { checkLogger, type Logger } from '../../../src/logging/index.js'
import { checkClaimStore, checkStateSizeLimit } from '../../../src/runtime/index.js'
import type { WarmupOptions } from './assignor.js'
import { canRejoin } from './membership.js'

/** One Kafka record as the handler sees it. */
export interface ConsumerRecord<V> {
  readonly topic: string
  readonly partition: number
  readonly offset: bigint
  /** The key as UTF-8 text, or null. `rawKey` has its bytes. */
  readonly key: string | null
  readonly rawKey: Buffer | null
  /** The value decoded by the codec; null for a tombstone (a record without a value). */
  readonly value: V | null
  readonly headers: IHeaders
  /** The record's timestamp, milliseconds since the epoch. */
  readonly timestamp: number
}

/**
 * Applies one record to the state. It runs inside the batch's transaction
 * and must change state only through `tx`: the batch commits its records'
 * effects with the offset of its last record, or none of them. After a crash
 * or a rebalance it may run again for a record whose batch was not committed,
 * so it must not have side effects outside `tx`; what it emits through
 * `context.emit` (with options.outputs) commits with the batch and is
 * delivered after it (docs/outputs.md).
 */
export type RecordHandler<V> = (tx: Transaction, record: ConsumerRecord<V>, context: EmitContext) => void | Promise<void>

/** What a record whose value the codec cannot decode does. */
export type DecodeErrorPolicy = 'stop' | 'skip' | { deadLetter: string }

export interface ConsumerSnapshotSettings
  extends Pick<SnapshotterOptions, 'retain' | 'graceMs' | 'maxAmplification' | 'maxChainLength' | 'uploadConcurrency' | 'maxObjectBytes' | 'checkpoint'> {
  /** Where snapshots go and come from. */
  store: SnapshotStore
  /** When to snapshot each partition (time, events, bytes committed since its last one). */
  schedule?: Omit<SnapshotSchedulerOptions, 'onSnapshot' | 'onError'>
}

export interface StatefulConsumerOptions<V = unknown> {
  /** Namespace of the job's snapshots; also the default consumer group id (`tidemark-<job>`). */
  job: string
  /** Bootstrap brokers, `host:port`. */
  brokers: string[]
  /** Topics to consume; every partition of them the group assigns to this member is processed. */
  topics: string[]
  /** The group; every process of the job uses the same one. Default `tidemark-<job>`. */
  groupId?: string
  clientId?: string
  /** Local partition stores live in `<stateDir>/<topic>-<partition>`. */
  stateDir: string
  states: readonly StateDefinition[]
  handler: RecordHandler<V>
  /** Decodes record values. JSON by default. */
  codec?: Codec<V>
  /** Most records per commit; a fetched batch larger than this commits in several. Default 1000. */
  batchSize?: number
  /** Partitions processed at once (kafkajs partitionsConsumedConcurrently). Default 4. */
  concurrency?: number
  /** Incremental snapshots of every partition; without them only the local stores survive, and a partition that moves is rebuilt from the log. */
  snapshots?: ConsumerSnapshotSettings
  /**
   * On revocation and on close(): a snapshot of each partition handed off,
   * so that the next owner restores it instead of replaying. `timeoutMs`
   * bounds the wait for it; a snapshot still uploading then finishes in the
   * background (or not at all if the process exits), and the next owner
   * replays from the snapshot before. Default { snapshot: true, timeoutMs: 30000 } when snapshots are on.
   */
  handoff?: {
    snapshot?: boolean
    timeoutMs?: number
    /**
     * How long a newly assigned partition waits for its previous owner to
     * release its claim (which that owner does right after its hand-off
     * snapshot) before taking it by force. Only with a snapshot store that
     * holds claims (conditional writes). A partition whose owner crashed
     * waits this long. Default 10000.
     */
    waitMs?: number
    /**
     * A hand-off snapshot only when at least this many events were
     * committed since the partition's last snapshot; below that the
     * partition is handed off without one (its claim is released at once)
     * and the next owner restores the last snapshot and replays those
     * events from the log, which is quicker than a snapshot's round trip
     * when they are few (and its standby or warm-up copy already holds that
     * snapshot). Default 0: always a hand-off snapshot.
     */
    minEvents?: number
  }
  /**
   * Where a partition without state starts (no local store, no snapshot):
   * 'earliest' (the default) folds the partition from the first record the
   * log still holds; 'latest' starts at the group's committed offset when it
   * has one, else at the end of the log (state then covers only what follows).
   */
  startFrom?: 'earliest' | 'latest'
  /**
   * A partition whose state ends before the first record the log still
   * holds (retention deleted what lies between): 'fail' (the default) stops
   * the partition with TIDEMARK_POSITION_TRUNCATED; 'reset-to-earliest'
   * discards its state and folds it again from the log's first record.
   */
  onTruncated?: 'fail' | 'reset-to-earliest'
  /** A record the codec cannot decode: stop the partition (default), skip it, or produce it to a dead-letter topic and go on. */
  onDecodeError?: DecodeErrorPolicy
  /** Exactly-once outputs: context.emit() writes to each partition's outbox, committed with the batch and delivered after it (docs/outputs.md). */
  outputs?: OutputsOptions
  /** `'tidemark-ids'`: records whose `tidemark-id` header was already applied are skipped (a chain of Tidemark jobs). Default 'off'. */
  dedupe?: DedupeMode
  /** Download concurrency of a restore. */
  downloadConcurrency?: number
  /** Options of the partition stores. */
  store?: Omit<PartitionStoreOptions, 'path' | 'states'>
  /**
   * A soft limit on each partition's state size, in bytes (a positive
   * integer): above it a warn line is logged and `state-size-exceeded` is
   * emitted, once per crossing; nothing is refused. The size (its store's
   * files, `tidemark_state_bytes`) is measured when a partition starts and
   * after commits at most every 15 s (docs/partition-store.md, "A cap per partition").
   */
  stateSizeLimit?: number
  /** Passed to kafkajs's consumer: session and rebalance timeouts, heartbeat, fetch sizes and wait. */
  consumer?: {
    sessionTimeout?: number
    rebalanceTimeout?: number
    heartbeatInterval?: number
    /** Default 250 (CONSUMER_DEFAULTS.maxWaitTimeInMs), not kafkajs's 5000: see there. */
    maxWaitTimeInMs?: number
    maxBytesPerPartition?: number
  }
  /** Passed to kafkajs as is: ssl, sasl, connectionTimeout, requestTimeout, retry, logLevel, logCreator, socketFactory. Logging is off unless set. */
  kafka?: Omit<KafkaConfig, 'brokers' | 'clientId'>
  /**
   * The group's assignors, most preferred first (kafkajs's
   * `partitionAssigners`). Default: Tidemark's state-aware sticky assignor
   * (docs/consumer-group.md, "The state-aware assignor"), which keeps
   * partitions where they are, moves the ones that must move to the member
   * with the freshest local copy, and tells a new owner when the previous
   * one has left the group (then it takes the claim without waiting for a
   * release). Every member of a group must offer a common one.
   */
  partitionAssigners?: PartitionAssigner[]
  /**
   * Warm standbys (Kafka Streams' num.standby.replicas): the state-aware
   * assignor names this many standby members per partition, and each keeps
   * a copy of the partition's snapshots warm by following them in the
   * snapshot store (SnapshotFollower: only new table files are downloaded;
   * no broker load, no replay). A member assigned a partition it is standby
   * for restores from that copy and downloads only the delta since its last
   * sync. Needs snapshots and the default assignor. Default 0.
   */
  standbys?: number
  /**
   * How standby and warm-up copies are kept: how often each looks for a new
   * snapshot (`intervalMs`, default 5 s), and its bandwidth and disk budget.
   * `syncsPerInterval` (default 16) bounds the member's syncs, a listing
   * each: at most that many start within `intervalMs`, however many copies
   * it keeps, warm-ups first, then the copies furthest behind. A member with
   * more copies syncs each every `intervalMs` × copies / `syncsPerInterval`.
   */
  standby?: { intervalMs?: number; maxBytesPerSecond?: number; maxDiskBytes?: number; syncsPerInterval?: number }
  /**
   * Warm-up before a move (KIP-441, from the snapshot store): a partition
   * that must move to a member without a warm copy (one that joined, one
   * whose copy is old) stays with its owner, which keeps processing it,
   * while the receiver follows its snapshots like a standby (`standby`
   * sets how). Once the copy is within the lag bounds the receiver asks for
   * a rebalance itself, and the partition moves; the new owner downloads
   * only the delta. `maxWarmups` bounds the partitions warming at once in
   * the group (default 2); a copy is warm within `maxLagSnapshots`
   * snapshots of the newest (default 1) and, when given, `maxLagBytes`
   * bytes. A partition whose owner left moves at once. `true` takes the
   * defaults. Needs snapshots and the default assignor; default on when it
   * has them (`false` turns it off).
   */
  warmup?: boolean | { maxWarmups?: number; maxLagBytes?: number; maxLagSnapshots?: number }
  /** Where the consumer, its partitions' snapshotters and restores log (pino-compatible); nothing is logged without one. kafkajs's own logging is `kafka.logCreator`. */
  logger?: Logger
}

export const CONSUMER_DEFAULTS = Object.freeze({
  batchSize: 1000,
  concurrency: 4,
  handoffTimeoutMs: 30_000,
  handoffWaitMs: 10_000,
  standbyIntervalMs: 5_000,
  /** A member's standby and warm-up syncs (a listing each) that start within standbyIntervalMs: its listing rate does not grow with its copies. */
  standbySyncsPerInterval: 16,
  /** KIP-441's max.warmup.replicas default. */
  maxWarmups: 2,
  maxLagSnapshots: 1,
  startFrom: 'earliest' as const,
  onTruncated: 'fail' as const,
  onDecodeError: 'stop' as const,
  clientId: 'tidemark',
  /**
   * kafkajs's fetch wait (its default is 5000). A partition resumed while a
   * fetch of its broker is in flight (the member's other partitions there
   * are caught up) waits for that fetch to return, up to this long: the
   * first records after a restore came up to 5 s after it. At 250 they come
   * at most 250 ms after; at 500 the hand-off bench's new owners waited
   * 420-500 ms in 4 of 6 hand-offs. (The other wait, kafkajs's sleep while
   * every partition of a broker is paused, ends at the resume:
   * kafkajs-fixes.ts.) The cost is idle fetching: 32 caught-up partitions
   * took about 2 % of a core at 250 (npm run bench -- idle; --max-wait-ms N
   * for other values).
   */
  maxWaitTimeInMs: 250,
  /** kafkajs's own default: the most a fetch returns of one partition. */
  maxBytesPerPartition: 1_048_576,
})

export interface ResolvedConsumerOptions<V> {
  readonly job: string
  readonly brokers: readonly string[]
  readonly topics: readonly string[]
  readonly groupId: string
  readonly clientId: string
  readonly stateDir: string
  readonly states: readonly StateDefinition[]
  readonly handler: RecordHandler<V>
  readonly codec: Codec<V>
  readonly batchSize: number
  readonly concurrency: number
  readonly snapshots: ConsumerSnapshotSettings | undefined
  readonly handoff: { readonly snapshot: boolean; readonly timeoutMs: number; readonly waitMs: number; readonly minEvents: number }
  readonly startFrom: 'earliest' | 'latest'
  readonly onTruncated: 'fail' | 'reset-to-earliest'
  readonly onDecodeError: DecodeErrorPolicy
  readonly outputs: ResolvedOutputs | undefined
  readonly dedupe: DedupeMode
  readonly downloadConcurrency: number | undefined
  readonly store: Omit<PartitionStoreOptions, 'path' | 'states'>
  readonly stateSizeLimit: number | undefined
  readonly consumer: NonNullable<StatefulConsumerOptions['consumer']>
  readonly kafka: Omit<KafkaConfig, 'brokers' | 'clientId'>
  /** undefined: the state-aware assignor, which the consumer creates (it needs the consumer's local state). */
  readonly partitionAssigners: readonly PartitionAssigner[] | undefined
  readonly standbys: number
  readonly standby: { readonly intervalMs: number; readonly maxBytesPerSecond: number; readonly maxDiskBytes: number; readonly syncsPerInterval: number }
  readonly warmup: WarmupOptions | undefined
  readonly logger: Logger
}

const TOPIC = /^[a-zA-Z0-9._-]{1,249}$/
const KNOWN = new Set([
  'job', 'brokers', 'topics', 'groupId', 'clientId', 'stateDir', 'states', 'handler', 'codec', 'batchSize', 'concurrency', 'snapshots',
  'handoff', 'startFrom', 'onTruncated', 'onDecodeError', 'downloadConcurrency', 'store', 'stateSizeLimit', 'consumer', 'kafka', 'outputs', 'dedupe', 'logger',
  'partitionAssigners', 'standbys', 'standby', 'warmup',
])

/** Checks the options once, naming the field that is wrong. */
export function resolveConsumerOptions<V>(options: StatefulConsumerOptions<V>): ResolvedConsumerOptions<V> {
  if (typeof options !== 'object' || options === null) throw new TypeError(`StatefulConsumer options must be an object, got ${describeValue(options)}`)
  for (const key of Object.keys(options)) if (!KNOWN.has(key)) throw new TypeError(`options.${key} is not an option of StatefulConsumer`)
  if (typeof options.job !== 'string' || options.job === '' || options.job.includes('/')) throw new TypeError(`options.job must be a non-empty string without '/', got ${describeValue(options.job)}`)
  const { brokers, topics } = options
  if (!Array.isArray(brokers) || brokers.length === 0 || !brokers.every((b) => typeof b === 'string' && /^[^\s:]+:\d+$/.test(b))) {
    throw new TypeError(`options.brokers must be a non-empty array of 'host:port' strings, got ${JSON.stringify(brokers)}`)
  }
  if (!Array.isArray(topics) || topics.length === 0 || !topics.every((t) => typeof t === 'string' && TOPIC.test(t) && t !== '.' && t !== '..')) {
    throw new TypeError(`options.topics must be a non-empty array of Kafka topic names, got ${JSON.stringify(topics)}`)
  }
  if (typeof options.stateDir !== 'string' || options.stateDir === '') throw new TypeError(`options.stateDir must be a non-empty path, got ${describeValue(options.stateDir)}`)
  if (!Array.isArray(options.states)) throw new TypeError('options.states must be an array of state definitions')
  if (typeof options.handler !== 'function') throw new TypeError('options.handler must be a function (tx, record, context) => void')
  const codec = options.codec ?? jsonCodec<V>()
  if (typeof codec?.decode !== 'function') throw new TypeError('options.codec must be a codec with decode(bytes)')
  const groupId = options.groupId ?? `tidemark-${options.job}`
  if (typeof groupId !== 'string' || groupId === '') throw new TypeError(`options.groupId must be a non-empty string, got ${describeValue(groupId)}`)
  const clientId = options.clientId ?? CONSUMER_DEFAULTS.clientId
  if (typeof clientId !== 'string' || clientId === '') throw new TypeError(`options.clientId must be a non-empty string, got ${describeValue(clientId)}`)
  const batchSize = integer(options.batchSize ?? CONSUMER_DEFAULTS.batchSize, 'options.batchSize', 1, 1_000_000)
  const concurrency = integer(options.concurrency ?? CONSUMER_DEFAULTS.concurrency, 'options.concurrency', 1, 1024)
  if (options.snapshots !== undefined && typeof options.snapshots?.store?.put !== 'function') throw new TypeError('options.snapshots.store must be a SnapshotStore')
  if (options.snapshots !== undefined) checkClaimStore(options.snapshots.store, 'options.snapshots.store')
  const handoff = options.handoff ?? {}
  if (typeof handoff !== 'object' || handoff === null) throw new TypeError(`options.handoff must be an object, got ${describeValue(handoff)}`)
  const handoffSnapshot = handoff.snapshot ?? options.snapshots !== undefined
  if (typeof handoffSnapshot !== 'boolean') throw new TypeError(`options.handoff.snapshot must be a boolean, got ${describeValue(handoffSnapshot)}`)
  if (handoffSnapshot && options.snapshots === undefined) throw new TypeError('options.handoff.snapshot needs options.snapshots (where would the snapshot go?)')
  const timeoutMs = integer(handoff.timeoutMs ?? CONSUMER_DEFAULTS.handoffTimeoutMs, 'options.handoff.timeoutMs', 0, 2 ** 31 - 1)
  const waitMs = integer(handoff.waitMs ?? CONSUMER_DEFAULTS.handoffWaitMs, 'options.handoff.waitMs', 0, 2 ** 31 - 1)
  const minEvents = integer(handoff.minEvents ?? 0, 'options.handoff.minEvents', 0, Number.MAX_SAFE_INTEGER)
  for (const key of Object.keys(handoff)) if (!['snapshot', 'timeoutMs', 'waitMs', 'minEvents'].includes(key)) throw new TypeError(`options.handoff.${key} is not an option of hand-offs`)
  const startFrom = options.startFrom ?? CONSUMER_DEFAULTS.startFrom
  if (startFrom !== 'earliest' && startFrom !== 'latest') throw new TypeError(`options.startFrom must be 'earliest' or 'latest', got ${describeValue(startFrom)}`)
  const onTruncated = options.onTruncated ?? CONSUMER_DEFAULTS.onTruncated
  if (onTruncated !== 'fail' && onTruncated !== 'reset-to-earliest') throw new TypeError(`options.onTruncated must be 'fail' or 'reset-to-earliest', got ${describeValue(onTruncated)}`)
  const onDecodeError = options.onDecodeError ?? CONSUMER_DEFAULTS.onDecodeError
  if (onDecodeError !== 'stop' && onDecodeError !== 'skip') {
    const topic = (onDecodeError as { deadLetter?: unknown } | null)?.deadLetter
    if (typeof topic !== 'string' || !TOPIC.test(topic)) {
      throw new TypeError(`options.onDecodeError must be 'stop', 'skip' or { deadLetter: '<topic>' }, got ${JSON.stringify(onDecodeError)}`)
    }
    if (topics.includes(topic)) throw new RangeError(`options.onDecodeError.deadLetter (${topic}) must not be one of the topics consumed`)
  }
  const downloadConcurrency = options.downloadConcurrency === undefined ? undefined : integer(options.downloadConcurrency, 'options.downloadConcurrency', 1, 64)
  const consumer = options.consumer ?? {}
  if (typeof consumer !== 'object' || consumer === null) throw new TypeError(`options.consumer must be an object, got ${describeValue(consumer)}`)
  for (const [key, value] of Object.entries(consumer)) if (value !== undefined) integer(value, `options.consumer.${key}`, 1, 2 ** 31 - 1)
  const kafka = options.kafka ?? {}
  if (typeof kafka !== 'object' || kafka === null) throw new TypeError(`options.kafka must be an object of kafkajs options, got ${describeValue(kafka)}`)
  // kafkajs would take them from here and drop ours: one place says which assignors run.
  if ('partitionAssigners' in kafka) throw new TypeError('options.kafka.partitionAssigners is not read: pass options.partitionAssigners')
  const standbys = integer(options.standbys ?? 0, 'options.standbys', 0, 16)
  if (standbys > 0 && options.snapshots === undefined) throw new TypeError('options.standbys needs options.snapshots: a standby follows the partition\'s snapshots')
  if (standbys > 0 && options.partitionAssigners !== undefined) throw new TypeError('options.standbys needs the default assignor (the state-aware one names the standbys); leave options.partitionAssigners unset')
  const standby = options.standby ?? {}
  if (typeof standby !== 'object' || standby === null) throw new TypeError(`options.standby must be an object, got ${describeValue(standby)}`)
  for (const key of Object.keys(standby)) if (!['intervalMs', 'maxBytesPerSecond', 'maxDiskBytes', 'syncsPerInterval'].includes(key)) throw new TypeError(`options.standby.${key} is not an option of standby copies`)
  const warmup = resolveWarmup(options)
  const assigners = options.partitionAssigners
  if (assigners !== undefined && (!Array.isArray(assigners) || assigners.length === 0 || !assigners.every((a) => typeof a === 'function'))) {
    throw new TypeError(`options.partitionAssigners must be a non-empty array of kafkajs PartitionAssigner functions, got ${describeValue(assigners)}`)
  }
  return Object.freeze({
    job: options.job,
    brokers: Object.freeze([...brokers]),
    topics: Object.freeze([...new Set(topics)]),
    groupId,
    clientId,
    stateDir: options.stateDir,
    states: options.states,
    handler: options.handler,
    codec,
    batchSize,
    concurrency,
    snapshots: options.snapshots,
    handoff: Object.freeze({ snapshot: handoffSnapshot, timeoutMs, waitMs, minEvents }),
    startFrom,
    onTruncated,
    onDecodeError,
    outputs: resolveOutputs(options.outputs),
    dedupe: resolveDedupe(options.dedupe),
    downloadConcurrency,
    store: options.store ?? {},
    stateSizeLimit: checkStateSizeLimit(options.stateSizeLimit, 'options.stateSizeLimit'),
    consumer,
    kafka,
    partitionAssigners: assigners === undefined ? undefined : Object.freeze([...assigners]),
    standbys,
    standby: Object.freeze({
      intervalMs: integer(standby.intervalMs ?? CONSUMER_DEFAULTS.standbyIntervalMs, 'options.standby.intervalMs', 1, 2 ** 31 - 1),
      maxBytesPerSecond: integer(standby.maxBytesPerSecond ?? 0, 'options.standby.maxBytesPerSecond', 0, Number.MAX_SAFE_INTEGER),
      maxDiskBytes: integer(standby.maxDiskBytes ?? 0, 'options.standby.maxDiskBytes', 0, Number.MAX_SAFE_INTEGER),
      syncsPerInterval: integer(standby.syncsPerInterval ?? CONSUMER_DEFAULTS.standbySyncsPerInterval, 'options.standby.syncsPerInterval', 1, 1_000_000),
    }),
    warmup,
    logger: checkLogger(options.logger, 'options.logger'),
  })
}

function resolveWarmup(options: Pick<StatefulConsumerOptions, 'warmup' | 'snapshots' | 'partitionAssigners'>): WarmupOptions | undefined {
  // On by default wherever it can run (Kafka Streams warms up by default too):
  // a partition then moves from a warm copy, and since a round stops only what
  // moves, the extra round that a warm-up asks for costs the others nothing.
  const value = options.warmup ?? (options.snapshots !== undefined && options.partitionAssigners === undefined && canRejoin)
  if (value === false) return undefined
  if (value !== true && (typeof value !== 'object' || value === null)) throw new TypeError(`options.warmup must be a boolean or { maxWarmups?, maxLagBytes?, maxLagSnapshots? }, got ${describeValue(value)}`)
  if (options.snapshots === undefined) throw new TypeError('options.warmup needs options.snapshots: a partition warms by following its snapshots')
  if (options.partitionAssigners !== undefined) throw new TypeError('options.warmup needs the default assignor (the state-aware one holds moves back); leave options.partitionAssigners unset')
  // The receiver asks for the rebalance that moves a warm partition; without that it would warm forever.
  if (!canRejoin) throw new TypeError('options.warmup needs kafkajs 2.2.4: Tidemark asks for the rebalance that moves a warm partition through it (docs/consumer-group.md)')
  const given = value === true ? {} : value
  for (const key of Object.keys(given)) if (!['maxWarmups', 'maxLagBytes', 'maxLagSnapshots'].includes(key)) throw new TypeError(`options.warmup.${key} is not an option of warm-ups`)
  const maxLagBytes = given.maxLagBytes === undefined ? undefined : integer(given.maxLagBytes, 'options.warmup.maxLagBytes', 0, Number.MAX_SAFE_INTEGER)
  return Object.freeze({
    maxWarmups: integer(given.maxWarmups ?? CONSUMER_DEFAULTS.maxWarmups, 'options.warmup.maxWarmups', 1, 1024),
    maxLagBytes,
    maxLagSnapshots: given.maxLagSnapshots === undefined && maxLagBytes !== undefined ? undefined : integer(given.maxLagSnapshots ?? CONSUMER_DEFAULTS.maxLagSnapshots, 'options.warmup.maxLagSnapshots', 0, 1_000_000),
  })
}

function integer(value: unknown, name: string, min: number, max: number): number {
  if (typeof value !== 'number') throw new TypeError(`${name} must be a number, got ${describeValue(value)}`)
  if (!Number.isSafeInteger(value) || value < min || value > max) throw new RangeError(`${name} (${value}) must be an integer from ${min} to ${max}`)
  return value
}
