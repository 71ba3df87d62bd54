import { AssignerProtocol, PartitionAssigners, type Cluster, type Logger } from 'kafkajs'
import { describe, expect, it } from 'vitest'
import {
  ASSIGNMENT_VERSION,
  SUBSCRIPTION_VERSION,
  decodeAssignmentInfo,
  decodeSubscription,
  encodeAssignmentInfo,
  encodeSubscription,
  type LocalCopy,
  type MemberState,
} from '../../connectors/kafka/consumer/assignor-metadata.js'
import { ASSIGNOR_NAME, computeAssignment, orphanedOf, readAssignment, readSubscription, stateAwareAssigner, type AssignmentInput, type AssignmentMember, type ComputedAssignment } from '../../connectors/kafka/consumer/assignor.js'

const T = 'src'
const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i)
const tps = (list: readonly number[], topic = T): { topic: string; partition: number }[] => list.map((partition) => ({ topic, partition }))

interface Spec {
  owned?: number[]
  generation?: number
  /** partition -> position (a copy with a known position), or a copy's other fields. */
  copies?: Record<number, bigint | Omit<LocalCopy, 'topic' | 'partition'>>
  standbys?: number[]
}

function member(memberId: string, spec?: Spec): AssignmentMember {
  if (spec === undefined) return { memberId }
  const copies = Object.entries(spec.copies ?? {}).map(([p, c]): LocalCopy => ({ topic: T, partition: Number(p), ...(typeof c === 'bigint' ? { position: c } : c) }))
  // An owner holds a copy of what it owns: its active store.
  for (const p of spec.owned ?? []) if (!copies.some((c) => c.partition === p)) copies.push({ topic: T, partition: p, position: 1000n })
  return { memberId, state: { generation: spec.generation ?? 1, owned: tps(spec.owned ?? []), standbys: tps(spec.standbys ?? []), copies } }
}

/** partition -> active member */
function owners(plan: ComputedAssignment): Map<number, string> {
  const out = new Map<number, string>()
  for (const [id, p] of plan.members) for (const tp of p.active) out.set(tp.partition, id)
  return out
}

function counts(plan: ComputedAssignment): Record<string, number> {
  return Object.fromEntries([...plan.members].map(([id, p]) => [id, p.active.length]))
}

function active(plan: ComputedAssignment, id: string): number[] {
  return plan.members.get(id)!.active.map((tp) => tp.partition)
}

/** Every partition assigned exactly once, counts within one of each other. */
function expectBalanced(plan: ComputedAssignment, partitions: number): void {
  const all = [...plan.members.values()].flatMap((p) => p.active.map((tp) => `${tp.topic}:${tp.partition}`))
  expect(new Set(all).size).toBe(all.length)
  expect(all.length).toBe(partitions)
  const c = Object.values(counts(plan))
  expect(Math.max(...c) - Math.min(...c)).toBeLessThanOrEqual(1)
}

/** A round-robin start: member k of `ids` owns partitions k, k + n, ... */
function roundRobin(ids: string[], partitions: number, generation = 1): AssignmentMember[] {
  return ids.map((id, k) => member(id, { owned: range(partitions).filter((p) => p % ids.length === k), generation }))
}

/** Deterministic shuffle (mulberry32). */
function shuffled<T>(list: readonly T[], seed: number): T[] {
  let s = seed >>> 0
  const next = (): number => {
    s = (s + 0x6d2b79f5) >>> 0
    let t = s
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const out = [...list]
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1))
    ;[out[i], out[j]] = [out[j]!, out[i]!]
  }
  return out
}

describe('computeAssignment: stickiness and balance', () => {
  it('spreads a group without state evenly, the same whatever the order the members arrive in', () => {
    const input: AssignmentInput = { members: ['m-c', 'm-a', 'm-b'].map((id) => member(id)), partitions: { [T]: range(12) } }
    const plan = computeAssignment(input)
    expectBalanced(plan, 12)
    expect(counts(plan)).toEqual({ 'm-a': 4, 'm-b': 4, 'm-c': 4 })
    expect([...plan.members.keys()]).toEqual(['m-a', 'm-b', 'm-c'])
    expect(plan.moved).toHaveLength(12)
    expect(plan.moved.every((m) => m.from === null)).toBe(true)
    for (let seed = 1; seed <= 5; seed++) expect(computeAssignment({ ...input, members: shuffled(input.members, seed) })).toEqual(plan)
  })

  it('12 partitions over 5 members: counts 3, 3, 2, 2, 2, and an assignment already that balanced moves nothing', () => {
    const ids = ['a', 'b', 'c', 'd', 'e']
    const fresh = computeAssignment({ members: ids.map((id) => member(id)), partitions: { [T]: range(12) } })
    expectBalanced(fresh, 12)
    expect(Object.values(counts(fresh)).sort()).toEqual([2, 2, 2, 3, 3])

    // c and e own three: they keep them, as everyone keeps theirs.
    const owned: Record<string, number[]> = { a: [0, 1], b: [2, 3], c: [4, 5, 6], d: [7, 8], e: [9, 10, 11] }
    const plan = computeAssignment({ members: ids.map((id) => member(id, { owned: owned[id]! })), partitions: { [T]: range(12) } })
    expect(plan.moved).toEqual([])
    for (const id of ids) expect(active(plan, id)).toEqual(owned[id])
  })

  it('scale-out 3 -> 4 with 12 partitions moves exactly 3, all to the new member, one from each', () => {
    const before = roundRobin(['a', 'b', 'c'], 12)
    const plan = computeAssignment({ members: [...before, member('d', { generation: 0 })], partitions: { [T]: range(12) } })
    expectBalanced(plan, 12)
    expect(plan.moved).toHaveLength(3)
    expect(plan.moved.every((m) => m.to === 'd')).toBe(true)
    expect(plan.moved.map((m) => m.from).sort()).toEqual(['a', 'b', 'c'])
    for (const m of before) {
      const kept = active(plan, m.memberId)
      expect(kept).toHaveLength(3)
      expect(m.state!.owned.map((tp) => tp.partition)).toEqual(expect.arrayContaining(kept))
    }
  })

  it('scale-out: a joining member with local copies is given the partitions it has copies of', () => {
    const before = roundRobin(['a', 'b', 'c'], 12)
    // a owns 0, 3, 6, 9; b 1, 4, 7, 10; c 2, 5, 8, 11. d holds copies of 9 (a's), 1 and 4 (b's) and 8 (c's):
    // each owner releases the partition d has the freshest copy of (b: 4, 100 behind, not 1, 900 behind).
    const d = member('d', { copies: { 4: 900n, 9: 990n, 8: 500n, 1: 100n } })
    const plan = computeAssignment({ members: [...before, d], partitions: { [T]: range(12) } })
    expect(plan.moved).toHaveLength(3)
    expect(active(plan, 'd')).toEqual([4, 8, 9])
  })

  it('scale-in 4 -> 3: only the leaving member moves its partitions, each to the member with the freshest copy', () => {
    // d leaves; it owned 3, 7, 11. Copies: 3 is freshest at b, 7 at a, 11 at c (a has an older one).
    const members = [
      member('a', { owned: [0, 4, 8], copies: { 7: 950n, 11: 100n } }),
      member('b', { owned: [1, 5, 9], copies: { 3: 990n, 7: 900n } }),
      member('c', { owned: [2, 6, 10], copies: { 11: 999n, 3: 10n } }),
    ]
    const plan = computeAssignment({ members, partitions: { [T]: range(12) } })
    expectBalanced(plan, 12)
    expect(plan.moved).toEqual([
      { topic: T, partition: 3, from: null, to: 'b' },
      { topic: T, partition: 7, from: null, to: 'a' },
      { topic: T, partition: 11, from: null, to: 'c' },
    ])
    expect(active(plan, 'a')).toEqual([0, 4, 7, 8])
    expect(active(plan, 'b')).toEqual([1, 3, 5, 9])
    expect(active(plan, 'c')).toEqual([2, 6, 10, 11])
  })

  it('a partition that must move goes to the freshest copy among members below quota; equal copies go to the member with fewer partitions, then the lower id', () => {
    // 4 partitions, 2 members: a already has 2 and cannot take more; b has the only copy... of nothing; tie on partition 3 between b and c.
    // 5 partitions over 3: shares of 2, 2 and 1. a keeps its two and has no room left.
    const members = [member('a', { owned: [0, 1], copies: { 2: 999n } }), member('b', { copies: { 2: 5n } }), member('c')]
    const plan = computeAssignment({ members, partitions: { [T]: range(5) } })
    expectBalanced(plan, 5)
    expect(active(plan, 'a')).toEqual([0, 1])
    // 2: a's copy is fresher, but a is full; b has the other copy. 3: no copies, c has fewer. 4: b and c tie, b's id is lower.
    expect(active(plan, 'b')).toEqual([2, 4])
    expect(active(plan, 'c')).toEqual([3])
  })

  it('ties between copies break by position, then snapshot id, and a copy of known position beats one of unknown position', () => {
    const members = [
      member('a', { copies: { 0: { snapshot: '0000000002-000000000009' } } }),
      member('b', { copies: { 0: { position: 5n } } }),
      member('c', { copies: { 1: { position: 7n, snapshot: '0000000001-000000000001' } } }),
      member('d', { copies: { 1: { position: 7n, snapshot: '0000000001-000000000002' } } }),
    ]
    const plan = computeAssignment({ members, partitions: { [T]: [0, 1] } })
    expect(owners(plan).get(0)).toBe('b')
    expect(owners(plan).get(1)).toBe('d')
  })

  it('a member restarted with its state dir (a new member id) gets its partitions back, from its advertised ownership or from its copies alone', () => {
    const group = roundRobin(['a', 'b', 'c'], 12, 4)
    const b = group[1]!
    const others = [group[0]!, group[2]!]
    const bOwned = b.state!.owned.map((tp) => tp.partition)
    // It remembers what it owned (the generation it was given): it keeps all of it.
    const remembering = computeAssignment({ members: [...others, { memberId: 'b-restarted', state: b.state }], partitions: { [T]: range(12) } })
    expect(active(remembering, 'b-restarted')).toEqual(bOwned)
    expect(remembering.moved).toEqual([])
    // It advertises only its stores: the owner is gone, its copies are the freshest.
    const copiesOnly = { generation: 0, owned: [], standbys: [], copies: b.state!.copies }
    const plan = computeAssignment({ members: [{ memberId: 'b-restarted', state: copiesOnly }, ...others], partitions: { [T]: range(12) } })
    expect(active(plan, 'b-restarted')).toEqual(bOwned)
    expect(active(plan, 'a')).toEqual(active(remembering, 'a'))
  })

  it('a member restarted after a close that stayed in the group gets its partitions back ahead of their standbys at the same position', () => {
    // b closed p0 and p1 after their hand-off snapshots; c follows those snapshots as their standby, at the same position.
    const members = [
      member('a', { owned: [2, 3] }),
      member('b-restarted', { copies: { 0: 40n, 1: 41n } }),
      // c has room for one more partition.
      member('c', { owned: [4], copies: { 0: { position: 40n, snapshot: '0000000001-000000000007' }, 1: { position: 41n, snapshot: '0000000001-000000000008' } } }),
    ]
    const plan = computeAssignment({ members, partitions: { [T]: range(6) } })
    expect(active(plan, 'b-restarted')).toEqual([0, 1])
    // A standby ahead of the store still wins: its copy is fresher.
    const ahead = [member('a', { owned: [2] }), members[1]!, member('c', { owned: [3], copies: { 0: { position: 45n, snapshot: '0000000001-000000000009' } } })]
    const aheadPlan = computeAssignment({ members: ahead, partitions: { [T]: range(4) } })
    expect(owners(aheadPlan).get(0)).toBe('c')
    expect(owners(aheadPlan).get(1)).toBe('b-restarted')
  })

  it("a member that missed a generation (a zombie) loses a partition it still claims to the member of the newer generation", () => {
    // z owned 0-3 in generation 3; the group moved 0 and 1 to a in generation 4 while z was stalled.
    const members = [member('a', { owned: [0, 1], generation: 4 }), member('z', { owned: [0, 1, 2, 3], generation: 3 }), member('b', { owned: [4, 5], generation: 4 })]
    const plan = computeAssignment({ members, partitions: { [T]: range(6) } })
    expectBalanced(plan, 6)
    expect(active(plan, 'a')).toEqual([0, 1])
    expect(active(plan, 'z')).toEqual([2, 3])
    expect(plan.moved).toEqual([])
    expect(plan.generation).toBe(5)
    // The generation decided, not the order of ids: z of the newer generation owns 0 and 1 (and releases them to a, the member with room).
    const reversed = computeAssignment({ members: [member('a', { owned: [0, 1], generation: 3 }), member('z', { owned: [0, 1, 2, 3], generation: 4 }), members[2]!], partitions: { [T]: range(6) } })
    expect(reversed.moved).toEqual([
      { topic: T, partition: 0, from: 'z', to: 'a' },
      { topic: T, partition: 1, from: 'z', to: 'a' },
    ])
  })

  it('keeps several topics apart and ignores claims and copies of partitions that no longer exist', () => {
    const members: AssignmentMember[] = [
      { memberId: 'a', state: { generation: 1, owned: [...tps([0, 1], 'x'), ...tps([7], 'gone')], standbys: [], copies: [{ topic: 'y', partition: 0, position: 3n }] } },
      { memberId: 'b', state: { generation: 1, owned: tps([2], 'x'), standbys: [], copies: [] } },
    ]
    const plan = computeAssignment({ members, partitions: { y: [0, 1], x: [0, 1, 2] } })
    expectBalanced(plan, 5)
    expect(plan.members.get('a')!.active).toEqual([...tps([0, 1], 'x'), ...tps([0], 'y')])
    expect(plan.members.get('b')!.active).toEqual([...tps([2], 'x'), ...tps([1], 'y')])
  })

  it('random groups: balanced, every kept partition stays, the fewest moves, and the same plan for any member order', () => {
    let spread = 0
    for (let seed = 1; seed <= 30; seed++) {
      const rand = shuffled(range(1000), seed)
      const partitions = 20 + (rand[0]! % 80)
      const ids = range(1 + (rand[1]! % 9)).map((k) => `m${rand[2 + k]!}`)
      const owner = new Map<number, string>()
      for (const p of range(partitions)) if (rand[p % 1000]! % 5 !== 0) owner.set(p, ids[rand[(p * 7) % 1000]! % ids.length]!)
      const members = ids.map((id) => member(id, { owned: range(partitions).filter((p) => owner.get(p) === id) }))
      const plan = computeAssignment({ members, partitions: { [T]: range(partitions) }, standbys: 2 })
      expectBalanced(plan, partitions)
      const quotaHigh = Math.ceil(partitions / ids.length)
      const quotaLow = Math.floor(partitions / ids.length)
      // Each member keeps min(owned, quota) of its own: no move beyond what balance requires.
      let kept = 0
      for (const id of ids) {
        const own = members.find((m) => m.memberId === id)!.state!.owned.length
        const stayed = active(plan, id).filter((p) => owner.get(p) === id).length
        expect(stayed).toBeGreaterThanOrEqual(Math.min(own, quotaLow))
        expect(stayed).toBeLessThanOrEqual(Math.min(own, quotaHigh))
        kept += stayed
      }
      expect(plan.moved).toHaveLength(partitions - kept)
      // Two standbys where there are enough members, never the owner, and spread.
      const standbys = new Map<number, string[]>()
      for (const [id, p] of plan.members) for (const tp of p.standbys) standbys.set(tp.partition, [...(standbys.get(tp.partition) ?? []), id])
      for (const p of range(partitions)) {
        const s = standbys.get(p) ?? []
        expect(s).toHaveLength(Math.min(2, ids.length - 1))
        expect(new Set(s).size).toBe(s.length)
        expect(s).not.toContain(owners(plan).get(p))
      }
      const load = [...plan.members.values()].map((p) => p.standbys.length)
      spread = Math.max(spread, Math.max(...load) - Math.min(...load))
      expect(computeAssignment({ members: shuffled(members, seed + 100), partitions: { [T]: shuffled(range(partitions), seed) }, standbys: 2 })).toEqual(plan)
    }
    expect(spread).toBeLessThanOrEqual(1)
  })
})

describe('computeAssignment: standbys and warm-up', () => {
  it('names N standbys per partition, distinct and never the active owner, preferring the freshest copies, then balance', () => {
    const members = [
      member('a', { owned: [0, 1, 2] }),
      member('b', { owned: [3, 4, 5], copies: { 0: 800n } }),
      member('c', { owned: [6, 7, 8], copies: { 0: 900n, 3: 10n } }),
      member('d', { owned: [9, 10, 11] }),
    ]
    const plan = computeAssignment({ members, partitions: { [T]: range(12) }, standbys: 2 })
    const standbysOf = (p: number): string[] => [...plan.members].filter(([, m]) => m.standbys.some((tp) => tp.partition === p)).map(([id]) => id)
    for (const p of range(12)) {
      const s = standbysOf(p)
      expect(s).toHaveLength(2)
      expect(s).not.toContain(owners(plan).get(p))
    }
    expect(standbysOf(0).sort()).toEqual(['b', 'c'])
    expect(standbysOf(3)).toContain('c')
    const load = [...plan.members.values()].map((m) => m.standbys.length)
    expect(load.reduce((x, y) => x + y)).toBe(24)
    expect(Math.max(...load) - Math.min(...load)).toBeLessThanOrEqual(1)
  })

  it("spreads one owner's standbys over the other members, so that its failover spreads too", () => {
    const members = ['a', 'b', 'c', 'd'].map((id, k) => member(id, { owned: [3 * k, 3 * k + 1, 3 * k + 2] }))
    const plan = computeAssignment({ members, partitions: { [T]: range(12) }, standbys: 1 })
    const standbyOf = (p: number): string => [...plan.members].find(([, m]) => m.standbys.some((tp) => tp.partition === p))![0]
    for (const owner of ['a', 'b', 'c', 'd']) {
      const mine = active(plan, owner)
      expect(new Set(mine.map(standbyOf)).size).toBe(mine.length)
    }
    // d fails: each of its partitions goes to its standby, which advertises its copy.
    const copies = (id: string): Record<number, bigint> => Object.fromEntries(active(plan, 'd').filter((p) => standbyOf(p) === id).map((p) => [p, 100n]))
    const after = computeAssignment({ members: ['a', 'b', 'c'].map((id) => member(id, { owned: active(plan, id), copies: copies(id) })), partitions: { [T]: range(12) } })
    for (const p of active(plan, 'd')) expect(owners(after).get(p)).toBe(standbyOf(p))
  })

  it('names at most members - 1 standbys, and keeps a standby where it was when copies tie', () => {
    const plan = computeAssignment({ members: [member('a', { owned: [0] }), member('b', { owned: [1] })], partitions: { [T]: [0, 1] }, standbys: 3 })
    expect(plan.members.get('a')!.standbys).toEqual(tps([1]))
    expect(plan.members.get('b')!.standbys).toEqual(tps([0]))

    // a keeps 1 and gives 0 to b; a (its copy) becomes 0's standby. Neither b nor c has a copy of 1: c stays its standby.
    const members = [member('a', { owned: [0, 1] }), member('b'), member('c', { standbys: [1] })]
    const sticky = computeAssignment({ members, partitions: { [T]: [0, 1] }, standbys: 1 })
    expect(sticky.members.get('a')!.standbys).toEqual(tps([0]))
    expect(sticky.members.get('b')!.standbys).toEqual([])
    expect(sticky.members.get('c')!.standbys).toEqual(tps([1]))
  })

  it('warm-up: a move to a cold copy waits on its owner, at most maxWarmups at once, and happens once the copy is warm', () => {
    const partitions = { [T]: range(12) }
    const before = roundRobin(['a', 'b', 'c'], 12)
    const warmup = { maxWarmups: 2 }
    const round1 = computeAssignment({ members: [...before, member('d')], partitions, warmup, standbys: 1 })
    expect(round1.moved).toEqual([])
    expect(round1.warmups).toHaveLength(2)
    expect(round1.deferred).toHaveLength(1)
    expect([...round1.warmups, ...round1.deferred].every((m) => m.to === 'd')).toBe(true)
    // Nothing moved: every owner keeps its four.
    for (const m of before) expect(active(round1, m.memberId)).toEqual(m.state!.owned.map((tp) => tp.partition))
    const warming = round1.warmups.map((m) => m.partition)
    expect(round1.members.get('d')!.warmups.map((tp) => tp.partition)).toEqual(warming)
    // The receiver warms them; it is not also their standby.
    for (const p of warming) expect(round1.members.get('d')!.standbys.map((tp) => tp.partition)).not.toContain(p)

    // d's copies are warm now (one snapshot behind is the default bound); the runtime asks for a rebalance.
    const dWarm = member('d', { copies: Object.fromEntries(warming.map((p) => [p, { position: 900n, lag: { snapshots: 1, bytes: 4096 } }])) })
    const round2 = computeAssignment({ members: [...before, dWarm], partitions, warmup, standbys: 1 })
    expect(round2.moved.map((m) => m.partition)).toEqual(warming)
    expect(round2.warmups.map((m) => m.partition)).toEqual(round1.deferred.map((m) => m.partition))
    expect(round2.deferred).toEqual([])

    // A bound in bytes: 4096 is above 1000, so the same copies are cold.
    const round2Bytes = computeAssignment({ members: [...before, dWarm], partitions, warmup: { maxWarmups: 2, maxLagBytes: 1000 } })
    expect(round2Bytes.moved).toEqual([])
    expect(round2Bytes.warmups.map((m) => m.partition)).toEqual(warming)
  })

  it('warm-up never holds a partition whose owner left: it moves at once, to the freshest copy', () => {
    const members = [member('a', { owned: [0, 1] }), member('b', { copies: { 2: 50n } }), member('c', { copies: { 2: 70n, 3: 5n } })]
    const plan = computeAssignment({ members, partitions: { [T]: range(4) }, warmup: { maxWarmups: 1 } })
    expect(plan.warmups).toEqual([])
    expect(owners(plan).get(2)).toBe('c')
    expect(owners(plan).get(3)).toBe('b')
  })

  it('refuses options that make no sense, naming them', () => {
    const members = [member('a')]
    const partitions = { [T]: [0] }
    expect(() => computeAssignment({ members, partitions, standbys: -1 })).toThrow(/input\.standbys must be a non-negative integer, got number -1/)
    expect(() => computeAssignment({ members, partitions, warmup: { maxWarmups: 0 } })).toThrow(/input\.warmup\.maxWarmups must be at least 1/)
    expect(() => computeAssignment({ members: [member('a'), member('a')], partitions })).toThrow(/memberId 'a' twice/)
    expect(() => computeAssignment({ members, partitions: { [T]: [1.5] } })).toThrow(RangeError)
    expect(() => stateAwareAssigner({ standbys: 1.5 })).toThrow(/options\.standbys/)
  })
})

describe('assignor metadata', () => {
  const state: MemberState = {
    generation: 7,
    owned: [...tps([0, 3]), { topic: 'other', partition: 2 }],
    standbys: tps([1]),
    copies: [
      { topic: T, partition: 0, position: 9_223_372_036_854_775_807n, snapshot: '0000000003-000000000012', lag: { bytes: 0, snapshots: 0 } },
      { topic: T, partition: 1, position: 42n, lag: { bytes: 1 << 30 } },
      { topic: '__proto__', partition: 5, snapshot: '0000000001-000000000001' },
    ],
  }

  it('a subscription round-trips, positions beyond 2^53 included, and starts with its format byte', () => {
    const bytes = encodeSubscription(state)
    expect(bytes[0]).toBe(SUBSCRIPTION_VERSION)
    const { value, problem } = decodeSubscription(bytes)
    expect(problem).toBeUndefined()
    expect(value).toEqual({ ...state, copies: state.copies.map((c) => ({ position: undefined, snapshot: undefined, lag: undefined, ...c, ...(c.lag && { lag: { bytes: undefined, snapshots: undefined, ...c.lag } }) })) })
    const info = { generation: 8, standbys: tps([1, 2]), warmups: tps([4]) }
    const encoded = encodeAssignmentInfo(info)
    expect(encoded[0]).toBe(ASSIGNMENT_VERSION)
    expect(decodeAssignmentInfo(encoded)).toEqual({ value: info })
  })

  it('format 1 as docs/consumer-group.md specifies it: these exact bytes decode, and encoding gives them back', () => {
    const golden = Buffer.concat([
      Buffer.of(1),
      Buffer.from('{"generation":7,"owned":{"src":[0,3]},"standbys":{"src":[1]},"copies":{"src":[[0,"1234","0000000003-000000000012",0,0],[1,"99",null,1048576,1],[5]]}}'),
    ])
    const expected: MemberState = {
      generation: 7,
      owned: tps([0, 3]),
      standbys: tps([1]),
      copies: [
        { topic: T, partition: 0, position: 1234n, snapshot: '0000000003-000000000012', lag: { bytes: 0, snapshots: 0 } },
        { topic: T, partition: 1, position: 99n, snapshot: undefined, lag: { bytes: 1048576, snapshots: 1 } },
        { topic: T, partition: 5, position: undefined, snapshot: undefined, lag: undefined },
      ],
    }
    expect(decodeSubscription(golden)).toEqual({ value: expected })
    expect(encodeSubscription(expected).equals(golden)).toBe(true)
    const assignment = Buffer.concat([Buffer.of(1), Buffer.from('{"generation":8,"standbys":{"src":[2]},"warmups":{"src":[5]}}')])
    const info = { generation: 8, standbys: tps([2]), warmups: tps([5]) }
    expect(decodeAssignmentInfo(assignment)).toEqual({ value: info })
    expect(encodeAssignmentInfo(info).equals(assignment)).toBe(true)
    // Optional fields of format 1: the partitions whose owner left, and the member it is for.
    const full = Buffer.concat([Buffer.of(1), Buffer.from('{"generation":9,"standbys":{},"warmups":{},"orphaned":{"src":[3]},"memberId":"m-1"}')])
    const fullInfo = { generation: 9, standbys: [], warmups: [], orphaned: tps([3]), memberId: 'm-1' }
    expect(decodeAssignmentInfo(full)).toEqual({ value: fullInfo })
    expect(encodeAssignmentInfo(fullInfo).equals(full)).toBe(true)
  })

  it('an older or unknown version, junk bytes, or no userData read as "no state advertised", never a throw', () => {
    const body = encodeSubscription(state).subarray(1)
    const cases: [string, Buffer][] = [
      ['empty', Buffer.alloc(0)],
      ['older version', Buffer.concat([Buffer.of(0), body])],
      ['newer version', Buffer.concat([Buffer.of(2), body])],
      ['junk', Buffer.from([1, 0xff, 0x00, 0x13, 0x37])],
      ['json, not an object', Buffer.concat([Buffer.of(1), Buffer.from('[1,2]')])],
      ['a bad position', Buffer.concat([Buffer.of(1), Buffer.from('{"generation":1,"owned":{},"copies":{"src":[[0,"-5"]]}}')])],
      ['a position above 2^63-1', Buffer.concat([Buffer.of(1), Buffer.from('{"generation":1,"owned":{},"copies":{"src":[[0,"9223372036854775808"]]}}')])],
      ['a bad partition', Buffer.concat([Buffer.of(1), Buffer.from('{"generation":1,"owned":{"src":["x"]},"copies":{}}')])],
    ]
    for (const [k, [name, bytes]] of cases.entries()) {
      const decoded = decodeSubscription(bytes)
      expect(decoded.value, name).toBeUndefined()
      expect(decoded.problem, name).toEqual(expect.any(String))
      if (k < 5) expect(decodeAssignmentInfo(bytes).value, name).toBeUndefined()
    }
    // A field added later is ignored by this reader.
    const extended = Buffer.concat([Buffer.of(1), Buffer.from('{"generation":2,"owned":{"src":[1]},"copies":{},"future":{"x":1}}')])
    expect(decodeSubscription(extended).value).toEqual({ generation: 2, owned: tps([1]), standbys: [], copies: [] })
    // Metadata that is not even kafkajs's MemberMetadata.
    expect(readSubscription(Buffer.from([0xff])).value).toBeUndefined()
    expect(readAssignment(Buffer.from([0xff])).value).toBeUndefined()
  })

  it("members whose metadata does not read are assigned as members without state, and the others' state still counts", () => {
    const owned = roundRobin(['a', 'b'], 6)
    const plan = computeAssignment({ members: [...owned, { memberId: 'c', state: decodeSubscription(Buffer.from('junk')).value }], partitions: { [T]: range(6) } })
    expectBalanced(plan, 6)
    expect(plan.moved).toHaveLength(2)
    expect(plan.moved.every((m) => m.to === 'c')).toBe(true)
  })
})

describe('stateAwareAssigner: the kafkajs shape', () => {
  const logged: { level: string; message: string }[] = []
  const logger: Logger = {
    info: (message: string) => logged.push({ level: 'info', message }),
    warn: (message: string) => logged.push({ level: 'warn', message }),
    error: (message: string) => logged.push({ level: 'error', message }),
    debug: () => undefined,
    namespace: () => logger,
    setLogLevel: () => undefined,
  } as unknown as Logger
  // What assign() reads of the cluster: a topic's partitions (kafkajs's round-robin assigner reads the same).
  const cluster = { findTopicPartitionMetadata: (topic: string) => range(topic === T ? 12 : 2).map((partitionId) => ({ partitionId })) } as unknown as Cluster
  const config = { cluster, groupId: 'g', logger }

  it('protocol() metadata from each member reaches assign(), and each member reads its partitions, standbys and generation back', async () => {
    const before = roundRobin(['a', 'b', 'c'], 12, 3)
    const advertised = new Map<string, MemberState | undefined>([...before.map((m) => [m.memberId, m.state] as const), ['d', undefined]])
    const plans: ComputedAssignment[] = []
    const assigners = [...advertised].map(([id, s]) => [id, stateAwareAssigner({ advertise: () => s, standbys: 1, onAssignment: (p) => plans.push(p) })(config)] as const)
    const members = assigners.map(([memberId, assigner]) => {
      const { name, metadata } = assigner.protocol({ topics: [T, 'small'] })
      expect(name).toBe(ASSIGNOR_NAME)
      return { memberId, memberMetadata: metadata }
    })
    // Any member may be the leader: the one of the highest id here.
    const result = await assigners[3]![1].assign({ members: shuffled(members, 3), topics: [T, 'small'] })
    expect(result.map((r) => r.memberId)).toEqual(['a', 'b', 'c', 'd'])
    expect(plans).toHaveLength(1)
    const decoded = new Map(result.map((r) => [r.memberId, AssignerProtocol.MemberAssignment.decode(r.memberAssignment)!]))
    const all = [...decoded.values()].flatMap((d) => Object.entries(d.assignment).flatMap(([topic, ps]) => ps.map((p) => `${topic}:${p}`)))
    expect(all.sort()).toEqual([...range(2).map((p) => `small:${p}`), ...range(12).map((p) => `${T}:${p}`)].sort())
    // 14 partitions over 4: the 12 owned stay but for the 3 d needs (two of them the unowned partitions of 'small').
    expect(plans[0]!.moved.filter((m) => m.from !== null)).toHaveLength(1)
    for (const [id, d] of decoded) {
      expect(d.version).toBe(1)
      const info = readAssignment(result.find((r) => r.memberId === id)!.memberAssignment)
      expect(info.value!.generation).toBe(4)
      expect(info.value!.standbys).toEqual(plans[0]!.members.get(id)!.standbys)
      expect(Object.values(d.assignment).flat().length).toBeGreaterThanOrEqual(3)
    }
  })

  it('a member of another assigner version or with unreadable metadata joins as a member without state; an advertise() that throws does not break the join', async () => {
    logged.length = 0
    const leader = stateAwareAssigner({ advertise: () => ({ generation: 1, owned: tps(range(12)), standbys: [], copies: [] }) })(config)
    const broken = stateAwareAssigner({
      advertise: () => {
        throw new Error('disk gone')
      },
    })(config)
    // A round-robin member's metadata has the same envelope and an empty userData.
    const roundRobinMember = PartitionAssigners.roundRobin(config).protocol({ topics: [T] }).metadata
    const members = [
      { memberId: 'a', memberMetadata: leader.protocol({ topics: [T] }).metadata },
      { memberId: 'b', memberMetadata: broken.protocol({ topics: [T] }).metadata },
      { memberId: 'c', memberMetadata: roundRobinMember },
      { memberId: 'd', memberMetadata: Buffer.from([0, 1, 2]) },
    ]
    expect(logged.some((l) => l.level === 'error' && /advertise\(\) threw/.test(l.message))).toBe(true)
    const result = await leader.assign({ members, topics: [T] })
    const sizes = result.map((r) => Object.values(AssignerProtocol.MemberAssignment.decode(r.memberAssignment)!.assignment).flat().length)
    expect(sizes).toEqual([3, 3, 3, 3])
    expect(logged.filter((l) => /^Member advertises no state/.test(l.message))).toHaveLength(3)
  })

  it('a JoinGroup response that names one member twice (the mock reuses freed ids) is assigned once and logged, not thrown', async () => {
    logged.length = 0
    const leader = stateAwareAssigner({ advertise: () => ({ generation: 1, owned: tps(range(6)), standbys: [], copies: [] }) })(config)
    const other = stateAwareAssigner({ advertise: () => ({ generation: 1, owned: tps(range(12).slice(6)), standbys: [], copies: [] }) })(config)
    const fresh = stateAwareAssigner({})(config)
    const id = '0x7ff23c1d8490'
    const members = [
      { memberId: 'a', memberMetadata: leader.protocol({ topics: [T] }).metadata },
      { memberId: id, memberMetadata: other.protocol({ topics: [T] }).metadata },
      { memberId: id, memberMetadata: fresh.protocol({ topics: [T] }).metadata },
    ]
    const result = await leader.assign({ members, topics: [T] })
    expect(result.map((r) => r.memberId)).toEqual([id, 'a'])
    const assigned = result.map((r) => Object.values(AssignerProtocol.MemberAssignment.decode(r.memberAssignment)!.assignment).flat())
    expect(assigned.flat().sort((x, y) => x - y)).toEqual(range(12))
    // The first entry of the id is the one assigned: it keeps what it advertised.
    expect(assigned[0]!.sort((x, y) => x - y)).toEqual(range(12).slice(6))
    expect(logged.filter((l) => l.level === 'warn' && /named a member twice/.test(l.message))).toHaveLength(1)
  })
})

describe('orphaned partitions (the previous owner is no member of this join)', () => {
  it('are the active partitions that no member advertised as owned; nothing when a member advertised no state', () => {
    const a = member('a', { owned: [0, 1] })
    const b = member('b', { owned: [2] })
    // Partition 3's owner left (SIGKILLed, expired); 0 and 2 are owned by members of this join.
    expect(orphanedOf(tps([0, 2, 3]), [a, b])).toEqual(tps([3]))
    expect(orphanedOf(tps([3]), [a, b, member('c')])).toEqual([])
  })
})

describe('at scale (issue 38): 1,024 partitions over 8 members', () => {
  const P = 1024
  const ids = range(8).map((i) => `member-${i}-${'x'.repeat(36)}`) // kafkajs member ids: client id + a UUID
  const logger = { info: () => undefined, warn: () => undefined, error: () => undefined, debug: () => undefined, namespace: () => logger, setLogLevel: () => undefined } as unknown as Logger
  const cluster = { findTopicPartitionMetadata: () => range(P).map((partitionId) => ({ partitionId })) } as unknown as Cluster
  /** Member k owns the partitions p with p % 8 == k and is standby of those of member k + 1; a copy of each, with an offset of 10 digits, a snapshot id and a lag. */
  const stateOf = (k: number): MemberState => {
    const owned = range(P).filter((p) => p % ids.length === k)
    const standbys = range(P).filter((p) => p % ids.length === (k + 1) % ids.length)
    const copy = (p: number): LocalCopy => ({ topic: T, partition: p, position: 1_234_567_890n + BigInt(p), snapshot: `0000000003-${String(p).padStart(12, '0')}`, lag: { bytes: 1_048_576, snapshots: 1 } })
    return { generation: 41, owned: tps(owned), standbys: tps(standbys), copies: [...owned, ...standbys].map(copy) }
  }

  it("the group's metadata (every subscription and assignment, as the coordinator stores it) stays under Kafka's 1 MB default message size; the plan is balanced and a steady group moves nothing", async () => {
    const plans: ComputedAssignment[] = []
    const assigners = ids.map((id, k) => stateAwareAssigner({ advertise: () => stateOf(k), standbys: 1, onAssignment: (p) => plans.push(p) })({ cluster, groupId: 'g', logger }))
    const members = ids.map((memberId, k) => ({ memberId, memberMetadata: assigners[k]!.protocol({ topics: [T] }).metadata }))
    for (const m of members) expect(readSubscription(m.memberMetadata).value?.copies).toHaveLength(2 * P / ids.length)
    const result = await assigners[0]!.assign({ members, topics: [T] })
    const plan = plans[0]!
    expectBalanced(plan, P)
    expect(plan.moved).toEqual([])
    // Every partition has one standby, never its owner.
    const standbyOf = new Map<number, string[]>()
    for (const [id, m] of plan.members) for (const tp of m.standbys) standbyOf.set(tp.partition, [...(standbyOf.get(tp.partition) ?? []), id])
    expect(standbyOf.size).toBe(P)
    const owner = owners(plan)
    for (const [p, s] of standbyOf) {
      expect(s).toHaveLength(1)
      expect(s[0]).not.toBe(owner.get(p))
    }
    // The coordinator keeps all of it in one record of __consumer_offsets (message.max.bytes, 1,048,588 by default).
    const bytes = members.reduce((sum, m) => sum + m.memberMetadata.length, 0) + result.reduce((sum, r) => sum + r.memberAssignment.length, 0)
    expect(bytes).toBeLessThan(1_000_000)
  })

  it('one member of 8 leaves: only its 128 partitions move, and the member holding their standby copies takes them up to its share', () => {
    const members = ids.map((memberId, k) => ({ memberId, state: stateOf(k) })).filter((_, k) => k !== 3)
    const plan = computeAssignment({ members, partitions: { [T]: range(P) }, standbys: 1 })
    expectBalanced(plan, P)
    expect(plan.moved).toHaveLength(P / ids.length)
    for (const m of plan.moved) {
      expect(m.from).toBe(null)
      expect(m.partition % ids.length).toBe(3)
    }
    // The standby copies of member 3's partitions were member 2's (member k is standby of member k + 1's).
    const fromStandby = plan.moved.filter((m) => m.to === ids[2]).length
    expect(fromStandby).toBe(plan.members.get(ids[2]!)!.active.length - P / ids.length)
  })
})
