import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { PartitionStore } from '../../../src/store/index.js'
import { mapLimit } from '../../../src/util/index.js'
import { SnapshotFollower, SnapshotPacer, type FollowerClock, type SnapshotFollowerEvent, type SnapshotFollowerStatus } from '../../../src/snapshot/index.js'
import type { AssignmentInfo, LocalCopy, MemberState } from './assignor-metadata.js'
import type { ResolvedConsumerOptions } from './options.js'
import { partitionKey, type TopicPartition } from './partition-task.js'
import type { TransferPriority } from './transfer-priority.js'

/**
 * What one member holds beside its running partitions, and what it tells
 * the state-aware assignor at each join: the positions of stores it closed
 * or that an earlier process left in stateDir, its standby copies (one
 * SnapshotFollower each), the last assignment's generation, and which of its
 * new partitions no member owned before (their claims are taken at once).
 */
/** The consumer options that local state reads. */
/** How many standby sync intervals a warm copy waits for the member's other warm-ups before it asks for its move alone. */
const WARM_BATCH_WAITS = 10
/** Stores findOnDisk opens at once (LevelDB's opens run on libuv's pool of 4 threads). */
const FIND_CONCURRENCY = 8

type LocalStateOptions = Pick<ResolvedConsumerOptions<unknown>, 'job' | 'stateDir' | 'topics' | 'logger' | 'snapshots' | 'standby' | 'handoff' | 'warmup'>

interface Follower {
  readonly tp: TopicPartition
  readonly follower: SnapshotFollower
  /** A warm-up (the partition moves here once the copy is warm) rather than a standby. */
  warmup: boolean
}

export class LocalState {
  readonly #o: LocalStateOptions
  readonly #onStandby: (tp: TopicPartition, event: SnapshotFollowerEvent) => void
  readonly #onWarm: () => void
  /** Standby and warm-up downloads wait for this member's restores and hand-offs. */
  readonly #priority: TransferPriority
  /** Local copies of partitions that no task runs here, by partition key. */
  readonly #copies = new Map<string, LocalCopy>()
  #generation = 0
  #orphaned = new Set<string>()
  /** The standby and warm-up copies this member keeps, by partition key. */
  readonly #standbys = new Map<string, Follower>()
  /** Looks at the warm-ups' copies while there are any (a sync that finds nothing new reports no event). */
  #warmTimer: NodeJS.Timeout | undefined
  /** Whether onWarm was called for the current assignment. */
  #warmReported = false
  /** When the first of the current warm-ups was seen warm (Date.now()). */
  #firstWarmAt: number | undefined
  /** Standby copies of partitions just assigned here as active: their tasks restore from them. */
  readonly #handover = new Map<string, SnapshotFollower>()
  /** The copies' syncs, a listing each, share standby.syncsPerInterval turns per intervalMs: the member's request rate does not grow with its copies (issue 38). */
  readonly #pacer: SnapshotPacer
  /** The copies' clock (tests give a manual one): the pacer's turns are on it. */
  readonly #clock: FollowerClock | undefined

  /**
   * onWarm: a warm-up's copy became warm (once per assignment): the member
   * asks for the rebalance that moves the partition here.
   */
  constructor(options: LocalStateOptions, priority: TransferPriority, onStandby: (tp: TopicPartition, event: SnapshotFollowerEvent) => void, onWarm: () => void = () => undefined, clock?: FollowerClock) {
    this.#o = options
    this.#priority = priority
    this.#onStandby = onStandby
    this.#onWarm = onWarm
    this.#pacer = new SnapshotPacer({ slots: options.standby.syncsPerInterval })
    this.#clock = clock
  }

  /** The partition stores an earlier process left in stateDir, with their positions (each opened once). */
  async findOnDisk(): Promise<void> {
    const { stateDir, topics, logger, job } = this.#o
    let names: string[]
    try {
      names = await readdir(stateDir)
    } catch {
      return
    }
    const wanted = new Set(topics)
    const found = names.flatMap((name) => {
      const dash = name.lastIndexOf('-')
      const topic = name.slice(0, dash)
      return dash > 0 && wanted.has(topic) && /^\d+$/.test(name.slice(dash + 1)) ? [{ name, topic, partition: Number(name.slice(dash + 1)) }] : []
    })
    // Several at once: a member restarted with hundreds of stores reads them
    // all before it joins, and each open replays the store's write-ahead log.
    const positions = await mapLimit(found, FIND_CONCURRENCY, async ({ name, topic, partition }) => {
      try {
        const store = await PartitionStore.open({ path: join(stateDir, name), create: false })
        try {
          return store.position(topic, partition)
        } finally {
          await store.close()
        }
      } catch (error) {
        // Not a store (or a damaged one): nothing to advertise; its task restores it as it would anyway.
        logger.warn({ job, path: join(stateDir, name), err: error }, 'a directory in stateDir is no partition store that opens; not advertised')
        return undefined
      }
    })
    found.forEach(({ name, topic, partition }, i) => {
      const position = positions[i]
      if (position !== undefined) this.#copies.set(name, { topic, partition, position })
    })
  }

  /** A task closed here: its store stays, at this position. */
  closed(tp: TopicPartition, position: bigint | undefined): void {
    if (position !== undefined) this.#copies.set(partitionKey(tp), { topic: tp.topic, partition: tp.partition, position })
  }

  /**
   * What this member advertises (kafkajs asks synchronously at each join):
   * the partitions it runs, and every local copy with its position, so
   * that a partition that must move goes where its state already is, and a
   * member restarted with its state dir gets its partitions back.
   */
  advertise(running: ReadonlyArray<{ key: string; topic: string; partition: number; position: bigint | undefined }>): MemberState {
    const copies = new Map(this.#copies)
    const owned: TopicPartition[] = []
    for (const task of running) {
      owned.push({ topic: task.topic, partition: task.partition })
      if (task.position !== undefined) copies.set(task.key, { topic: task.topic, partition: task.partition, position: task.position })
    }
    const standbys: TopicPartition[] = []
    for (const [key, { tp, follower, warmup }] of this.#standbys) {
      if (!warmup) standbys.push(tp)
      const status = follower.status()
      if (status.snapshot === undefined && nothingToFollow(status)) {
        // No snapshot to follow yet: a move would replay the log whatever copy it went to, so this one is as warm as any.
        if (!copies.has(key)) copies.set(key, { ...tp, lag: { snapshots: 0, bytes: 0 } })
        continue
      }
      const position = status.snapshot?.positions.find((p) => p.topic === tp.topic && p.partition === tp.partition)?.offset
      if (position === undefined) continue
      const lag = { snapshots: status.snapshotsBehind, bytes: status.bytesBehind }
      const other = copies.get(key)
      if (other === undefined || other.position === undefined || other.position < position) copies.set(key, { ...tp, position, snapshot: status.snapshot!.id, lag })
      // A fresher store here is at least as warm: the lag that #checkWarm() judges goes with it, so that the assignor judges alike.
      else if (warmup) copies.set(key, { ...other, lag })
    }
    return { generation: this.#generation, owned, standbys, copies: [...copies.values()] }
  }

  /**
   * A new assignment (before its tasks are created): remembers its
   * generation and orphaned partitions, starts a follower for each
   * partition this member is now standby for, removes the copies it no
   * longer keeps, and hands the copy of a partition that became active here
   * (with no task yet) to that partition's task.
   */
  assigned(info: AssignmentInfo | undefined, active: readonly TopicPartition[], hasTask: (tp: TopicPartition) => boolean): void {
    const o = this.#o
    const activeKeys = new Set(active.map(partitionKey))
    // An orphan assigned here again at the very next round stays one: its
    // task may not have taken the dead owner's claim yet (a kafkajs
    // crash-restart closes it), and this member, which advertised it as
    // owned meanwhile, is all the leader sees holding it. The next round
    // only: after a round without this member it may have had a live owner.
    const carried = info !== undefined && info.generation === this.#generation + 1 ? [...this.#orphaned].filter((key) => activeKeys.has(key)) : []
    this.#generation = info?.generation ?? this.#generation
    this.#orphaned = new Set([...(info?.orphaned ?? []).map(partitionKey), ...carried])
    this.#warmReported = false
    this.#firstWarmAt = undefined
    if (o.snapshots === undefined) return
    const wanted = new Map((info?.standbys ?? []).map((tp) => [partitionKey(tp), { tp, warmup: false }]))
    for (const tp of info?.warmups ?? []) wanted.set(partitionKey(tp), { tp, warmup: true })
    for (const [key, { tp, follower }] of this.#standbys) {
      if (wanted.has(key)) continue
      this.#standbys.delete(key)
      if (activeKeys.has(key) && !hasTask(tp)) {
        this.#handover.set(key, follower)
        continue
      }
      void follower.dispose().catch((error: unknown) => o.logger.warn({ job: o.job, key, err: error }, 'removing a standby copy failed'))
    }
    for (const [key, { tp, warmup }] of wanted) {
      const kept = this.#standbys.get(key)
      if (kept !== undefined) {
        kept.warmup = warmup
        continue
      }
      const follower = new SnapshotFollower({
        snapshotStore: this.#priority.yielding(o.snapshots.store, key), job: o.job, partition: key, dir: join(o.stateDir, `${key}.standby`),
        maxBytesPerSecond: o.standby.maxBytesPerSecond, maxDiskBytes: o.standby.maxDiskBytes, logger: o.logger,
        ...(this.#clock === undefined ? {} : { clock: this.#clock }),
        onEvent: (event) => {
          this.#onStandby(tp, event)
          this.#checkWarm()
        },
      })
      const entry: Follower = { tp, follower, warmup }
      // Warm-ups first (a move waits for them), then the copies furthest behind.
      follower.start({ intervalMs: o.standby.intervalMs, pacer: this.#pacer, debt: () => (entry.warmup ? Number.MAX_SAFE_INTEGER : follower.status().bytesBehind) })
      this.#standbys.set(key, entry)
    }
    this.#watchWarmups()
    this.#checkWarm()
  }

  /** The partitions this member warms to take them over. */
  warmups(): TopicPartition[] {
    return [...this.#standbys.values()].filter((f) => f.warmup).map((f) => f.tp)
  }

  #watchWarmups(): void {
    const warming = [...this.#standbys.values()].some((f) => f.warmup)
    if (!warming) {
      clearInterval(this.#warmTimer)
      this.#warmTimer = undefined
    } else if (this.#warmTimer === undefined) {
      this.#warmTimer = setInterval(() => this.#checkWarm(), this.#o.standby.intervalMs)
      this.#warmTimer.unref()
    }
  }

  /**
   * Calls onWarm once per assignment when this member's warm-ups' copies are
   * within the lag bounds that the assignor applies to what advertise()
   * says: when all are, or WARM_BATCH_WAITS sync intervals after the first
   * one was. Each rebalance pauses every partition of the group, so the
   * moves go together in one where they can, and a copy that cannot get
   * warm does not hold the others back for long.
   */
  #checkWarm(): void {
    const bounds = this.#o.warmup
    if (bounds === undefined || this.#warmReported) return
    let warm = 0
    let total = 0
    for (const { follower, warmup } of this.#standbys.values()) {
      if (!warmup) continue
      total++
      const status = follower.status()
      const isWarm = status.snapshot === undefined
        ? nothingToFollow(status)
        : (bounds.maxLagSnapshots === undefined || status.snapshotsBehind <= bounds.maxLagSnapshots) && (bounds.maxLagBytes === undefined || status.bytesBehind <= bounds.maxLagBytes)
      if (isWarm) warm++
    }
    if (warm === 0) return
    const now = Date.now()
    this.#firstWarmAt ??= now
    if (warm < total && now - this.#firstWarmAt < WARM_BATCH_WAITS * this.#o.standby.intervalMs) return
    this.#warmReported = true
    this.#onWarm()
  }

  /** How a new task of `tp` takes its claim and restores: at once when its owner left; from the standby copy when there is one. */
  taskStart(tp: TopicPartition): { waitMs: number; standby?: SnapshotFollower } {
    const key = partitionKey(tp)
    const standby = this.#handover.get(key)
    this.#handover.delete(key)
    return { waitMs: this.#orphaned.has(key) ? 0 : this.#o.handoff.waitMs, ...(standby === undefined ? {} : { standby }) }
  }

  /** Stops the standby copies where they are: a restart with this stateDir takes them up again. */
  async stop(): Promise<void> {
    clearInterval(this.#warmTimer)
    this.#warmTimer = undefined
    this.#warmReported = true
    await Promise.all([...this.#standbys.values()].map(({ follower }) => follower.stop()))
  }
}

/** A follower that synced and found no snapshot of its partition at all. */
function nothingToFollow(status: SnapshotFollowerStatus): boolean {
  return status.lastSyncAt !== undefined && status.newest === undefined && status.lastError === undefined
}
