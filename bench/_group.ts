/**
 * The consumer-group scenarios of `scaleout`, `failover` and `rolling`: a job
 * of StatefulConsumer members on librdkafka's mock cluster, --partitions
 * partitions of --size-mb MiB of state each, a trickle of records to every
 * partition all along, and one timeline of every member's events (in this
 * process or in a child process that can be SIGKILLed), on one clock
 * (performance.timeOrigin + performance.now(), which is shared across
 * processes to well under a millisecond).
 *
 * librdkafka's mock creates every topic with 4 partitions (and refuses
 * CreateTopics), so the job consumes ceil(--partitions / 4) topics, and a
 * partition's number here is 4 x its topic's index + its partition.
 *
 * The state is written straight into a loader member's partition stores (as
 * bench/rebalance.ts does: folding it through the mock would take minutes
 * and measure nothing these benches are about); the loader's close() takes
 * the full snapshots, and the scenario's members start with empty state
 * directories and restore them.
 *
 * Members in this process share its libuv thread pool, so bench/run.ts
 * runs these benches with UV_THREADPOOL_SIZE=16 (4 threads per member, as
 * separate processes would have); the results say uvThreadPoolSize.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { EventEmitter } from 'node:events'
import { readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { ClassicLevel } from 'classic-level'
import { PartitionAssigners, type Producer } from 'kafkajs'
import { StatefulConsumer, type StatefulConsumerOptions } from '../connectors/kafka/index.js'
import { FsSnapshotStore } from '../src/snapshot-store/fs-store.js'
import { PartitionStore, rawCodec, valueState, type Logger, type SnapshotStore } from '../src/index.js'
import { benchKafka, benchProducer, type BenchKafka } from './_kafka.js'
import { benchDir } from './_util.js'
import { valueSource } from './snapshot.js'

const MiB = 1024 * 1024
export const TRICKLE_MS = 200
const kv = valueState('kv', { codec: rawCodec() })
/** Shorter than kafkajs's 30 s / 60 s: the mock holds each join round for sessionTimeout - 1 s. */
export const GROUP_TIMING = { sessionTimeout: 6000, rebalanceTimeout: 10_000, heartbeatInterval: 500 } as const

export function now(): number {
  return performance.timeOrigin + performance.now()
}

/** One thing a member reported, on the shared clock. */
export type GroupEvent =
  | { t: 'starting'; at: number; member: string }
  | { t: 'assignment'; at: number; member: string; partitions: number[]; warmups: number[]; standbys: number[] }
  | { t: 'started'; at: number; member: string; partition: number; source: string; bytesDownloaded: number; claimWaitMs: number; restoreMs: number }
  | { t: 'closed'; at: number; member: string; partition: number; reason: string; handoff?: 'snapshot' | 'skipped' | 'timeout' | 'lost' | 'failed' }
  | { t: 'commit'; at: number; member: string; partition: number; offset: string }
  | { t: 'synced'; at: number; member: string; partition: number; bytesDownloaded: number }
  | { t: 'failed'; at: number; member: string; partition: number; error: string }

export interface MemberSpec {
  name: string
  stateDir: string
  standbys?: number
  warmup?: StatefulConsumerOptions['warmup']
  /** kafkajs's round-robin assignor instead of the state-aware one. */
  roundRobin?: boolean
  /** Scheduled snapshots of each partition, ms apart; 0: none but the hand-offs. */
  snapshotEveryMs?: number
  /** A child member loads, then waits for Member.go() to call start(). */
  holdStart?: boolean
}

/** What a member process needs besides its spec (JSON on its argv). */
export interface SharedSpec {
  brokers: string[]
  topics: string[]
  groupId: string
  snapshotRoot: string
}

/** How the progress reports name a number of members. */
const COUNT_WORDS: Readonly<Record<number, string>> = { 2: 'two', 3: 'three', 4: 'four', 5: 'five' }

/** The mock's partitions per topic. */
const PER_TOPIC = 4

/** A partition's number in the bench: 4 x its topic's index + its partition. */
export function indexOf(shared: SharedSpec, tp: { topic: string; partition: number }): number {
  return shared.topics.indexOf(tp.topic) * PER_TOPIC + tp.partition
}

/** The topic and partition of a bench partition number. */
export function topicPartition(shared: SharedSpec, index: number): { topic: string; partition: number } {
  return { topic: shared.topics[Math.floor(index / PER_TOPIC)]!, partition: index % PER_TOPIC }
}

function startTraceLogger(member: string): Logger {
  const quiet = (): void => undefined
  return {
    debug: (fields, message) => {
      if (message !== 'partition start' && message !== 'partition close') return
      const f = fields as { topic: string; partition: number; step: string; ms: number }
      process.stderr.write(`[trace ${member}] ${now().toFixed(0)} ${message.slice(10)} ${f.topic}/${f.partition} ${f.step} +${f.ms} ms\n`)
    },
    info: quiet,
    warn: quiet,
    error: quiet,
  }
}

/** libuv's thread pool in this process (bench/run.ts gives the group benches 4 per member). */
export function threadPoolSize(): number {
  return Number(process.env.UV_THREADPOOL_SIZE ?? 4)
}

/** The StatefulConsumer of a member, reporting each event to `say`. */
export function memberConsumer(shared: SharedSpec, spec: MemberSpec, store: SnapshotStore, say: (e: GroupEvent) => void): StatefulConsumer<Uint8Array> {
  const consumer = new StatefulConsumer<Uint8Array>({
    job: 'bench', groupId: shared.groupId, brokers: shared.brokers, topics: shared.topics, stateDir: spec.stateDir, states: [kv], codec: rawCodec(),
    handler: (tx, record) => { if (record.value !== null) tx.value(kv).put(record.key ?? String(record.offset), record.value) },
    snapshots: { store, schedule: { intervalMs: spec.snapshotEveryMs ?? 0, everyEvents: 0, everyBytes: 0 } },
    consumer: GROUP_TIMING,
    // A partition a few seconds past its last scheduled snapshot is released at once, and its next owner replays those seconds.
    handoff: { minEvents: 1000 },
    standbys: spec.standbys ?? 0,
    standby: { intervalMs: 500 },
    // GROUP_TRACE=1: each partition's start and close steps (claimed, restored, ready; hand-off, released), ms since each began, on stderr.
    ...(process.env.GROUP_TRACE === '1' ? { logger: startTraceLogger(spec.name) } : {}),
    ...(spec.warmup === undefined ? {} : { warmup: spec.warmup }),
    ...(spec.roundRobin === true ? { partitionAssigners: [PartitionAssigners.roundRobin] } : {}),
  })
  const member = spec.name
  const ix = (tp: { topic: string; partition: number }): number => indexOf(shared, tp)
  consumer.on('assignment', (a) => say({ t: 'assignment', at: now(), member, partitions: a.partitions.map(ix), warmups: a.warmups.map(ix), standbys: a.standbys.map(ix) }))
  consumer.on('partition-started', (s) => say({ t: 'started', at: now(), member, partition: ix(s), source: s.source, bytesDownloaded: s.bytesDownloaded, claimWaitMs: s.claimWaitMs, restoreMs: s.restoreMs }))
  consumer.on('partition-closed', (c) => {
    const handoff = c.handoff !== undefined ? 'snapshot' : c.handoffSkipped !== undefined ? 'skipped' : c.handoffFailed
    say({ t: 'closed', at: now(), member, partition: ix(c), reason: c.reason, ...(handoff === undefined ? {} : { handoff }) })
  })
  consumer.on('commit', (c) => say({ t: 'commit', at: now(), member, partition: ix(c), offset: String(c.offset) }))
  consumer.on('standby', (s) => { if (s.event.type === 'synced') say({ t: 'synced', at: now(), member, partition: ix(s), bytesDownloaded: s.event.bytesDownloaded }) })
  consumer.on('partition-failed', (f) => say({ t: 'failed', at: now(), member, partition: ix(f), error: f.error.message }))
  return consumer
}

export interface Member {
  readonly spec: MemberSpec
  /** close() in this process, SIGTERM for a child; leaveGroup false: a restart follows. */
  close(leaveGroup?: boolean): Promise<void>
  /** Only for a child. */
  kill?(signal: NodeJS.Signals): void
  /** Only for a child spawned with holdStart: its start() goes ahead. */
  go?(): void
}

export class GroupBench {
  readonly events: GroupEvent[] = []
  readonly changes = new EventEmitter()
  readonly members = new Map<string, Member>()
  readonly produced = new Map<number, bigint>()
  /** When each record was sent, by partition and offset: when it began to wait for its consumer. */
  readonly sentAt = new Map<number, Map<bigint, number>>()
  readonly partitions: number[]
  #trickle: NodeJS.Timeout | undefined
  #children = new Set<ChildProcess>()
  #version = 1

  private constructor(
    readonly name: string,
    readonly dir: { path: string; cleanup(): void },
    readonly kafka: BenchKafka,
    readonly producer: Producer,
    readonly shared: SharedSpec,
    readonly store: SnapshotStore,
    readonly log: (what: string) => void,
  ) {
    this.changes.setMaxListeners(0)
    this.partitions = []
  }

  /** Runs `scenario` on a new bench of `partitions` partitions with `sizeMb` MiB loaded in each, the trickle on, and stops it after. */
  static async run<T>(name: string, partitions: number, sizeMb: number, scenario: (bench: GroupBench, loaded: { stateBytes: number }) => Promise<T>): Promise<T> {
    const bench = await GroupBench.create(name, partitions)
    try {
      const loaded = await bench.load(sizeMb)
      bench.startTrickle()
      return await scenario(bench, loaded)
    } finally {
      await bench.stop()
    }
  }

  static async create(name: string, partitions: number): Promise<GroupBench> {
    const dir = benchDir(name)
    const kafka = benchKafka(join(dir.path, 'kafka-mock'))
    const { producer } = await benchProducer(kafka.brokers)
    const id = `${name}-${process.pid}-${Date.now().toString(36)}`
    const snapshotRoot = join(dir.path, 'snapshots')
    const topics = Array.from({ length: Math.ceil(partitions / PER_TOPIC) }, (_, t) => `${id}-t${t}`)
    const shared: SharedSpec = { brokers: kafka.brokers, topics, groupId: id, snapshotRoot }
    const began = performance.now()
    const log = (what: string): void => { process.stderr.write(`[${name} +${((performance.now() - began) / 1000).toFixed(1)}s] ${what}\n`) }
    const bench = new GroupBench(name, dir, kafka, producer, shared, new FsSnapshotStore({ root: snapshotRoot }), log)
    bench.partitions.push(...Array.from({ length: partitions }, (_, i) => i))
    return bench
  }

  record(e: GroupEvent): void {
    this.events.push(e)
    if (e.t === 'failed') this.log(`${e.member}: partition ${e.partition} failed: ${e.error}`)
    this.changes.emit('change')
  }

  /** Waits for `cond`, looking again at every event (and at least once a second); reports progress every 10 s. */
  async until(what: string, cond: () => boolean, timeoutMs = 600_000): Promise<void> {
    const deadline = performance.now() + timeoutMs
    let report = performance.now() + 10_000
    while (!cond()) {
      if (performance.now() > report) {
        report += 10_000
        // Counts only beyond a few dozen partitions (the many-group bench's 1,024).
        const list = (m: string): string => { const on = this.running(m); return on.length > 32 ? String(on.length) : on.join(',') }
        this.log(`waiting for ${what}; running ${[...this.members.keys()].map((m) => `${m}:${list(m)}`).join(' ')}`)
      }
      const left = deadline - performance.now()
      if (left <= 0) throw new Error(`${this.name}: timed out waiting for ${what}`)
      await new Promise<void>((resolve) => {
        const done = (): void => { clearTimeout(timer); this.changes.off('change', done); resolve() }
        const timer = setTimeout(done, Math.min(left, 1000))
        this.changes.on('change', done)
      })
    }
  }

  /** The partitions `member` runs now, by its started and closed events. */
  running(member: string): number[] {
    const on = new Set<number>()
    for (const e of this.events) {
      if (e.member !== member) continue
      if (e.t === 'started') on.add(e.partition)
      if (e.t === 'closed' || e.t === 'failed') on.delete(e.partition)
    }
    return [...on].sort((a, b) => a - b)
  }

  /** Who runs each partition now (the last start not followed by a close). */
  owners(): Map<number, string> {
    const owners = new Map<number, string>()
    for (const m of this.members.keys()) for (const p of this.running(m)) owners.set(p, m)
    return owners
  }

  /** The highest offset committed for `partition` by anyone since `since`. */
  committed(partition: number, since = 0): bigint {
    let top = -1n
    for (const e of this.events) if (e.t === 'commit' && e.partition === partition && e.at >= since && BigInt(e.offset) > top) top = BigInt(e.offset)
    return top
  }

  /** Every partition is run by one member and has committed what was produced up to now. */
  async settled(what: string): Promise<void> {
    const target = new Map(this.produced)
    await this.until(what, () => {
      const owners = this.owners()
      return this.partitions.every((p) => owners.has(p) && this.committed(p) >= (target.get(p) ?? -1n))
    })
  }

  /**
   * Each of `partitions` has committed at its owner now since that owner
   * started it. `settled` can hold before: a moved partition's records may
   * all be committed by the owner before it (the old owner goes on until its
   * assignment says otherwise; a killed one may have committed its last), and
   * the new owner's first commit waits for the trickle's next record.
   */
  async committedAtOwners(what: string, partitions: readonly number[]): Promise<void> {
    const owners = this.owners()
    await this.until(what, () => partitions.every((p) => {
      const start = this.events.findLast((e) => e.t === 'started' && e.partition === p && e.member === owners.get(p))
      return start !== undefined && this.events.some((e) => e.t === 'commit' && e.partition === p && e.member === owners.get(p) && e.at >= start.at)
    }))
  }

  /** Produces one message to each partition named (bench numbers), in one request. */
  async #send(messages: Array<{ partition: number; key: string; value: Buffer }>): Promise<void> {
    // Grouped in one pass: the many-group bench sends to 1,024 partitions of 256 topics every TRICKLE_MS.
    const byTopic = new Map<string, Array<{ key: string; value: Buffer; partition: number }>>()
    for (const m of messages) {
      const tp = topicPartition(this.shared, m.partition)
      let list = byTopic.get(tp.topic)
      if (list === undefined) byTopic.set(tp.topic, list = [])
      list.push({ key: m.key, value: m.value, partition: tp.partition })
    }
    const topicMessages = [...byTopic].map(([topic, list]) => ({ topic, messages: list }))
    // The time of the call, not of the ack: the earliest a record can wait, so a gap measured from it is never shorter.
    const at = now()
    const metas = await this.producer.sendBatch({ acks: -1, topicMessages })
    for (const meta of metas) {
      const p = indexOf(this.shared, { topic: meta.topicName, partition: meta.partition })
      const last = BigInt(meta.baseOffset!)
      if (last > (this.produced.get(p) ?? -1n)) this.produced.set(p, last)
      let sent = this.sentAt.get(p)
      if (sent === undefined) this.sentAt.set(p, sent = new Map())
      sent.set(last, at)
    }
  }

  /** Writes `sizeMb` MiB per partition into a loader's stores and snapshots them all (its close() hands every partition off). */
  async load(sizeMb: number, valueBytes = 4000): Promise<{ stateBytes: number }> {
    const value = valueSource(valueBytes, 7)
    const keys = Math.ceil((sizeMb * MiB) / (valueBytes + 11))
    await this.#send(this.partitions.map((partition) => ({ partition, key: 'k-first', value: value(partition, 0).subarray(0, 100) })))
    const loaderDir = join(this.dir.path, 'loader')
    for (const partition of this.partitions) {
      const tp = topicPartition(this.shared, partition)
      const store = await PartitionStore.open({ path: join(loaderDir, `${tp.topic}-${tp.partition}`), states: [kv] })
      for (let i = 0; i < keys; i += 1000) {
        const tx = store.transaction()
        for (let j = i; j < Math.min(keys, i + 1000); j++) tx.value(kv).put(`k-${j.toString().padStart(9, '0')}`, value(j + partition * keys, 0))
        await tx.commitWithoutPosition()
      }
      const tx = store.transaction()
      tx.value(kv).put('#loaded', value(0, 0).subarray(0, 100))
      await tx.commit({ ...tp, offset: this.produced.get(partition)! })
      await store.close()
      // Compacted all the way down now, so that LevelDB does not rewrite the
      // loaded table files later under new names, which no standby or
      // warm-up copy would hold: a steady job's big files are that old.
      const db = new ClassicLevel<Buffer, Buffer>(join(loaderDir, `${tp.topic}-${tp.partition}`), { keyEncoding: 'buffer', valueEncoding: 'buffer' })
      await db.open()
      await db.compactRange(Buffer.alloc(0), Buffer.alloc(1, 0xff))
      await db.close()
    }
    this.log(`wrote ${keys} keys of ${valueBytes} bytes into each of ${this.partitions.length} stores`)
    const loader = await this.member({ name: 'loader', stateDir: loaderDir })
    await this.until('the loader to run every partition', () => this.running('loader').length === this.partitions.length)
    await loader.close()
    this.members.delete('loader')
    const stateBytes = await dirBytes(loaderDir)
    this.log(`full snapshots taken (${Math.round(stateBytes / MiB)} MiB of stores)`)
    return { stateBytes }
  }

  /** A small record to every partition each TRICKLE_MS, all along. */
  startTrickle(): void {
    this.#trickle = setInterval(() => {
      const v = this.#version++
      this.#send(this.partitions.map((partition) => ({ partition, key: `t-${v % 5000}`, value: Buffer.alloc(100, v % 251) }))).catch(() => undefined)
    }, TRICKLE_MS)
    this.#trickle.unref()
  }

  /** A member in this process. */
  async member(spec: MemberSpec): Promise<Member> {
    const consumer = memberConsumer(this.shared, spec, this.store, (e) => this.record(e))
    const member: Member = { spec, close: async (leaveGroup = true) => { await consumer.close({ leaveGroup }) } }
    this.members.set(spec.name, member)
    await consumer.start()
    return member
  }

  /** `common` for the member `name`, with its own state directory in the bench's. */
  spec(name: string, common: Omit<MemberSpec, 'name' | 'stateDir'>): MemberSpec {
    return { name, stateDir: join(this.dir.path, name), ...common }
  }

  /**
   * Starts the members `names` (`child` in a child process, the others in
   * this one) from `common`, together, so that the first assignment is
   * already spread: a member that ran a partition for a while keeps a store
   * of it, which a later restore or move would use. Resolves once they run
   * every partition and `balanced` holds for the count each one runs.
   */
  async startTogether(names: readonly string[], common: Omit<MemberSpec, 'name' | 'stateDir'>, options: { child?: string; balanced: (running: number) => boolean }): Promise<void> {
    await Promise.all(names.map((name) => (name === options.child ? this.child(this.spec(name, common)) : this.member(this.spec(name, common)))))
    const count = COUNT_WORDS[names.length] ?? String(names.length)
    await this.settled(`${count} members to run every partition`)
    await this.until(`the ${count} to be balanced`, () => names.every((m) => options.balanced(this.running(m).length)))
  }

  /** A member in a child process (bench/_group-member.ts), which the bench can SIGKILL. Resolves once it joined (with holdStart: once it loaded). */
  async child(spec: MemberSpec): Promise<Member> {
    const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '_group-member.ts'), JSON.stringify(this.shared), JSON.stringify(spec)], { stdio: [spec.holdStart === true ? 'pipe' : 'ignore', 'pipe', 'inherit'] })
    this.#children.add(child)
    let ready!: () => void
    const joined = new Promise<void>((resolve) => { ready = resolve })
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const e = JSON.parse(line) as GroupEvent | { t: 'ready' } | { t: 'loaded' }
      if (e.t === 'ready' || e.t === 'loaded') ready()
      else this.record(e)
    })
    const exited = new Promise<void>((resolve) => child.once('exit', () => { this.#children.delete(child); resolve() }))
    const member: Member = {
      spec,
      close: async () => { child.kill('SIGTERM'); await exited },
      kill: (signal) => { child.kill(signal) },
      ...(spec.holdStart === true ? { go: () => { child.stdin!.end('go\n') } } : {}),
    }
    this.members.set(spec.name, member)
    await Promise.race([joined, exited.then(() => { throw new Error(`member ${spec.name} exited before it joined`) })])
    return member
  }

  async stop(): Promise<void> {
    clearInterval(this.#trickle)
    for (const child of this.#children) child.kill('SIGKILL')
    await Promise.allSettled([...this.members.values()].filter((m) => m.kill === undefined).map((m) => m.close()))
    await this.producer.disconnect().catch(() => undefined)
    await this.store.close()
    this.kafka.stop()
    this.dir.cleanup()
  }
}

/** Bytes of the files under `dir` (a live store's: a file removed meanwhile counts nothing). */
export async function dirBytes(dir: string): Promise<number> {
  let total = 0
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) total += (await stat(join(entry.parentPath, entry.name)).catch(() => ({ size: 0 }))).size
  }
  return total
}

/** The fewest partitions that must move for `owned` (partitions per member that stays) plus `joining` empty members to balance `total`. */
export function stickyMinimum(owned: readonly number[], joining: number, total: number): number {
  const n = owned.length + joining
  const base = Math.floor(total / n)
  let extra = total % n
  let moves = 0
  for (const count of [...owned].sort((a, b) => b - a)) {
    const quota = base + (extra > 0 ? 1 : 0)
    if (extra > 0) extra--
    moves += Math.max(0, count - quota)
  }
  return moves
}

/**
 * Partition-seconds without progress: for each partition, every gap between
 * two consecutive commits (by any member) in [from, to] beyond `slackMs`
 * (records arrive every TRICKLE_MS, so a working partition commits at least
 * that often), summed over partitions, in seconds.
 */
export function partitionSecondsLost(events: readonly GroupEvent[], partitions: readonly number[], from: number, to: number, slackMs = 1000): number {
  let lost = 0
  for (const p of partitions) {
    const at = events.filter((e) => e.t === 'commit' && e.partition === p && e.at >= from && e.at <= to).map((e) => e.at).sort((a, b) => a - b)
    let previous = from
    for (const t of [...at, to]) {
      lost += Math.max(0, t - previous - slackMs)
      previous = t
    }
  }
  return lost / 1000
}

/**
 * Tidemark's part of a partition's gap at a member: from the assignment
 * that gave it the partition (or kept it there) to its next commit there.
 * Throws when there is none yet: the bench read its events too early
 * (committedAtOwners waits for that commit).
 */
export function gapAfterAssignment(events: readonly GroupEvent[], member: string, partition: number, assignedAt: number): number {
  const commit = events.find((e) => e.t === 'commit' && e.member === member && e.partition === partition && e.at >= assignedAt)
  if (commit === undefined) throw new Error(`partition ${partition}: no commit at ${member} after its assignment`)
  return commit.at - assignedAt
}

/** How long the benches watch the partitions before the event they measure: steadyGapMsMax's window. */
export const STEADY_MS = 30_000

/**
 * The longest time between two consecutive commits (by any member) of any
 * of `partitions` within [from, to], the window's ends counting as commits:
 * records arrive every TRICKLE_MS, so a partition that never stops commits
 * that often.
 */
export function longestCommitGap(events: readonly GroupEvent[], partitions: readonly number[], from: number, to: number): number {
  let longest = 0
  for (const p of partitions) {
    const at = events.filter((e) => e.t === 'commit' && e.partition === p && e.at >= from && e.at <= to).map((e) => e.at).sort((a, b) => a - b)
    let previous = from
    for (const t of [...at, to]) {
      longest = Math.max(longest, t - previous)
      previous = t
    }
  }
  return longest
}

/** Waits out STEADY_MS of steady processing, for the gaps before the measured event. */
export async function steady(bench: { log(line: string): void }): Promise<number> {
  bench.log(`${STEADY_MS / 1000} s of steady processing`)
  const from = now()
  await new Promise((resolve) => setTimeout(resolve, STEADY_MS))
  return from
}
