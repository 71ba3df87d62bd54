import { join } from 'node:path'
import { OUTBOX_STATE } from '../outputs/index.js'
import type { StateDefinition } from '../store/index.js'
import { applyTransform, type ReadCount } from './apply.js'
import { resolveTransformOptions, type ResolvedTransform } from './options.js'
import { publishTarget, report, withTargetClaim, withWorkDir } from './publish.js'
import { SourceStore } from './source-store.js'
import { TargetStore } from './target-store.js'
import type { TransformResult, TransformStateOptions } from './types.js'

/**
 * Tidemark's State Processor: reads a job's partition at a snapshot (or as
 * of an offset), runs a function per key or per state over it that may
 * rename, re-key, split, merge or drop, and writes the result as a new
 * snapshot of the target partition, with the source's positions, so that a
 * job started on it resumes exactly there (docs/state-evolution.md).
 *
 * The target's claim is taken first. Into another job (a bootstrap of a new
 * job from an old one's state) the target must have no snapshots unless
 * `to.replace`; into the same job, or with `to.replace`, the claim is taken
 * by force: a running owner stops with TIDEMARK_OWNERSHIP_LOST, and the new
 * snapshot, at the claim's higher epoch, is the partition's newest. The
 * claim is released at the end (with the snapshot named in it), so the next
 * owner starts from it at once. The new snapshot has a new lineage: a local
 * store of the state before is never used as it is.
 *
 * The source is restored into a temporary directory and only read. What
 * the transform writes is committed into a second temporary store in
 * batches, and only its snapshot is published: a failure anywhere leaves the
 * target's snapshots as they were (and its claim released).
 */
export async function transformState(options: TransformStateOptions): Promise<TransformResult> {
  const r = resolveTransformOptions(options)
  const sameStore = r.from.snapshotStore === r.snapshotStore || r.from.snapshotStore.url === r.snapshotStore.url
  const sameJob = sameStore && r.from.layout.job === r.layout.job
  const inPlace = sameJob && r.from.layout.partition === r.layout.partition
  const replace = r.replace ?? inPlace
  return withWorkDir(r.workDir, (dir) => withTargetClaim(r, replace, 'a transform', async (claim) => {
    const source = await SourceStore.open(r, join(dir, 'source'), (p) => report(r, p))
    try {
      // Records a job had not delivered are its outputs, under its ids: only
      // the same job delivers them (as a replay does, another job drops them).
      const internal = source.internal.filter((def) => sameJob || def.name !== OUTBOX_STATE.name)
      const count: ReadCount = { read: 0 }
      const target = await TargetStore.create(join(dir, 'target'), r.states, internal as StateDefinition[], {
        batchSize: r.batchSize,
        onBatch: (written) => report(r, { phase: 'transform', read: count.read, written }),
      })
      try {
        await applyTransform(r, source, target, internal, count)
        const published = await publishTarget(r, claim, target, source.positions, origin(r, source), dir)
        const result: TransformResult = {
          job: r.layout.job,
          partition: r.layout.partition,
          ...published,
          source: { job: r.from.layout.job, partition: r.from.layout.partition, snapshot: source.snapshot, offset: r.from.offset ?? null, replayed: source.replayed },
          read: count.read,
          written: target.puts,
          states: await target.counts(),
        }
        return { value: result, lastSnapshot: published.snapshot.key }
      } finally {
        await target.close()
      }
    } finally {
      await source.close()
    }
  }))
}

function origin(r: ResolvedTransform, source: SourceStore): { job: string; partition: string; snapshot: string | null; offset: string | null } {
  return { job: r.from.layout.job, partition: r.from.layout.partition, snapshot: source.snapshot, offset: r.from.offset === undefined ? null : r.from.offset.toString() }
}
