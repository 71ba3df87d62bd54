/**
 * What transformState and bootstrapState share: a temporary directory for
 * the stores, the target's claim around the whole run, and the new snapshot
 * of the built store, committed under that claim with a new lineage.
 */
import { randomBytes } from 'node:crypto'
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { Snapshotter } from '../snapshot/index.js'
import type { LineageRecord, Position } from '../store/index.js'
import type { ResolvedTarget } from './options.js'
import { TargetClaim } from './target-claim.js'
import type { TargetStore } from './target-store.js'
import type { TransformProgress } from './types.js'

/** Runs fn with a new directory under `parent`, removed afterwards whatever happens. */
export async function withWorkDir<T>(parent: string, fn: (dir: string) => Promise<T>): Promise<T> {
  await mkdir(parent, { recursive: true })
  const dir = await mkdtemp(join(parent, 'tidemark-transform-'))
  try {
    return await fn(dir)
  } finally {
    await rm(dir, { recursive: true, force: true, maxRetries: 3 })
  }
}

/**
 * Holds the target's claim while fn runs, then releases it: with the key of
 * the snapshot fn committed (the next owner starts from it at once), or
 * without one after a failure, whose error is the one reported.
 */
export async function withTargetClaim<T>(t: ResolvedTarget, replace: boolean, what: string, fn: (claim: TargetClaim) => Promise<{ value: T; lastSnapshot: string }>): Promise<T> {
  const claim = await TargetClaim.take(t.snapshotStore, t.layout, { replace, owner: t.owner, sourceNote: what })
  report(t, { phase: 'claimed', job: t.layout.job, partition: t.layout.partition, epoch: claim.claim.epoch })
  let done: { value: T; lastSnapshot: string }
  try {
    done = await fn(claim)
  } catch (err) {
    await claim.release(undefined).catch(() => false)
    throw err
  }
  await claim.release(done.lastSnapshot)
  return done.value
}

export interface Published {
  snapshot: { id: string; key: string; epoch: number }
  positions: Position[]
  lineage: string
}

/**
 * Gives the built store its positions and a new lineage, then commits its
 * snapshot, a full one, as the target's newest: under the claim's epoch,
 * with the claim checked right before the manifest (a transform whose claim
 * was taken meanwhile commits nothing).
 */
export async function publishTarget(t: ResolvedTarget, claim: TargetClaim, target: TargetStore, positions: readonly Position[], origin: LineageRecord['origin'], dir: string): Promise<Published> {
  const lineage: LineageRecord = { id: randomBytes(8).toString('hex'), createdAt: new Date().toISOString(), origin }
  await target.finish(positions, lineage)
  const snapshotter = new Snapshotter({
    snapshotStore: t.snapshotStore,
    partitionStore: target.store,
    job: t.layout.job,
    partition: t.layout.partition,
    epoch: claim.claim.epoch,
    beforeCommit: () => claim.check(),
    // The job's owners keep its retention; a transform only adds its snapshot.
    gcAfterSnapshot: false,
    checkpointDir: join(dir, 'checkpoints'),
  })
  try {
    const result = await snapshotter.takeSnapshot({ full: true })
    report(t, { phase: 'snapshot', id: result.id })
    return { snapshot: { id: result.id, key: result.key, epoch: result.epoch }, positions: result.positions, lineage: lineage.id }
  } finally {
    await snapshotter.close()
  }
}

export function report(t: ResolvedTarget, progress: TransformProgress): void {
  t.onProgress?.(progress)
}
