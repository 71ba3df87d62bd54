import { partitionKey, type PartitionClosed, type PartitionStarted, type PartitionTask, type TopicPartition } from './partition-task.js'

/** What the assignment handler does to the consumer and tells its owner. */
export interface AssignmentHooks<V> {
  createTask(tp: TopicPartition): PartitionTask<V>
  /**
   * pause, resume and seek act on the member's fetcher. A throw of theirs
   * is no failure of the partition (the next assignment starts what runs
   * again), so it is ignored.
   */
  pause(tp: TopicPartition): void
  resume(tp: TopicPartition): void
  seek(tp: TopicPartition, offset: bigint): void
  /** A task's start (claim, restore) or close (hand-off) begins: the returned function ends it (transfer-priority.ts). */
  priority(tp: TopicPartition): () => void
  started(info: PartitionStarted): void
  failed(tp: TopicPartition, error: unknown): void
  closed(info: PartitionClosed): void
}

interface Entry<V> {
  tp: TopicPartition
  task: PartitionTask<V>
  /** Settles when the task has started (or failed to). */
  ready: Promise<void>
}

/**
 * Turns the group's assignments into partition tasks (Kafka Streams' task
 * manager). kafkajs reports each assignment after the rejoin (GROUP_JOIN)
 * and nothing before it, so revocations are the difference from the
 * previous assignment. This runs synchronously inside that event: new
 * partitions are added to the fetcher paused there, and stay paused until
 * their state is restored and they are seeked to the store's position + 1.
 */
export class AssignmentHandler<V> {
  readonly #hooks: AssignmentHooks<V>
  readonly #handoff: boolean
  readonly #current = new Map<string, Entry<V>>()
  /** Tasks being closed, by key: a partition assigned again waits for its previous task to let go of the store. */
  readonly #closing = new Map<string, Promise<void>>()
  #stopped = false

  constructor(hooks: AssignmentHooks<V>, options: { handoff: boolean }) {
    this.#hooks = { ...hooks, pause: ignoreThrow(hooks.pause), resume: ignoreThrow(hooks.resume), seek: ignoreThrow(hooks.seek) }
    this.#handoff = options.handoff
  }

  /** Applies an assignment; returns what changed. */
  assign(assignment: readonly TopicPartition[]): { assigned: TopicPartition[]; revoked: TopicPartition[] } {
    const wanted = new Map(assignment.map((tp) => [partitionKey(tp), tp]))
    const revoked: TopicPartition[] = []
    for (const [key, entry] of this.#current) {
      if (wanted.has(key)) continue
      this.#current.delete(key)
      revoked.push(entry.tp)
      this.#close(entry, 'revoked')
    }
    const assigned: TopicPartition[] = []
    for (const [key, tp] of wanted) {
      const entry = this.#current.get(key)
      if (entry === undefined) {
        this.#hooks.pause(tp)
        if (this.#stopped) continue
        assigned.push(tp)
        this.#startTask(key, tp)
        continue
      }
      // Kept across the rebalance: it never stopped (the fetcher goes on
      // through the group's round, docs/consumer-group.md). Its claim is
      // looked at once: a member that stalled past the session timeout
      // (SIGSTOP) and rejoined still runs tasks whose claims others took
      // meanwhile. Batches wait for the answer (PartitionTask.holdsClaim),
      // the fetch does not. Such a task, or one whose snapshots were
      // fenced, is replaced by a new one, which waits for the current
      // holder's release and restores its hand-off.
      if (this.#stopped) continue
      const { task } = entry
      if (task.state === 'failed' && task.ownershipLost) {
        this.#replace(key, entry)
        continue
      }
      const before = entry.ready
      entry.ready = (async () => {
        await before
        if (this.#current.get(key) !== entry || task.state !== 'running') return
        if (!(await task.holdsClaim()) && this.#current.get(key) === entry) this.#replace(key, entry)
      })().catch((error: unknown) => this.#hooks.failed(tp, error))
    }
    return { assigned, revoked }
  }

  /** Starts a task for a partition newly assigned (or replaced): it waits for the previous task of the partition here to close. */
  #startTask(key: string, tp: TopicPartition): void {
    const task = this.#hooks.createTask(tp)
    const previous = this.#closing.get(key)
    const ready = (async () => {
      await previous
      const leave = this.#hooks.priority(tp)
      let info: PartitionStarted
      try {
        info = await task.start()
      } finally {
        leave()
      }
      // Revoked while it started: the close that follows ends it.
      if (this.#current.get(key)?.task !== task) return
      this.#hooks.seek(tp, info.fetchFrom)
      this.#hooks.resume(tp)
      this.#hooks.started(info)
    })().catch((error: unknown) => {
      // Revoked (or the member closing) while it started: its start was
      // cancelled, which is no failure of a partition this member no longer has.
      if (this.#current.get(key)?.task !== task && task.startCancelled) return
      this.#hooks.failed(tp, error)
    })
    this.#current.set(key, { tp, task, ready })
  }

  /** Ends a task that lost its partition's claim (it hands nothing off) and starts a new one, which takes the claim again. */
  #replace(key: string, entry: Entry<V>): void {
    this.#current.delete(key)
    void this.#close(entry, 'revoked')
    this.#startTask(key, entry.tp)
  }

  /**
   * Ends a running partition's task and starts a new one, whose start looks
   * at the log's bounds again (the broker had no records where the task
   * fetched: its start applies onTruncated).
   */
  restart(tp: TopicPartition): void {
    const key = partitionKey(tp)
    const entry = this.#current.get(key)
    if (entry === undefined || this.#stopped) return
    this.#replace(key, entry)
  }

  /** The task of a partition assigned here, in whatever state. */
  current(topic: string, partition: number): PartitionTask<V> | undefined {
    return this.#current.get(partitionKey({ topic, partition }))?.task
  }

  /** The task of a partition that is running here, if any. */
  running(topic: string, partition: number): PartitionTask<V> | undefined {
    const task = this.#current.get(partitionKey({ topic, partition }))?.task
    return task?.state === 'running' ? task : undefined
  }

  tasks(): PartitionTask<V>[] {
    return [...this.#current.values()].map((e) => e.task)
  }

  /** Closes every task (hand-off snapshots in parallel, each bounded), and assigns nothing after. */
  async closeAll(): Promise<PartitionClosed[]> {
    this.#stopped = true
    const entries = [...this.#current.values()]
    this.#current.clear()
    return (await Promise.all(entries.map((e) => this.#close(e, 'shutdown')))).filter((r): r is PartitionClosed => r !== undefined)
  }

  /** Settles when every task's store is closed. */
  async drained(): Promise<void> {
    while (this.#closing.size > 0) await Promise.all([...this.#closing.values()])
  }

  #close(entry: Entry<V>, reason: 'revoked' | 'shutdown'): Promise<PartitionClosed | undefined> {
    const key = partitionKey(entry.tp)
    // A start still waiting for the previous owner's release gives up now:
    // another member has the partition (or will), and must not find this
    // member's forced claim in its way once the wait runs out.
    entry.task.cancelStart()
    const result = (async () => {
      await entry.ready
      const leave = this.#hooks.priority(entry.tp)
      let closed: PartitionClosed
      try {
        closed = await entry.task.close(reason, { handoff: this.#handoff })
      } finally {
        leave()
      }
      this.#hooks.closed(closed)
      return closed
    })()
    const done = result.then(() => entry.task.whenClosed(), () => entry.task.whenClosed()).finally(() => {
      if (this.#closing.get(key) === done) this.#closing.delete(key)
    })
    this.#closing.set(key, done)
    return result.catch((error: unknown) => {
      this.#hooks.failed(entry.tp, error)
      return undefined
    })
  }
}

function ignoreThrow<A extends unknown[]>(fn: (...args: A) => void): (...args: A) => void {
  return (...args) => {
    try {
      fn(...args)
    } catch {
      // See AssignmentHooks: the rejoin that follows the client's restart repeats it.
    }
  }
}
