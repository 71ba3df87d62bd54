import type { PartitionAssigner } from 'kafkajs'
import { AssignerProtocol } from '../kafkajs.js'
import { describeValue } from '../../../src/util/index.js'
import {
  decodeAssignmentInfo,
  decodeSubscription,
  encodeAssignmentInfo,
  encodeSubscription,
  groupByTopic,
  type AssignmentInfo,
  type Decoded,
  type LocalCopy,
  type MemberState,
} from './assignor-metadata.js'
import type { TopicPartition } from './partition-task.js'

/** The group protocol name: every member of a group must offer it for the group to use it. */
export const ASSIGNOR_NAME = 'tidemark-sticky'
/** kafkajs's MemberMetadata and MemberAssignment version field; the userData carries its own format byte. */
const ASSIGNOR_VERSION = 1

/** KIP-441's warm-up: a partition moves only to a member whose copy is warm; until then its owner keeps it and the receiver warms a copy. */
export interface WarmupOptions {
  /** Partitions warming at once in the group (KIP-441's max.warmup.replicas). */
  readonly maxWarmups: number
  /** A copy is warm when its advertised lag is within every bound given here; without either, `maxLagSnapshots: 1`. */
  readonly maxLagBytes?: number | undefined
  readonly maxLagSnapshots?: number | undefined
}

export interface AssignmentMember {
  readonly memberId: string
  /** What it advertised; undefined for a member that advertised nothing readable (an older member, junk). */
  readonly state?: MemberState | undefined
}

export interface AssignmentInput {
  readonly members: readonly AssignmentMember[]
  /** The partition numbers of each topic to assign. */
  readonly partitions: Readonly<Record<string, readonly number[]>>
  /** Standby members per partition (default 0). */
  readonly standbys?: number | undefined
  /** Without it, a partition that must move moves at once. */
  readonly warmup?: WarmupOptions | undefined
}

export interface MemberPlan {
  readonly active: TopicPartition[]
  readonly standbys: TopicPartition[]
  /** Partitions this member warms to take them over (not in `standbys`). */
  readonly warmups: TopicPartition[]
}

export interface Move extends TopicPartition {
  /** The previous owner; null for a partition nobody in the group owned. */
  readonly from: string | null
  readonly to: string
}

export interface ComputedAssignment {
  /** Above every generation advertised: members advertise it back, and it decides between two members claiming one partition. */
  readonly generation: number
  /** Every member, in member id order. */
  readonly members: ReadonlyMap<string, MemberPlan>
  /** Active partitions that change owner in this assignment. */
  readonly moved: readonly Move[]
  /** Moves held back while the receiver warms its copy; the partition stays with `from`. */
  readonly warmups: readonly Move[]
  /** Moves held back beyond `maxWarmups`, without a warm-up yet; the partition stays with `from`. */
  readonly deferred: readonly Move[]
}

interface Slot {
  readonly tp: TopicPartition
  readonly copies: Map<string, LocalCopy>
  /** The highest position any member advertised. */
  freshest: bigint | undefined
  owner: string | undefined
  target: string | undefined
  warmingOn: string | undefined
}

interface Member {
  readonly id: string
  readonly state: MemberState | undefined
  readonly previousStandbys: Set<number>
  readonly owned: number[]
  /** How many of `owned` it keeps. */
  kept: number
  active: number
  standbys: number
}

/**
 * The assignment the state-aware assignor makes; pure and deterministic (the
 * same input gives the same output whatever the members' order). The steps,
 * which docs/consumer-group.md explains: resolve each partition's current
 * owner (the higher generation wins a partition claimed twice); keep each
 * owner's partitions up to its share (shares differ by one at most; the
 * members owning more get the larger ones), releasing first those whose
 * receiver has the best copy; place the released and unowned partitions on
 * the members with room that hold the freshest copy; hold
 * back moves to cold copies (warm-up); name the standbys.
 */
export function computeAssignment(input: AssignmentInput): ComputedAssignment {
  if (typeof input !== 'object' || input === null) throw new TypeError(`computeAssignment input must be an object, got ${describeValue(input)}`)
  const standbyCount = checkCount(input.standbys ?? 0, 'input.standbys')
  const warmup = resolveWarmup(input.warmup)
  const members = checkMembers(input.members)
  const slots = checkPartitions(input.partitions)
  const index = new Map(slots.map((slot, i) => [keyOf(slot.tp), i]))
  const byId = new Map(members.map((m) => [m.id, m]))

  const claims = new Map<number, Member[]>()
  let generation = 0
  for (const m of members) {
    if (m.state === undefined) continue
    generation = Math.max(generation, m.state.generation)
    for (const copy of m.state.copies) {
      const i = index.get(keyOf(copy))
      if (i === undefined) continue
      const slot = slots[i]!
      slot.copies.set(m.id, copy)
      if (copy.position !== undefined && (slot.freshest === undefined || copy.position > slot.freshest)) slot.freshest = copy.position
    }
    for (const tp of m.state.owned) {
      const i = index.get(keyOf(tp))
      if (i === undefined) continue
      const list = claims.get(i) ?? []
      if (!list.includes(m)) list.push(m)
      claims.set(i, list)
    }
    for (const tp of m.state.standbys) {
      const i = index.get(keyOf(tp))
      if (i !== undefined) m.previousStandbys.add(i)
    }
  }
  // A partition claimed twice: the member that missed a generation (a zombie) loses.
  for (const [i, list] of claims) {
    const slot = slots[i]!
    const owner = best(list, (a, b) => a.state!.generation - b.state!.generation || compareCopies(slot.copies.get(a.id), slot.copies.get(b.id)) || compareIds(b.id, a.id))!
    slot.owner = owner.id
  }
  for (const [i, slot] of slots.entries()) if (slot.owner !== undefined) byId.get(slot.owner)!.owned.push(i)

  // Every member gets `base` partitions and `extra` of them one more. The
  // owners of more partitions take the larger shares first, so an assignment
  // already balanced stays; the extra shares left go where the freshest
  // copies are, during placement.
  const base = members.length === 0 ? 0 : Math.floor(slots.length / members.length)
  let extra = members.length === 0 ? 0 : slots.length % members.length
  for (const m of [...members].sort((a, b) => b.owned.length - a.owned.length || compareIds(a.id, b.id))) {
    m.kept = Math.min(m.owned.length, base + (extra > 0 ? 1 : 0))
    if (m.kept > base) extra--
    m.active = m.kept
  }
  const hasRoom = (m: Member): boolean => m.active < base || (m.active === base && extra > 0)
  const receivers = members.filter(hasRoom)

  const warm = (m: Member, slot: Slot): boolean => {
    const lag = slot.copies.get(m.id)?.lag
    if (warmup === undefined || lag === undefined) return false
    if (warmup.maxLagBytes !== undefined && (lag.bytes === undefined || lag.bytes > warmup.maxLagBytes)) return false
    if (warmup.maxLagSnapshots !== undefined && (lag.snapshots === undefined || lag.snapshots > warmup.maxLagSnapshots)) return false
    return true
  }
  /** Which member with room would take a partition: the freshest copy, then the fewest partitions, then the lowest id. */
  const placement = (slot: Slot, candidates: readonly Member[]): Member | undefined =>
    best(candidates, (a, b) => compareCopies(slot.copies.get(a.id), slot.copies.get(b.id)) || b.active - a.active || compareIds(b.id, a.id))
  /** How cheap it is to move a partition to a member (higher is cheaper), comparable across partitions. */
  const moveCost = (i: number, to: Member | undefined): [number, number, number, bigint] => {
    const slot = slots[i]!
    const copy = to === undefined ? undefined : slot.copies.get(to.id)
    const behind = copy?.position !== undefined && slot.freshest !== undefined ? slot.freshest - copy.position : undefined
    return [to !== undefined && warm(to, slot) ? 1 : 0, copy === undefined ? 0 : 1, behind === undefined ? 0 : 1, behind === undefined ? 0n : -behind]
  }
  const byCheapest = (a: { i: number; cost: [number, number, number, bigint] }, b: typeof a): number =>
    b.cost[0] - a.cost[0] || b.cost[1] - a.cost[1] || b.cost[2] - a.cost[2] || (b.cost[3] > a.cost[3] ? 1 : b.cost[3] < a.cost[3] ? -1 : 0) || a.i - b.i

  const pool: number[] = []
  for (const m of members) {
    if (m.owned.length === m.kept) {
      for (const i of m.owned) slots[i]!.target = m.id
      continue
    }
    // An owner over its share releases the partitions that are cheapest to move.
    const ranked = m.owned.map((i) => ({ i, cost: moveCost(i, placement(slots[i]!, receivers)) })).sort(byCheapest)
    ranked.forEach(({ i }, k) => (k < m.owned.length - m.kept ? pool.push(i) : (slots[i]!.target = m.id)))
  }
  for (const [i, slot] of slots.entries()) if (slot.owner === undefined) pool.push(i)
  // The partitions with the best copy waiting pick first, so that a member's room goes to its best copy.
  const order = pool.map((i) => ({ i, cost: moveCost(i, placement(slots[i]!, receivers)) })).sort(byCheapest)
  for (const { i } of order) {
    const slot = slots[i]!
    const to = placement(slot, receivers.filter(hasRoom))!
    if (to.active === base) extra--
    slot.target = to.id
    to.active++
  }

  const moved: Move[] = []
  const warmups: Move[] = []
  const deferred: Move[] = []
  for (const slot of slots) {
    if (slot.target === slot.owner) continue
    const move: Move = { ...slot.tp, from: slot.owner ?? null, to: slot.target! }
    // A partition whose owner left cannot wait for a warm copy: nobody would process it meanwhile.
    if (warmup === undefined || slot.owner === undefined || warm(byId.get(slot.target!)!, slot)) {
      moved.push(move)
      continue
    }
    if (warmups.length < warmup.maxWarmups) {
      warmups.push(move)
      slot.warmingOn = slot.target
    } else {
      deferred.push(move)
    }
    byId.get(slot.target!)!.active--
    byId.get(slot.owner)!.active++
    slot.target = slot.owner
  }

  const plans = new Map<string, MemberPlan>(members.map((m) => [m.id, { active: [], standbys: [], warmups: [] }]))
  const turn: number[] = []
  for (const [i, slot] of slots.entries()) {
    const plan = plans.get(slot.target!)!
    turn[i] = plan.active.length
    plan.active.push(slot.tp)
    if (slot.warmingOn !== undefined) plans.get(slot.warmingOn)!.warmups.push(slot.tp)
  }
  // A member is never its own partitions' standby: taking every owner's first
  // partition, then every owner's second, ... spreads that exclusion, and the
  // share keeps one member holding fresh copies of much from taking all.
  const share = members.length < 2 ? 0 : Math.ceil((slots.length * Math.min(standbyCount, members.length - 1)) / members.length)
  const standbyOrder = [...slots.keys()].sort((a, b) => turn[a]! - turn[b]! || compareIds(slots[a]!.target!, slots[b]!.target!) || a - b)
  // Of members with as many standbys, the one that owns more partitions still to come goes first: it cannot take those.
  const ownLeft = new Map(members.map((m) => [m.id, plans.get(m.id)!.active.length]))
  // Standbys of one owner's partitions spread over the other members, so
  // that when that owner fails, each of its partitions has a standby with
  // room to take it (a member takes about one more partition, not several).
  const ofOwner = new Map<string, number>()
  const pairKey = (standby: string, owner: string): string => `${standby}\0${owner}`
  for (const i of standbyCount === 0 ? [] : standbyOrder) {
    const slot = slots[i]!
    ownLeft.set(slot.target!, ownLeft.get(slot.target!)! - 1)
    const sameOwner = (m: Member): number => ofOwner.get(pairKey(m.id, slot.target!)) ?? 0
    let candidates = members.filter((m) => m.id !== slot.target && m.id !== slot.warmingOn)
    for (let n = 0; n < standbyCount && candidates.length > 0; n++) {
      const below = candidates.filter((m) => m.standbys < share)
      const chosen = best(
        below.length > 0 ? below : candidates,
        (a, b) =>
          compareCopies(slot.copies.get(a.id), slot.copies.get(b.id)) ||
          Number(a.previousStandbys.has(i)) - Number(b.previousStandbys.has(i)) ||
          sameOwner(b) - sameOwner(a) ||
          b.standbys - a.standbys ||
          ownLeft.get(a.id)! - ownLeft.get(b.id)! ||
          compareIds(b.id, a.id),
      )!
      chosen.standbys++
      ofOwner.set(pairKey(chosen.id, slot.target!), sameOwner(chosen) + 1)
      plans.get(chosen.id)!.standbys.push(slot.tp)
      candidates = candidates.filter((m) => m !== chosen)
    }
  }
  // Standbys were named in turn order; a member reads them in partition order.
  for (const plan of plans.values()) plan.standbys.sort((a, b) => index.get(keyOf(a))! - index.get(keyOf(b))!)
  return { generation: generation + 1, members: plans, moved, warmups, deferred }
}

export interface StateAwareAssignerOptions {
  /**
   * What this member advertises at each join: kafkajs calls it synchronously
   * while it builds the JoinGroup request. Without it (or when it returns
   * undefined or throws) the member advertises nothing and is assigned as a
   * member without state.
   */
  readonly advertise?: (() => MemberState | undefined) | undefined
  readonly standbys?: number | undefined
  readonly warmup?: WarmupOptions | undefined
  /** Called on the leader with each assignment it computed, before it is sent: for logs and metrics. */
  readonly onAssignment?: ((assignment: ComputedAssignment) => void) | undefined
}

/**
 * The kafkajs PartitionAssigner of the state-aware assignor. Each member
 * sends its advertisement in its subscription's userData; the leader decodes
 * them all, runs computeAssignment() and sends each member its active
 * partitions, with its standbys, warm-ups and the new generation in the
 * assignment's userData (decodeAssignmentInfo() reads it).
 */
export function stateAwareAssigner(options: StateAwareAssignerOptions = {}): PartitionAssigner {
  if (typeof options !== 'object' || options === null) throw new TypeError(`stateAwareAssigner options must be an object, got ${describeValue(options)}`)
  const { advertise, onAssignment } = options
  if (advertise !== undefined && typeof advertise !== 'function') throw new TypeError(`options.advertise must be a function, got ${describeValue(advertise)}`)
  if (onAssignment !== undefined && typeof onAssignment !== 'function') throw new TypeError(`options.onAssignment must be a function, got ${describeValue(onAssignment)}`)
  const standbys = checkCount(options.standbys ?? 0, 'options.standbys')
  const warmup = resolveWarmup(options.warmup, 'options.warmup')
  const { MemberMetadata, MemberAssignment } = AssignerProtocol

  return ({ cluster, groupId, logger }) => ({
    name: ASSIGNOR_NAME,
    version: ASSIGNOR_VERSION,

    async assign({ members, topics }) {
      const partitions: Record<string, number[]> = Object.create(null)
      for (const topic of topics) partitions[topic] = cluster.findTopicPartitionMetadata(topic).map((m) => m.partitionId)
      const input = onceEach(members, (memberId) => logger.warn('The group named a member twice: assigned once', { groupId, memberId })).map(({ memberId, memberMetadata }) => {
        const { value, problem } = readSubscription(memberMetadata)
        if (problem !== undefined) logger.info('Member advertises no state: assigned as a member without local copies', { groupId, memberId, problem })
        return { memberId, state: value }
      })
      const plan = computeAssignment({ members: input, partitions, standbys, warmup })
      logger.info('State-aware assignment', {
        groupId,
        generation: plan.generation,
        members: plan.members.size,
        moved: plan.moved.length,
        warmups: plan.warmups.length,
        deferred: plan.deferred.length,
      })
      try {
        onAssignment?.(plan)
      } catch (error) {
        logger.error('onAssignment threw; the assignment is sent as computed', { groupId, error: (error as Error)?.message })
      }
      return [...plan.members].map(([memberId, p]) => ({
        memberId,
        memberAssignment: MemberAssignment.encode({
          version: ASSIGNOR_VERSION,
          assignment: groupByTopic(p.active),
          userData: encodeAssignmentInfo({ generation: plan.generation, standbys: p.standbys, warmups: p.warmups, orphaned: orphanedOf(p.active, input), memberId }),
        }),
      }))
    },

    protocol({ topics }) {
      let state: MemberState | undefined
      try {
        state = advertise?.()
      } catch (error) {
        // A join must not fail for it: the member is then assigned as one without state.
        logger.error('advertise() threw; this member advertises no state', { groupId, error: (error as Error)?.message })
      }
      const userData = state === undefined ? Buffer.alloc(0) : encodeSubscription(state)
      return { name: ASSIGNOR_NAME, metadata: MemberMetadata.encode({ version: ASSIGNOR_VERSION, topics, userData }) }
    },
  })
}

/**
 * Each member id once, the first entry of it kept. librdkafka's mock gives a
 * new member the id of a freed one (its ids are pointers), so a JoinGroup
 * response can name one id twice; the group syncs one assignment per id
 * anyway, and failing the round would only restart every member into the
 * same response.
 */
function onceEach<M extends { memberId: string }>(members: readonly M[], twice: (memberId: string) => void): M[] {
  const seen = new Set<string>()
  return members.filter(({ memberId }) => {
    if (!seen.has(memberId)) return seen.add(memberId)
    twice(memberId)
    return false
  })
}

/**
 * The active partitions that no member of this join owned before: their
 * owner left or was expired by the group, so its release will not come.
 * Nothing when a member advertised no state (its ownership is unknown).
 */
export function orphanedOf(active: readonly TopicPartition[], members: readonly AssignmentMember[]): TopicPartition[] {
  if (members.some((m) => m.state === undefined)) return []
  const owned = new Set(members.flatMap((m) => m.state!.owned.map(keyOf)))
  return active.filter((tp) => !owned.has(keyOf(tp)))
}

/** A member's subscription metadata (kafkajs's MemberMetadata around our userData); never throws. */
export function readSubscription(metadata: Buffer): Decoded<MemberState> {
  return inEnvelope(() => AssignerProtocol.MemberMetadata.decode(metadata), decodeSubscription)
}

/**
 * The standbys, warm-ups and generation in a member's assignment (the
 * SyncGroup answer); never throws. kafkajs 2.2.4 decodes that answer and
 * keeps only the active partitions, so the runtime must take the bytes
 * before kafkajs drops them.
 */
export function readAssignment(memberAssignment: Buffer): Decoded<AssignmentInfo> {
  return inEnvelope(() => AssignerProtocol.MemberAssignment.decode(memberAssignment), decodeAssignmentInfo)
}

/** Our userData inside one of kafkajs's envelopes, whose decoder throws on bytes too short. */
function inEnvelope<T>(open: () => { userData: Buffer | null } | null, decode: (userData: Buffer) => Decoded<T>): Decoded<T> {
  let userData: Buffer | null
  try {
    userData = open()?.userData ?? null
  } catch {
    return { value: undefined, problem: 'the kafkajs envelope around the userData does not decode' }
  }
  return decode(userData ?? Buffer.alloc(0))
}

function keyOf(tp: TopicPartition): string {
  return `${tp.partition}:${tp.topic}`
}

/** Member ids in code-unit order, as kafkajs's own assigner sorts them: not the locale's order, which may differ between members. */
function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}

/** The greatest element by `compare` (positive when its first argument is greater), the first of equals. */
function best<T>(list: readonly T[], compare: (a: T, b: T) => number): T | undefined {
  let top: T | undefined
  for (const item of list) if (top === undefined || compare(item, top) > 0) top = item
  return top
}

/**
 * Positive when copy a is fresher: a copy beats none, a known position beats
 * an unknown one, then the higher position, then a store (no snapshot: it
 * opens as it is, where a snapshot copy must be restored; a member
 * restarted with its state dir gets its partitions back ahead of their
 * standbys), then the newer snapshot.
 */
function compareCopies(a: LocalCopy | undefined, b: LocalCopy | undefined): number {
  if (a === undefined || b === undefined) return Number(a !== undefined) - Number(b !== undefined)
  if (a.position !== b.position) {
    if (a.position === undefined) return -1
    if (b.position === undefined) return 1
    return a.position > b.position ? 1 : -1
  }
  if (a.position !== undefined && (a.snapshot === undefined) !== (b.snapshot === undefined)) return a.snapshot === undefined ? 1 : -1
  // Snapshot ids are zero-padded (epoch, sequence): their text order is their age.
  return compareIds(a.snapshot ?? '', b.snapshot ?? '')
}

function checkCount(value: unknown, name: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new RangeError(`${name} must be a non-negative integer, got ${describeValue(value)}`)
  return value
}

function resolveWarmup(value: unknown, name = 'input.warmup'): WarmupOptions | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'object' || value === null) throw new TypeError(`${name} must be { maxWarmups, maxLagBytes?, maxLagSnapshots? }, got ${describeValue(value)}`)
  const { maxWarmups, maxLagBytes, maxLagSnapshots } = value as Record<string, unknown>
  if (checkCount(maxWarmups, `${name}.maxWarmups`) === 0) throw new RangeError(`${name}.maxWarmups must be at least 1 (leave warmup out to move at once), got 0`)
  const bytes = maxLagBytes === undefined ? undefined : checkCount(maxLagBytes, `${name}.maxLagBytes`)
  const snapshots = maxLagSnapshots === undefined ? undefined : checkCount(maxLagSnapshots, `${name}.maxLagSnapshots`)
  return { maxWarmups: maxWarmups as number, maxLagBytes: bytes, maxLagSnapshots: bytes === undefined && snapshots === undefined ? 1 : snapshots }
}

function checkMembers(value: unknown): Member[] {
  if (!Array.isArray(value)) throw new TypeError(`input.members must be an array, got ${describeValue(value)}`)
  const seen = new Set<string>()
  const members = value.map((m: unknown, k): Member => {
    const { memberId, state } = (typeof m === 'object' && m !== null ? m : {}) as Record<string, unknown>
    if (typeof memberId !== 'string' || memberId === '') throw new TypeError(`input.members[${k}].memberId must be a non-empty string, got ${describeValue(memberId)}`)
    if (seen.has(memberId)) throw new RangeError(`input.members has memberId ${describeValue(memberId)} twice`)
    seen.add(memberId)
    if (state !== undefined && (typeof state !== 'object' || state === null)) throw new TypeError(`input.members[${k}].state must be an object, got ${describeValue(state)}`)
    return { id: memberId, state: state as MemberState | undefined, previousStandbys: new Set(), owned: [], kept: 0, active: 0, standbys: 0 }
  })
  return members.sort((a, b) => compareIds(a.id, b.id))
}

function checkPartitions(value: unknown): Slot[] {
  if (typeof value !== 'object' || value === null) throw new TypeError(`input.partitions must be { topic: partition numbers }, got ${describeValue(value)}`)
  const slots: Slot[] = []
  for (const topic of Object.keys(value).sort(compareIds)) {
    const list = (value as Record<string, unknown>)[topic]
    if (!Array.isArray(list)) throw new TypeError(`input.partitions.${topic} must be an array of partition numbers, got ${describeValue(list)}`)
    for (const partition of list) {
      if (typeof partition !== 'number' || !Number.isInteger(partition) || partition < 0) throw new RangeError(`input.partitions.${topic} must hold non-negative integers, got ${describeValue(partition)}`)
    }
    for (const partition of [...new Set(list as number[])].sort((a, b) => a - b)) {
      slots.push({ tp: { topic, partition }, copies: new Map(), freshest: undefined, owner: undefined, target: undefined, warmingOn: undefined })
    }
  }
  return slots
}
