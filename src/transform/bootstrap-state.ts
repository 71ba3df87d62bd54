import { join } from 'node:path'
import { applyToEntry } from './apply.js'
import { resolveBootstrapOptions } from './options.js'
import { publishTarget, report, withTargetClaim, withWorkDir } from './publish.js'
import { TargetStore } from './target-store.js'
import type { BootstrapStateOptions, TransformResult } from './types.js'

/**
 * Bootstraps a job's partition from records instead of another job's
 * snapshot: each `{ state, key, subKey?, value }` (through `transform`, if
 * given) is written into a new store, which is published as the
 * partition's newest snapshot with the given positions, where the job then
 * resumes. The same machinery as transformState: the target's claim, a
 * temporary store, a snapshot with a new lineage; a partition that has
 * snapshots is refused unless `to.replace`. readStateRecords() reads the
 * records from a JSON lines file, such as `tidemark state dump` prints.
 */
export async function bootstrapState(options: BootstrapStateOptions): Promise<TransformResult> {
  const r = resolveBootstrapOptions(options)
  return withWorkDir(r.workDir, (dir) => withTargetClaim(r, r.replace ?? false, 'a bootstrap', async (claim) => {
    let read = 0
    const target = await TargetStore.create(join(dir, 'target'), r.states, [], {
      batchSize: r.batchSize,
      onBatch: (written) => report(r, { phase: 'transform', read, written }),
    })
    try {
      for await (const record of r.records) {
        read++
        if (r.transform === undefined) await target.write(record, undefined)
        else await applyToEntry(r.transform, record, target)
      }
      const published = await publishTarget(r, claim, target, r.positions, { records: true }, dir)
      const result: TransformResult = {
        job: r.layout.job,
        partition: r.layout.partition,
        ...published,
        source: { records: true },
        read,
        written: target.puts,
        states: await target.counts(),
      }
      return { value: result, lastSnapshot: published.snapshot.key }
    } finally {
      await target.close()
    }
  }))
}
