import { MAX_OFFSET } from '../../../src/store/index.js'
import type { TopicPartition } from './partition-task.js'

/**
 * The userData the state-aware assignor puts in a member's subscription (what
 * a member advertises) and in each member's assignment (what the leader
 * decided beyond the active partitions). Both are one format byte followed by
 * a UTF-8 JSON document; docs/consumer-group.md ("The state-aware assignor")
 * specifies them.
 *
 * A version-1 reader ignores fields it does not know, so a field can be added
 * without a new version. Only a change that a version-1 reader would misread
 * takes a new byte, and a reader treats a byte it does not know as "nothing
 * advertised": an old leader then assigns a new member as a member without
 * state, and the group still works.
 */
export const SUBSCRIPTION_VERSION = 1
export const ASSIGNMENT_VERSION = 1

/** A local copy of a partition's state that a member holds (its active store, a standby, or a store a restart left behind). */
export interface LocalCopy {
  readonly topic: string
  readonly partition: number
  /** The copy's position: the offset of the last record whose effects are in it. Absent when unknown. */
  readonly position?: bigint | undefined
  /** Id (`<epoch>-<sequence>`) of the snapshot the copy matches, if it matches one. */
  readonly snapshot?: string | undefined
  /** How far the copy is behind the partition's newest snapshot, as its member measured it; decides whether the copy is warm. */
  readonly lag?: CopyLag | undefined
}

export interface CopyLag {
  /** Bytes to download to reach the newest snapshot. */
  readonly bytes?: number | undefined
  /** Snapshots between the copy and the newest one (0: it is at the newest). */
  readonly snapshots?: number | undefined
}

/** What one member advertises when it joins. */
export interface MemberState {
  /** The assignor generation of `owned` (from the assignment it last received; 0: none): of two members claiming one partition, the higher wins. */
  readonly generation: number
  /** The partitions it processes now (its previous active assignment). */
  readonly owned: readonly TopicPartition[]
  /** The partitions it is standby for now (its previous standby assignment). */
  readonly standbys: readonly TopicPartition[]
  readonly copies: readonly LocalCopy[]
}

/** What the leader tells one member beside its active partitions. */
export interface AssignmentInfo {
  /** The assignor generation of this assignment; the member advertises it back at its next join. */
  readonly generation: number
  /** Partitions whose copy this member keeps warm. */
  readonly standbys: readonly TopicPartition[]
  /** Partitions that will move to this member once its copy is warm: it warms them as it does standbys, then asks for a rebalance. */
  readonly warmups: readonly TopicPartition[]
  /**
   * Active partitions of this member that no member of this generation
   * owned before it: their previous owner left the group or was expired by
   * it, so no release will come, and the claim is taken at once. Empty when
   * some member advertised nothing (the leader cannot tell then).
   */
  readonly orphaned?: readonly TopicPartition[] | undefined
  /** The member this assignment is for: a process with several consumers finds its own by it. */
  readonly memberId?: string | undefined
}

export type Decoded<T> = { readonly value: T; readonly problem?: undefined } | { readonly value: undefined; readonly problem: string }

type Grouped<T> = Record<string, T[]>

/** A copy on the wire: [partition, position, snapshot, lagBytes, lagSnapshots], nulls for what is unknown, trailing nulls dropped. */
type WireCopy = [number, (string | null)?, (string | null)?, (number | null)?, (number | null)?]

export function encodeSubscription(state: MemberState): Buffer {
  const copies: Grouped<WireCopy> = Object.create(null)
  for (const c of state.copies) {
    const wire: WireCopy = [c.partition, c.position === undefined ? null : String(c.position), c.snapshot ?? null, c.lag?.bytes ?? null, c.lag?.snapshots ?? null]
    while (wire.length > 1 && wire[wire.length - 1] === null) wire.pop()
    ;(copies[c.topic] ??= []).push(wire)
  }
  return frame(SUBSCRIPTION_VERSION, { generation: state.generation, owned: groupByTopic(state.owned), standbys: groupByTopic(state.standbys), copies })
}

/** Never throws: bytes that are not a version-1 subscription decode to `problem`, which the leader treats as a member that advertises nothing. */
export function decodeSubscription(bytes: Buffer): Decoded<MemberState> {
  const body = unframe(bytes, SUBSCRIPTION_VERSION)
  if (typeof body === 'string') return { value: undefined, problem: body }
  try {
    const copies: LocalCopy[] = []
    for (const [topic, list] of topics(body.copies, 'copies')) {
      for (const wire of list) {
        if (!Array.isArray(wire) || wire.length === 0) throw new Error(`copies.${topic} holds ${JSON.stringify(wire)}`)
        const [partition, position, snapshot, bytes, snapshots] = wire as unknown[]
        const lag = { bytes: optional(bytes, count, 'lag bytes'), snapshots: optional(snapshots, count, 'lag snapshots') }
        copies.push({
          topic,
          partition: partitionNumber(partition),
          position: optional(position, offset, 'position'),
          snapshot: optional(snapshot, snapshotId, 'snapshot'),
          lag: lag.bytes === undefined && lag.snapshots === undefined ? undefined : lag,
        })
      }
    }
    return { value: { generation: count(body.generation, 'generation'), owned: partitions(body.owned, 'owned'), standbys: partitions(body.standbys ?? {}, 'standbys'), copies } }
  } catch (error) {
    return { value: undefined, problem: (error as Error).message }
  }
}

export function encodeAssignmentInfo(info: AssignmentInfo): Buffer {
  return frame(ASSIGNMENT_VERSION, {
    generation: info.generation,
    standbys: groupByTopic(info.standbys),
    warmups: groupByTopic(info.warmups),
    ...(info.orphaned === undefined ? {} : { orphaned: groupByTopic(info.orphaned) }),
    ...(info.memberId === undefined ? {} : { memberId: info.memberId }),
  })
}

/** Never throws; `problem` when the bytes are not a version-1 assignment (a member then has no standbys or warm-ups this generation). */
export function decodeAssignmentInfo(bytes: Buffer): Decoded<AssignmentInfo> {
  const body = unframe(bytes, ASSIGNMENT_VERSION)
  if (typeof body === 'string') return { value: undefined, problem: body }
  try {
    const memberId = typeof body.memberId === 'string' ? body.memberId : undefined
    return {
      value: {
        generation: count(body.generation, 'generation'),
        standbys: partitions(body.standbys ?? {}, 'standbys'),
        warmups: partitions(body.warmups ?? {}, 'warmups'),
        ...(body.orphaned === undefined ? {} : { orphaned: partitions(body.orphaned, 'orphaned') }),
        ...(memberId === undefined ? {} : { memberId }),
      },
    }
  } catch (error) {
    return { value: undefined, problem: (error as Error).message }
  }
}

function frame(version: number, body: object): Buffer {
  return Buffer.concat([Buffer.of(version), Buffer.from(JSON.stringify(body))])
}

function unframe(bytes: Buffer, version: number): Record<string, unknown> | string {
  if (bytes.length === 0) return 'no userData'
  if (bytes[0] !== version) return `format version ${bytes[0]} is not ${version}`
  let body: unknown
  try {
    body = JSON.parse(bytes.subarray(1).toString('utf8'))
  } catch {
    return 'the body is not JSON'
  }
  if (!isRecord(body)) return 'the body is not a JSON object'
  return body
}

/** Partition numbers by topic, in the order given: the shape of kafkajs's Assignment too. */
export function groupByTopic(list: readonly TopicPartition[]): Grouped<number> {
  // No prototype: a topic may be named __proto__.
  const out: Grouped<number> = Object.create(null)
  for (const tp of list) (out[tp.topic] ??= []).push(tp.partition)
  return out
}

function topics(value: unknown, field: string): [string, unknown[]][] {
  if (!isRecord(value)) throw new Error(`${field} is not an object`)
  return Object.entries(value).map(([topic, list]) => {
    if (topic === '' || !Array.isArray(list)) throw new Error(`${field} has a topic '${topic}' without a list`)
    return [topic, list]
  })
}

function partitions(value: unknown, field: string): TopicPartition[] {
  const out: TopicPartition[] = []
  for (const [topic, list] of topics(value, field)) for (const p of list) out.push({ topic, partition: partitionNumber(p) })
  return out
}

function partitionNumber(value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > 0x7fffffff) throw new Error(`partition ${JSON.stringify(value)} is not one`)
  return value
}

function count(value: unknown, field: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new Error(`${field} ${JSON.stringify(value)} is not a non-negative integer`)
  return value
}

function offset(value: unknown): bigint {
  if (typeof value !== 'string' || !/^(0|[1-9]\d{0,18})$/.test(value) || BigInt(value) > MAX_OFFSET) throw new Error(`position ${JSON.stringify(value)} is not an offset`)
  return BigInt(value)
}

function snapshotId(value: unknown): string {
  if (typeof value !== 'string' || !/^\d{10}-\d{12}$/.test(value)) throw new Error(`snapshot ${JSON.stringify(value)} is not a snapshot id`)
  return value
}

function optional<T>(value: unknown, read: (value: unknown, field: string) => T, field: string): T | undefined {
  return value === null || value === undefined ? undefined : read(value, field)
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
