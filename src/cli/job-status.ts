/**
 * What `tidemark status` reports of a job, read from its snapshot store:
 * per partition, who holds its claim and for how long, its newest snapshot
 * and how many are kept; per process, its member lease. Everything is read
 * as it is now (the store is not locked), and leases are judged by this
 * host's clock, as an acquirer on this host would judge them.
 */
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { readClaim } from '../ownership/claim.js'
import { MEMBERS_FOLDER, memberKey, readMemberLease, type MemberLeaseRecord } from '../ownership/member-lease.js'
import type { ClaimRecord } from '../ownership/record.js'
import { listManifests, readManifest } from '../snapshot/catalog.js'
import { SnapshotLayout } from '../snapshot/layout.js'
import type { Position } from '../store/position.js'
import { listPartitions } from './holdings.js'

/**
 * held: the lease runs (or the claim has none, or its member lease runs);
 * expired: the lease (or the member lease) ran out, or the member lease is
 * gone or released: the next acquirer takes it; released: let go by its
 * holder; unreadable: the object is not a claim (or member lease) this
 * version reads.
 */
export type LeaseState = 'held' | 'expired' | 'released' | 'unreadable'

export interface PartitionOwner {
  state: LeaseState
  /** Why the object is unreadable. */
  problem?: string
  epoch?: number
  owner?: ClaimRecord['owner']
  /** The member lease id the claim holds by. */
  member?: string
  generation?: number
  /** When the lease (the claim's own, or its member lease's) runs out: null for a claim held without one. */
  leaseUntil?: number | null
  /** leaseUntil less now, by this host's clock; negative once run out. */
  leaseLeftMs?: number | null
  takenAt?: number
  releasedAt?: number
}

export interface PartitionStatus {
  partition: string
  /** The claim, or null when the partition has none (nobody took it with ownership on). */
  owner: PartitionOwner | null
  /** The newest snapshot that reads, or null when none does. */
  newest: { id: string; positions: readonly Position[]; createdAt: string; ageMs: number; stateBytes: number; full: boolean } | null
  /** Newer manifests than `newest` that do not read, with why. */
  unreadable: Array<{ id: string; message: string }>
  /** The snapshots (manifests) kept. */
  snapshots: number
}

export interface MemberStatus {
  id: string
  state: LeaseState
  problem?: string
  owner?: MemberLeaseRecord['owner']
  leaseMs?: number
  leaseUntil?: number
  leaseLeftMs?: number
  startedAt?: number
  renewedAt?: number
  /** The partitions whose claim holds by this lease. */
  partitions: string[]
}

export interface JobStatus {
  job: string
  /** The time (ms since the Unix epoch, this host's clock) lease and snapshot ages are measured from. */
  at: number
  partitions: PartitionStatus[]
  members: MemberStatus[]
}

export async function readJobStatus(store: SnapshotStore, job: string, now: number): Promise<JobStatus> {
  const members = await readMembers(store, job, now)
  const byKey = new Map(members.map((m) => [memberKey(job, m.id), m]))
  const partitions: PartitionStatus[] = []
  for (const { partition } of await listPartitions(store, job)) {
    const layout = new SnapshotLayout(job, partition)
    const owner = await readOwner(store, layout, byKey, now)
    const refs = await listManifests(store, layout)
    const unreadable: PartitionStatus['unreadable'] = []
    let newest: PartitionStatus['newest'] = null
    for (const ref of refs) {
      try {
        const m = await readManifest(store, layout, ref)
        newest = { id: m.id, positions: m.positions, createdAt: m.createdAt, ageMs: now - Date.parse(m.createdAt), stateBytes: m.stateBytes, full: m.full }
        break
      } catch (err) {
        unreadable.push({ id: ref.id, message: (err as Error).message })
      }
    }
    partitions.push({ partition, owner, newest, unreadable, snapshots: refs.length })
  }
  return { job, at: now, partitions, members }
}

async function readMembers(store: SnapshotStore, job: string, now: number): Promise<MemberStatus[]> {
  const prefix = `${job}/${MEMBERS_FOLDER}/`
  const out: MemberStatus[] = []
  for await (const info of store.list(prefix)) {
    if (!info.key.endsWith('.json') || info.key.slice(prefix.length).includes('/')) continue
    const id = info.key.slice(prefix.length, -'.json'.length)
    const read = await readMemberLease(store, info.key)
    if (read === undefined) continue // removed since the listing
    if ('problem' in read) {
      out.push({ id, state: 'unreadable', problem: read.problem, partitions: [] })
      continue
    }
    const r = read.record
    out.push({
      id, state: r.leaseUntil === 0 ? 'released' : r.leaseUntil > now ? 'held' : 'expired',
      owner: r.owner, leaseMs: r.leaseMs, leaseUntil: r.leaseUntil, leaseLeftMs: r.leaseUntil - now, startedAt: r.startedAt,
      ...(r.renewedAt === undefined ? {} : { renewedAt: r.renewedAt }), partitions: [],
    })
  }
  return out
}

async function readOwner(store: SnapshotStore, layout: SnapshotLayout, members: Map<string, MemberStatus>, now: number): Promise<PartitionOwner | null> {
  const stored = await readClaim(store, layout.job, layout.partition)
  if (stored === undefined) return null
  if (stored.record === undefined) return { state: 'unreadable', problem: stored.problem ?? 'unreadable' }
  const r = stored.record
  const base = {
    epoch: r.epoch, owner: r.owner, takenAt: r.takenAt,
    ...(r.generation === undefined ? {} : { generation: r.generation }),
    ...(r.releasedAt === undefined ? {} : { releasedAt: r.releasedAt }),
  }
  if (r.leaseUntil === 0) return { state: 'released', ...base, leaseUntil: 0, leaseLeftMs: null }
  if (r.member !== undefined) {
    // A claim without a lease of its own holds while its member lease does.
    const member = members.get(r.member)
    member?.partitions.push(layout.partition)
    const id = member?.id ?? r.member
    const until = member?.leaseUntil
    const state: LeaseState = member?.state === 'held' ? 'held' : 'expired'
    return { state, ...base, member: id, leaseUntil: until ?? null, leaseLeftMs: until === undefined ? null : until - now }
  }
  if (r.leaseUntil === null) return { state: 'held', ...base, leaseUntil: null, leaseLeftMs: null }
  return { state: r.leaseUntil > now ? 'held' : 'expired', ...base, leaseUntil: r.leaseUntil, leaseLeftMs: r.leaseUntil - now }
}
