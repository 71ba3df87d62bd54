/**
 * Scale-out 3 -> 4 of a StatefulConsumer job with warm-up on (and standbys
 * off), on librdkafka's mock and file-system snapshots.
 *
 *   npm run bench -- scaleout [--partitions 12] [--size-mb 24] [--large-partitions 4] [--large-size-mb 512] [--max-warmups 3] [--rounds 1] [--skip-large 1]
 *
 * Three members run --partitions partitions of --size-mb MiB each under a
 * steady trickle of records, with a scheduled snapshot of each partition
 * every 2 s; a fourth joins with an empty state directory. Per run:
 * - moved: partitions whose owner changed; movedMinimum: the fewest a
 *   balanced assignment must move (3 of 12);
 * - stayedReopened: partitions that did not move but were closed, reopened
 *   or restored meanwhile;
 * - bytesDownloadedAtMove: what the new owner downloaded when the moved
 *   partitions were assigned to it (its warm-up copies' own downloads, done
 *   while the old owners kept processing, are warmupBytes);
 *   movedStateBytes: the moved partitions' stores;
 * - tidemarkGapMsMax: from the assignment that gave the new owner a moved
 *   partition to its first commit of it (the claim hand-over, the restore of
 *   the hand-off snapshot over the warm copy, the seek and fetch);
 *   groupGapMsMax: from the old owner's last commit of a moved partition to
 *   the new owner's first (the group's join round included);
 * - partitionSecondsLost (also groupPartitionSecondsLost, as `rolling`
 *   names it): per partition, every gap between commits beyond 1 s from the
 *   join to the end, summed; groupLostBound: 2 × moved × movedGapMsMax (the
 *   same as groupGapMsMax) in seconds, its target;
 * - stayedGapMsMax: the partitions that did not move, their longest time
 *   between two commits from the join to the end; steadyGapMsMax: theirs in
 *   the 30 s before the join;
 * - rebalances: assignments the new member received.
 * The same scale-out with --large-partitions partitions of --large-size-mb
 * MiB prints tidemarkGapMsMaxLarge: recovery must not grow with state.
 * --skip-large 1 skips it.
 */
import { join } from 'node:path'
import { saveFigures } from './_figures.js'
import { dirBytes, gapAfterAssignment, GroupBench, longestCommitGap, partitionSecondsLost, steady, stickyMinimum, now, topicPartition, type GroupEvent, threadPoolSize } from './_group.js'
import { emit, intFlags, loadAvg, round } from './_util.js'

interface Outcome {
  moved: number
  movedMinimum: number
  stayedReopened: number
  bytesDownloadedAtMove: number
  warmupBytes: number
  movedStateBytes: number
  tidemarkGapMsMax: number
  /** Of that gap: the wait for the old owner's release (its hand-off snapshot), and the restore. */
  claimWaitMsMax: number
  restoreMsMax: number
  groupGapMsMax: number
  partitionSecondsLost: number
  groupPartitionSecondsLost: number
  movedGapMsMax: number
  groupLostBound: number
  stayedGapMsMax: number
  steadyGapMsMax: number
  rebalances: number
}

async function scaleOut(partitions: number, sizeMb: number, maxWarmups: number): Promise<Outcome> {
  return GroupBench.run('scaleout', partitions, sizeMb, async (bench) => {
    const common = { warmup: { maxWarmups }, snapshotEveryMs: 2000 }
    await bench.startTogether(['a', 'b', 'c'], common, { balanced: (running) => running >= Math.floor(partitions / 3) })
    const before = bench.owners()
    const owned = ['a', 'b', 'c'].map((m) => [...before.values()].filter((o) => o === m).length)
    const movedMinimum = stickyMinimum(owned, 1, partitions)
    const steadyFrom = await steady(bench)
    bench.log(`three members hold ${owned.join('/')}; the fourth joins`)

    const joinAt = now()
    await bench.member(bench.spec('d', common))
    const share = Math.floor(partitions / 4)
    await bench.until('the fourth member to run its share', () => bench.running('d').length >= share)
    await bench.settled('every partition to catch up')
    const after = bench.owners()
    const movedPartitions = bench.partitions.filter((p) => after.get(p) !== before.get(p))
    await bench.committedAtOwners('each moved partition to commit at its new owner', movedPartitions)
    const end = now()
    const since = bench.events.filter((e) => e.at >= joinAt)
    const startsOf = (p: number): Array<Extract<GroupEvent, { t: 'started' }>> => since.filter((e): e is Extract<GroupEvent, { t: 'started' }> => e.t === 'started' && e.partition === p)
    const stayedReopened = bench.partitions.filter((p) => !movedPartitions.includes(p) && (startsOf(p).length > 0 || since.some((e) => e.t === 'closed' && e.partition === p))).length
    const gaps: number[] = []
    const groupGaps: number[] = []
    let bytesDownloadedAtMove = 0
    let claimWaitMsMax = 0
    let restoreMsMax = 0
    for (const p of movedPartitions) {
      const start = startsOf(p).find((s) => s.member === after.get(p))!
      bytesDownloadedAtMove += start.bytesDownloaded
      claimWaitMsMax = Math.max(claimWaitMsMax, start.claimWaitMs)
      restoreMsMax = Math.max(restoreMsMax, start.restoreMs)
      const assignedAt = Math.max(...since.filter((e) => e.t === 'assignment' && e.member === start.member && e.at <= start.at && e.partitions.includes(p)).map((e) => e.at))
      gaps.push(gapAfterAssignment(bench.events, start.member, p, assignedAt))
      const firstNew = bench.events.find((e) => e.t === 'commit' && e.member === start.member && e.partition === p && e.at >= start.at)!
      const lastOld = bench.events.filter((e) => e.t === 'commit' && e.partition === p && e.member === before.get(p) && e.at <= firstNew.at).at(-1)
      groupGaps.push(firstNew.at - (lastOld?.at ?? joinAt))
    }
    let movedStateBytes = 0
    for (const p of movedPartitions) {
      const tp = topicPartition(bench.shared, p)
      movedStateBytes += await dirBytes(join(bench.dir.path, after.get(p)!, `${tp.topic}-${tp.partition}`))
    }
    const warmupBytes = since.filter((e) => e.t === 'synced' && e.member === 'd').reduce((sum, e) => sum + (e.t === 'synced' ? e.bytesDownloaded : 0), 0)
    const stayed = bench.partitions.filter((p) => !movedPartitions.includes(p))
    const lost = round(partitionSecondsLost(bench.events, bench.partitions, joinAt, end), 2)
    const movedGapMsMax = round(Math.max(0, ...groupGaps), 1)
    return {
      moved: movedPartitions.length,
      movedMinimum,
      stayedReopened,
      bytesDownloadedAtMove,
      warmupBytes,
      movedStateBytes,
      tidemarkGapMsMax: round(Math.max(0, ...gaps), 1),
      claimWaitMsMax: round(claimWaitMsMax, 1),
      restoreMsMax: round(restoreMsMax, 1),
      groupGapMsMax: movedGapMsMax,
      partitionSecondsLost: lost,
      groupPartitionSecondsLost: lost,
      movedGapMsMax,
      groupLostBound: round(2 * movedPartitions.length * movedGapMsMax / 1000, 2),
      stayedGapMsMax: round(longestCommitGap(bench.events, stayed, joinAt, end), 1),
      steadyGapMsMax: round(longestCommitGap(bench.events, stayed, steadyFrom, joinAt), 1),
      rebalances: since.filter((e) => e.t === 'assignment' && e.member === 'd').length,
    }
  })
}

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { partitions: 12, 'size-mb': 24, 'large-partitions': 4, 'large-size-mb': 512, 'max-warmups': 3, rounds: 1, 'skip-large': 0 })
  const loadAvgAtStart = loadAvg()
  for (let r = 0; r < opts.rounds; r++) {
    const small = await scaleOut(opts.partitions, opts['size-mb'], opts['max-warmups'])
    const large = opts['skip-large'] === 0 ? await scaleOut(opts['large-partitions'], opts['large-size-mb'], opts['max-warmups']) : undefined
    const result = {
      bench: 'scaleout',
      partitions: opts.partitions,
      sizeMb: opts['size-mb'],
      maxWarmups: opts['max-warmups'],
      ...small,
      ...(large === undefined ? {} : {
        largePartitions: opts['large-partitions'],
        largeSizeMb: opts['large-size-mb'],
        tidemarkGapMsMaxLarge: large.tidemarkGapMsMax,
        claimWaitMsMaxLarge: large.claimWaitMsMax,
        restoreMsMaxLarge: large.restoreMsMax,
        movedLarge: large.moved,
        bytesDownloadedAtMoveLarge: large.bytesDownloadedAtMove,
        movedStateBytesLarge: large.movedStateBytes,
      }),
      uvThreadPoolSize: threadPoolSize(),
      loadAvgAtStart,
      loadAvgAtEnd: loadAvg(),
    }
    emit(result)
    saveFigures('scaleout', args, result)
  }
}
