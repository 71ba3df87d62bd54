/**
 * Failover: SIGKILL of one of 4 StatefulConsumer members, with one warm
 * standby per partition and, beside it, without standbys. librdkafka's mock,
 * file-system snapshots.
 *
 *   npm run bench -- failover [--partitions 12] [--size-mb 24] [--rounds 1]
 *
 * Four members (the one killed runs in a child process) hold --partitions
 * partitions of --size-mb MiB under a steady trickle of records, with a
 * scheduled snapshot of each partition every 2 s (so the killed member's
 * partitions have seconds of records to replay after their last snapshot).
 * With standbys, the kill waits until every standby copy has synced once.
 * Per mode (standbys: 1, then 0):
 * - tidemarkGapMsMax: from the assignment that gave a survivor one of the
 *   dead member's partitions to its first commit of it (the claim, the
 *   restore from the standby copy or from the snapshot store, the replay
 *   since the last snapshot);
 * - waitedForDeadMs: the longest wait for the dead owner's release
 *   (partition-started's claimWaitMs): 0 when the assignor said it left;
 * - moved, movedMinimum: partitions whose owner changed, and the dead
 *   member's partitions (the fewest that must move);
 * - bytesDownloaded: what the survivors downloaded to take them;
 * - detectMs: from the SIGKILL to that assignment (the group's session
 *   timeout and join round; the mock's, not Tidemark's);
 * - stayedGapMsMax: the survivors' own partitions, their longest time
 *   between two commits from the kill to the end; steadyGapMsMax: theirs in
 *   the 30 s before the kill.
 */
import { saveFigures } from './_figures.js'
import { gapAfterAssignment, GroupBench, longestCommitGap, now, steady, threadPoolSize } from './_group.js'
import { emit, intFlags, loadAvg, round } from './_util.js'

interface Outcome {
  tidemarkGapMsMax: number
  waitedForDeadMs: number
  moved: number
  movedMinimum: number
  bytesDownloaded: number
  detectMsMax: number
  stayedGapMsMax: number
  steadyGapMsMax: number
}

async function failover(partitions: number, sizeMb: number, standbys: number): Promise<Outcome> {
  return GroupBench.run('failover', partitions, sizeMb, async (bench) => {
    await bench.startTogether(['v', 'a', 'b', 'c'], { standbys, snapshotEveryMs: 2000 }, { child: 'v', balanced: (running) => running === partitions / 4 })
    const victim = bench.members.get('v')!
    if (standbys > 0) {
      const syncedAfter = now()
      await bench.until('every standby copy to sync', () => bench.partitions.every((p) => bench.events.some((e) => e.t === 'synced' && e.partition === p && e.at >= syncedAfter)))
    }
    const steadyFrom = await steady(bench)
    const before = bench.owners()
    const dead = bench.partitions.filter((p) => before.get(p) === 'v')
    bench.log(`killing v, which runs ${dead.join(',')}`)
    const killedAt = now()
    victim.kill!('SIGKILL')
    bench.members.delete('v')
    await bench.until('the survivors to run every partition', () => {
      const owners = bench.owners()
      return dead.every((p) => owners.has(p) && owners.get(p) !== 'v')
    })
    await bench.settled('every partition to catch up')
    await bench.committedAtOwners('each moved partition to commit at its new owner', dead)
    const end = now()
    const after = bench.owners()
    const since = bench.events.filter((e) => e.at >= killedAt)
    const stayed = bench.partitions.filter((p) => !dead.includes(p))
    const gaps: number[] = []
    const detect: number[] = []
    let waited = 0
    let bytes = 0
    for (const p of dead) {
      const owner = after.get(p)!
      const start = since.find((e) => e.t === 'started' && e.member === owner && e.partition === p)
      if (start?.t !== 'started') throw new Error(`partition ${p}: no start at ${owner} after the kill`)
      waited = Math.max(waited, start.claimWaitMs)
      bytes += start.bytesDownloaded
      const assignedAt = Math.max(...since.filter((e) => e.t === 'assignment' && e.member === owner && e.at <= start.at && e.partitions.includes(p)).map((e) => e.at))
      gaps.push(gapAfterAssignment(bench.events, owner, p, assignedAt))
      detect.push(assignedAt - killedAt)
    }
    return {
      tidemarkGapMsMax: round(Math.max(...gaps), 1),
      waitedForDeadMs: round(waited, 1),
      moved: bench.partitions.filter((p) => after.get(p) !== before.get(p)).length,
      movedMinimum: dead.length,
      bytesDownloaded: bytes,
      detectMsMax: round(Math.max(...detect), 1),
      stayedGapMsMax: round(longestCommitGap(bench.events, stayed, killedAt, end), 1),
      steadyGapMsMax: round(longestCommitGap(bench.events, stayed, steadyFrom, killedAt), 1),
    }
  })
}

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { partitions: 12, 'size-mb': 24, rounds: 1 })
  const loadAvgAtStart = loadAvg()
  for (let r = 0; r < opts.rounds; r++) {
    const warm = await failover(opts.partitions, opts['size-mb'], 1)
    const cold = await failover(opts.partitions, opts['size-mb'], 0)
    const result = {
      bench: 'failover',
      partitions: opts.partitions,
      sizeMb: opts['size-mb'],
      ...warm,
      // Flat, so that readme-bench reads them like the others.
      noStandbysTidemarkGapMsMax: cold.tidemarkGapMsMax,
      noStandbysWaitedForDeadMs: cold.waitedForDeadMs,
      noStandbysMoved: cold.moved,
      noStandbysBytesDownloaded: cold.bytesDownloaded,
      noStandbysDetectMsMax: cold.detectMsMax,
      noStandbysStayedGapMsMax: cold.stayedGapMsMax,
      noStandbysSteadyGapMsMax: cold.steadyGapMsMax,
      uvThreadPoolSize: threadPoolSize(),
      loadAvgAtStart,
      loadAvgAtEnd: loadAvg(),
    }
    emit(result)
    saveFigures('failover', args, result)
  }
}
