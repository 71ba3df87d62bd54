/**
 * Which jobs and partitions a snapshot store holds, for `tidemark jobs` and
 * for the hint of a command whose --job or --partition finds nothing: a
 * mistyped job name must not read as a partition whose snapshots are gone.
 */
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { isTidemarkError, TidemarkError } from '../errors.js'
import { MEMBERS_FOLDER } from '../ownership/member-lease.js'
import { listManifests } from '../snapshot/catalog.js'
import { SnapshotLayout } from '../snapshot/layout.js'

export interface PartitionHolding {
  job: string
  partition: string
  /** Its snapshots (manifests); 0 for a partition that holds only a claim or data objects. */
  snapshots: number
  /** The newest snapshot's id. */
  newest: string | undefined
}

/**
 * Every `<job>/<partition>/` of the store (of one job), in key order, with
 * its snapshot count. One listing of one key per partition (it skips past
 * the partition's keys), then one of each partition's manifests: data
 * objects are never listed, however many there are.
 */
export async function listPartitions(store: SnapshotStore, ofJob?: string): Promise<PartitionHolding[]> {
  const found: Array<{ job: string; partition: string }> = []
  const prefix = ofJob === undefined ? '' : `${ofJob}/`
  let startAfter: string | undefined
  for (;;) {
    let next: string | undefined
    for await (const info of store.list(prefix, { limit: 1, ...(startAfter === undefined ? {} : { startAfter }) })) next = info.key
    if (next === undefined) break
    const [job, partition] = next.split('/')
    if (partition === undefined || next.split('/').length < 3) {
      // A key outside the layout (no <job>/<partition>/ above it): not a partition.
      startAfter = next
      continue
    }
    // A job's member leases (src/ownership) sit beside its partitions.
    if (partition !== MEMBERS_FOLDER) found.push({ job: job!, partition })
    // Every key of `<job>/<partition>/` sorts before `<job>/<partition>0` ('0' follows '/').
    startAfter = `${job}/${partition}0`
  }
  const holdings: PartitionHolding[] = []
  for (const { job, partition } of found) {
    let layout: SnapshotLayout
    try {
      layout = new SnapshotLayout(job, partition)
    } catch {
      continue // not a name Tidemark writes
    }
    const refs = await listManifests(store, layout)
    holdings.push({ job, partition, snapshots: refs.length, newest: refs[0]?.id })
  }
  return holdings
}

/** At most this many partitions are named in a hint; `tidemark jobs` lists them all. */
const HINT_PARTITIONS = 10

/**
 * What the store does hold, for a command that found no snapshots of the
 * job and partition it was given: the jobs and partitions with snapshots,
 * and the command that lists them all. A partition number given for a job
 * whose partitions are a consumer group's (`--partition 0` where the store
 * holds `lines-0`) is answered with those names first.
 */
export async function holdingsHint(store: SnapshotStore, url: string, wanted?: SnapshotLayout): Promise<string> {
  const held = (await listPartitions(store)).filter((h) => h.snapshots > 0)
  if (held.length === 0) return `${url} holds no snapshots of any job`
  const byJob = new Map<string, string[]>()
  for (const h of held.slice(0, HINT_PARTITIONS)) byJob.set(h.job, [...(byJob.get(h.job) ?? []), h.partition])
  const named = [...byJob].map(([job, partitions]) => `job ${job} (partition${partitions.length === 1 ? '' : 's'} ${partitions.join(', ')})`).join(', ')
  const more = held.length > HINT_PARTITIONS ? ` and ${held.length - HINT_PARTITIONS} more partitions` : ''
  const keyed = wanted === undefined || !/^\d+$/.test(wanted.partition)
    ? []
    : held.filter((h) => h.job === wanted.job && h.partition.endsWith(`-${wanted.partition}`)).map((h) => `--partition ${h.partition}`)
  const meant = keyed.length === 0 ? '' : `a consumer group's partitions are named <topic>-<partition>: ${keyed.join(' or ')}; `
  return `${meant}the store holds snapshots of ${named}${more}; \`tidemark jobs ${shellWord(url)}\` lists them`
}

/** A word as a POSIX shell reads it back: quoted when it holds anything but plain characters (an s3:// URL's `&`). */
export function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`
}

/**
 * restoreSnapshot's TIDEMARK_SNAPSHOT_NOT_FOUND told for the command line:
 * the API option it names (allowEmpty) as the command's flag, or not at all
 * for a command without one; and, when the partition has no snapshot at all,
 * what the store holds. Other errors pass as they are.
 */
export async function explainNotFound(err: unknown, store: SnapshotStore, url: string, layout: SnapshotLayout, allowEmptyFlag?: string): Promise<unknown> {
  if (!isTidemarkError(err, 'TIDEMARK_SNAPSHOT_NOT_FOUND')) return err
  let message = err.message.replace('; pass allowEmpty to start from an empty state', allowEmptyFlag === undefined ? '' : `; ${allowEmptyFlag} restores an empty store instead`)
  if ((await listManifests(store, layout)).length === 0) message += `; ${await holdingsHint(store, url, layout)}`
  return new TidemarkError(err.code, message, { cause: err, details: err.details, retriable: err.retriable })
}
