import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { Counter, Gauge, Histogram, Registry } from './prom-client.js'
import { METRICS_CHANNELS, OWNERSHIP_EVENTS, RESTORE_SOURCES, SNAPSHOT_FAILURE_CODES, SNAPSHOT_OUTCOMES, type CommitMessage, type LagMessage, type OutboxMessage, type OwnershipMessage, type PartitionLabels, type PartitionMessage, type ReplayMessage, type RestoreMessage, type SnapshotLabels, type SnapshotMessage, type StateSizeMessage } from '../../src/metrics/index.js'
import { describeValue } from '../../src/util/index.js'

export interface PrometheusMetricsOptions {
  /** The registry the series are registered in. Default: a new one (never prom-client's global registry). */
  registry?: Registry
  /** Prefix of every series name. Default `tidemark_`. */
  prefix?: string
  /** Histogram buckets, to override the defaults (docs/metrics.md). */
  buckets?: {
    commitSeconds?: number[]
    batchEvents?: number[]
    snapshotSeconds?: number[]
    stallSeconds?: number[]
    restoreSeconds?: number[]
  }
}

export const PROMETHEUS_DEFAULTS = Object.freeze({
  prefix: 'tidemark_',
  buckets: Object.freeze({
    commitSeconds: Object.freeze([0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1]),
    batchEvents: Object.freeze([1, 10, 50, 100, 500, 1000, 5000, 10000, 50000]),
    snapshotSeconds: Object.freeze([0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]),
    stallSeconds: Object.freeze([0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5]),
    // From an empty or local start (milliseconds) to a large download (minutes).
    restoreSeconds: Object.freeze([0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600]),
  }),
})

// `job_name`, not `job`: Prometheus sets `job` (and `instance`) on every
// series it scrapes, and renames a `job` label of the target's own to
// `exported_job`, where no query written as {job="..."} finds it.
const PARTITION = ['job_name', 'topic', 'partition'] as const
const SNAPSHOT = ['job_name', 'partition'] as const

/**
 * Tidemark's metrics channels as Prometheus series (docs/metrics.md): it
 * subscribes to every channel of METRICS_CHANNELS when made and updates its
 * series from the messages; close() unsubscribes and removes the series from
 * the registry. Serve `registry.metrics()` (see examples/metrics/).
 *
 * A partition's counters and histograms, with every label value known in
 * advance (outcomes, failure codes, restore sources, ownership events),
 * start at zero when the partition is announced or first heard of: a series
 * that appears at 1 has no earlier sample, so increase() and rate() miss the
 * first failure. Gauges start when their value is known (a position of 0
 * would be a lie).
 */
export class PrometheusMetrics {
  readonly registry: Registry
  readonly #subscriptions: Array<[string, (message: unknown) => void]> = []
  readonly #names: string[] = []
  /** Partitions (either label set) whose series were started at zero. */
  readonly #started = new Set<string>()
  #closed = false

  constructor(options: PrometheusMetricsOptions = {}) {
    if (options === null || typeof options !== 'object') throw new TypeError(`options must be an object, got ${describeValue(options)}`)
    const prefix = options.prefix ?? PROMETHEUS_DEFAULTS.prefix
    if (typeof prefix !== 'string' || !/^[a-zA-Z_:][a-zA-Z0-9_:]*$|^$/.test(prefix)) throw new TypeError(`options.prefix must be a Prometheus name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*), got ${JSON.stringify(prefix)}`)
    if (options.registry !== undefined && !(options.registry instanceof Registry)) throw new TypeError('options.registry must be a prom-client Registry')
    const buckets = { ...PROMETHEUS_DEFAULTS.buckets, ...options.buckets }
    for (const [name, list] of Object.entries(buckets)) {
      if (!Array.isArray(list) || list.length === 0 || !list.every((b) => typeof b === 'number' && b > 0)) throw new TypeError(`options.buckets.${name} must be a non-empty array of positive numbers`)
    }
    this.registry = options.registry ?? new Registry()
    const reg = [this.registry]
    const name = (n: string): string => {
      this.#names.push(prefix + n)
      return prefix + n
    }

    const commits = new Counter({ name: name('commits_total'), help: 'Batches committed (state changes and position in one LevelDB write).', labelNames: PARTITION, registers: reg })
    const events = new Counter({ name: name('committed_events_total'), help: 'Events committed.', labelNames: PARTITION, registers: reg })
    const eventBytes = new Counter({ name: name('committed_bytes_total'), help: 'Bytes of the committed events as read from the log.', labelNames: PARTITION, registers: reg })
    const batchEvents = new Histogram({ name: name('commit_batch_events'), help: 'Events per committed batch.', labelNames: PARTITION, buckets: [...buckets.batchEvents], registers: reg })
    const commitSeconds = new Histogram({ name: name('commit_duration_seconds'), help: 'From a batch handed to the store until its write was acknowledged.', labelNames: PARTITION, buckets: [...buckets.commitSeconds], registers: reg })
    const position = new Gauge({ name: name('position'), help: 'The store\'s position: the offset of the last event committed.', labelNames: PARTITION, registers: reg })
    const lag = new Gauge({ name: name('lag_events'), help: 'Events in the log after the store\'s position (log tail - position - 1), as of the last look at the tail.', labelNames: PARTITION, registers: reg })

    const snapshots = new Counter({ name: name('snapshots_total'), help: 'Snapshots taken, by outcome (ok: manifest written; failed).', labelNames: [...SNAPSHOT, 'outcome'], registers: reg })
    const snapshotFailures = new Counter({ name: name('snapshot_failures_total'), help: 'Failed snapshots by error code.', labelNames: [...SNAPSHOT, 'code'], registers: reg })
    const snapshotSeconds = new Histogram({ name: name('snapshot_duration_seconds'), help: 'Duration of a successful snapshot: checkpoint, upload, manifest and the gc after it.', labelNames: SNAPSHOT, buckets: [...buckets.snapshotSeconds], registers: reg })
    const stallSeconds = new Histogram({ name: name('snapshot_stall_seconds'), help: 'How long a snapshot\'s checkpoint blocked commits.', labelNames: SNAPSHOT, buckets: [...buckets.stallSeconds], registers: reg })
    const uploaded = new Counter({ name: name('snapshot_uploaded_bytes_total'), help: 'Bytes written to the snapshot store by successful snapshots (new data objects and manifests).', labelNames: SNAPSHOT, registers: reg })
    const stateBytes = new Gauge({ name: name('snapshot_state_bytes'), help: 'Size of the state the last successful snapshot holds.', labelNames: SNAPSHOT, registers: reg })
    const snapshotTime = new Gauge({ name: name('snapshot_timestamp_seconds'), help: 'When the last successful snapshot ended (Unix time): time() minus it is the age of the newest snapshot.', labelNames: SNAPSHOT, registers: reg })
    const snapshotOffset = new Gauge({ name: name('snapshot_offset'), help: 'The position of the last successful snapshot: a restore replays after it.', labelNames: SNAPSHOT, registers: reg })

    const restores = new Counter({ name: name('restores_total'), help: 'Restores finished, by where the state came from (snapshot, local, empty).', labelNames: [...SNAPSHOT, 'source'], registers: reg })
    const restoreDownloaded = new Gauge({ name: name('restore_downloaded_bytes'), help: 'Bytes the current (or last) restore downloaded so far.', labelNames: SNAPSHOT, registers: reg })
    const restoreSize = new Gauge({ name: name('restore_size_bytes'), help: 'Bytes the current (or last) restore downloads in all.', labelNames: SNAPSHOT, registers: reg })
    const restoreSeconds = new Histogram({ name: name('restore_duration_seconds'), help: 'Duration of a restore, from its start until the store is in place (whatever the source).', labelNames: SNAPSHOT, buckets: [...buckets.restoreSeconds], registers: reg })

    const replayDone = new Gauge({ name: name('replay_events'), help: 'Events the current (or last) replay after a start applied so far.', labelNames: PARTITION, registers: reg })
    const replaySize = new Gauge({ name: name('replay_size_events'), help: 'Events the current (or last) replay covers.', labelNames: PARTITION, registers: reg })

    const ownership = new Counter({ name: name('ownership_events_total'), help: 'Claim and fencing events: acquired, holder-dead, renew-failed, lost, fenced, release-failed.', labelNames: [...SNAPSHOT, 'event'], registers: reg })
    const outbox = new Gauge({ name: name('outbox_depth'), help: 'Outputs committed in the outbox and not yet delivered.', labelNames: PARTITION, registers: reg })
    const partitionBytes = new Gauge({ name: name('state_bytes'), help: 'Size of the partition store\'s state files (tables, write-ahead logs, MANIFEST), measured at its start and after commits every 15 s at most.', labelNames: PARTITION, registers: reg })
    const partitionLimit = new Gauge({ name: name('state_limit_bytes'), help: 'The partition\'s soft limit on its state size (stateSizeLimit), when one is set.', labelNames: PARTITION, registers: reg })

    const startPartition = (l: Record<(typeof PARTITION)[number], string>): void => {
      if (!this.#firstSeen('p', l)) return
      for (const c of [commits, events, eventBytes]) c.inc(l, 0)
      for (const h of [batchEvents, commitSeconds]) h.zero(l)
    }
    const startSnapshots = (l: Record<(typeof SNAPSHOT)[number], string>): void => {
      if (!this.#firstSeen('s', l)) return
      for (const outcome of SNAPSHOT_OUTCOMES) snapshots.inc({ ...l, outcome }, 0)
      for (const code of SNAPSHOT_FAILURE_CODES) snapshotFailures.inc({ ...l, code }, 0)
      for (const source of RESTORE_SOURCES) restores.inc({ ...l, source }, 0)
      for (const event of OWNERSHIP_EVENTS) ownership.inc({ ...l, event }, 0)
      uploaded.inc(l, 0)
      for (const h of [snapshotSeconds, stallSeconds, restoreSeconds]) h.zero(l)
    }
    // Every message starts its partition's series too: a partition announced
    // before this adapter subscribed is started at its first message.
    const p = (m: PartitionLabels) => {
      const l = { job_name: m.job, topic: m.topic, partition: String(m.partition) }
      startPartition(l)
      return l
    }
    const s = (m: SnapshotLabels) => {
      const l = { job_name: m.job, partition: m.partition }
      startSnapshots(l)
      return l
    }

    this.#on<PartitionMessage>(METRICS_CHANNELS.partition, (m) => {
      p(m)
      s({ job: m.job, partition: m.snapshotPartition })
    })

    this.#on<CommitMessage>(METRICS_CHANNELS.commit, (m) => {
      const l = p(m)
      commits.inc(l)
      events.inc(l, m.events)
      eventBytes.inc(l, m.bytes)
      batchEvents.observe(l, m.events)
      commitSeconds.observe(l, m.durationMs / 1000)
      position.set(l, Number(m.offset))
    })
    this.#on<LagMessage>(METRICS_CHANNELS.lag, (m) => {
      const l = p(m)
      lag.set(l, m.lag)
      if (m.position !== undefined) position.set(l, Number(m.position))
    })
    this.#on<SnapshotMessage>(METRICS_CHANNELS.snapshot, (m) => {
      const l = s(m)
      snapshots.inc({ ...l, outcome: m.outcome })
      if (m.outcome === 'failed') {
        snapshotFailures.inc({ ...l, code: m.code })
        return
      }
      snapshotSeconds.observe(l, m.durationMs / 1000)
      stallSeconds.observe(l, m.stallMs / 1000)
      uploaded.inc(l, m.bytesUploaded)
      stateBytes.set(l, m.bytesTotal)
      snapshotTime.set(l, Date.now() / 1000)
      if (m.offset !== undefined) snapshotOffset.set(l, Number(m.offset))
    })
    this.#on<RestoreMessage>(METRICS_CHANNELS.restore, (m) => {
      const l = s(m)
      restoreDownloaded.set(l, m.bytesDownloaded)
      restoreSize.set(l, m.bytesTotal)
      if (m.phase === 'done') {
        restores.inc({ ...l, source: m.source ?? 'snapshot' })
        if (m.durationMs !== undefined) restoreSeconds.observe(l, m.durationMs / 1000)
      }
    })
    this.#on<ReplayMessage>(METRICS_CHANNELS.replay, (m) => {
      const l = p(m)
      replayDone.set(l, m.done)
      replaySize.set(l, m.total)
    })
    this.#on<OwnershipMessage>(METRICS_CHANNELS.ownership, (m) => ownership.inc({ ...s(m), event: m.event }))
    this.#on<OutboxMessage>(METRICS_CHANNELS.outbox, (m) => outbox.set(p(m), m.depth))
    this.#on<StateSizeMessage>(METRICS_CHANNELS.stateSize, (m) => {
      const l = p(m)
      partitionBytes.set(l, m.bytes)
      if (m.limit !== undefined) partitionLimit.set(l, m.limit)
    })
  }

  /** The series in Prometheus's text format (what `/metrics` serves). */
  metrics(): Promise<string> {
    return this.registry.metrics()
  }

  /** The Content-Type of metrics(). */
  get contentType(): string {
    return this.registry.contentType
  }

  /** Unsubscribes from the channels (publishers then build nothing again) and removes the series from the registry. */
  close(): void {
    if (this.#closed) return
    this.#closed = true
    for (const [channel, handler] of this.#subscriptions) unsubscribe(channel, handler)
    for (const name of this.#names) this.registry.removeSingleMetric(name)
  }

  /** True the first time these labels are seen (kind: 'p' partition labels, 's' snapshot labels). */
  #firstSeen(kind: 'p' | 's', labels: Record<string, string>): boolean {
    // Runs per commit while subscribed: a join, not JSON.stringify.
    const key = `${kind}\0${Object.values(labels).join('\0')}`
    if (this.#started.has(key)) return false
    this.#started.add(key)
    return true
  }

  #on<M>(channel: string, update: (message: M) => void): void {
    const handler = (message: unknown): void => {
      try {
        update(message as M)
      } catch {
        // A subscriber that throws would be rethrown as an uncaught
        // exception by diagnostics_channel: a metric is never worth that.
      }
    }
    subscribe(channel, handler)
    this.#subscriptions.push([channel, handler])
  }
}

/** Subscribes a PrometheusMetrics to Tidemark's metrics channels. */
export function createPrometheusMetrics(options?: PrometheusMetricsOptions): PrometheusMetrics {
  return new PrometheusMetrics(options)
}
