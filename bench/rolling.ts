/**
 * Rolling restart of a 3-member StatefulConsumer job with the members' state
 * directories: each member in turn closes and starts again. librdkafka's
 * mock, file-system snapshots.
 *
 *   npm run bench -- rolling [--partitions 12] [--size-mb 24] [--rounds 3]
 *
 * Tidemark's way: close({ leaveGroup: false }) and the state-aware
 * assignor, so the restarted member's join starts the one rebalance and its
 * partitions come back to its stores. The baseline, in the same run: what
 * kafkajs's round-robin assignor and a plain close() do (the restart leaves
 * and joins again, and partitions move away and back). Fields:
 * - partitions, partitionsHome: partitions that end on the member they
 *   started on;
 * - bytesDownloaded: restored from the snapshot store during the restarts;
 *   stateBytes: the job's stores;
 * - partitionSecondsLost: Tidemark's part, summed over every assignment
 *   and partition it gave to a member: the time a record waited between the
 *   assignment and the partition's next commit at that member (or that
 *   member's next assignment: then the group had started another round, its
 *   part). A partition the member already ran, and ran on through the round
 *   (in its previous assignment, not closed since), is not counted: it never
 *   stopped, and the wait after the assignment is its usual pipeline
 *   latency, not a cost of the restart (stayedGapMsMax measures those
 *   partitions: a stall there misses that target). Until the group rounds
 *   stopped every partition (issue 39), each kept partition resumed after
 *   the round, and its resumption was counted here. The
 *   wait starts at the assignment, or when the first record the partition
 *   had not committed yet was sent, whichever is later: until a record
 *   arrives, a resumed partition has nothing to do, and the trickle's
 *   inter-arrival time is the source's, not Tidemark's.
 *   partitionSecondsLostToCommit: the same from the assignment itself,
 *   the trickle's wait included (for information).
 *   roundRobinPartitionSecondsLost (and ...ToCommit): the same for the
 *   baseline. groupPartitionSecondsLost (and
 *   roundRobinGroupPartitionSecondsLost): every gap between a partition's
 *   commits beyond 1 s, the group's part included.
 * - stayedGapMsMax (Tidemark's way only): at each restart, the partitions
 *   of the other members, their longest time between two commits from the
 *   close to the end of the restart; steadyGapMsMax: every partition's in
 *   the 30 s before the first restart.
 * One JSON object for the run: each figure is the median over `--rounds`
 * interleaved pairs (ours, then round-robin), partitionsHome the fewest and
 * bytesDownloaded the most of any round; lostRatio (the target) is the
 * median of the per-round ratios partitionSecondsLost ÷
 * roundRobinPartitionSecondsLost, and ...Rounds hold each round's figures.
 */
import { saveFigures } from './_figures.js'
import { GroupBench, longestCommitGap, now, partitionSecondsLost, steady, type GroupEvent, threadPoolSize } from './_group.js'
import { emit, intFlags, loadAvg, median, pairedRatio, prefixed, round } from './_util.js'

interface Outcome {
  partitions: number
  partitionsHome: number
  bytesDownloaded: number
  stateBytes: number
  partitionSecondsLost: number
  partitionSecondsLostToCommit: number
  groupPartitionSecondsLost: number
  stayedGapMsMax: number
  steadyGapMsMax: number
}

/**
 * Tidemark's part: each (assignment, partition it gave to the member) until
 * the partition's next commit there, or the member's next assignment; from
 * the assignment, or with `sentAt` from when the first record not yet
 * committed was sent, if that is later.
 */
export function tidemarkSecondsLost(events: readonly GroupEvent[], from: number, sentAt?: ReadonlyMap<number, ReadonlyMap<bigint, number>>): number {
  let lost = 0
  // GROUP_TRACE=1: each part of the sum, to tell the restarted member's starts from the partitions that ran on.
  const trace = process.env.GROUP_TRACE === '1' && sentAt !== undefined
  for (const [i, a] of events.entries()) {
    if (a.t !== 'assignment' || a.at < from) continue
    const nextRound = events.slice(i + 1).find((e) => e.t === 'assignment' && e.member === a.member)?.at ?? Infinity
    for (const p of a.partitions) {
      if (keptRunning(events, i, p)) {
        if (trace) process.stderr.write(`[lost] ${a.member} p${p} assigned +${Math.round(a.at - from)} ms: kept running, not counted\n`)
        continue
      }
      const commit = events.slice(i + 1).find((e) => e.t === 'commit' && e.member === a.member && e.partition === p)?.at ?? Infinity
      const until = Math.min(commit, nextRound)
      if (until === Infinity) continue
      let waitFrom = a.at
      if (sentAt !== undefined) {
        // A commit carries the offset of the last record it applied: the record after the last one before the assignment waits next.
        const last = events.slice(0, i).findLast((e) => e.t === 'commit' && e.partition === p)
        const sent = last?.t === 'commit' ? sentAt.get(p)?.get(BigInt(last.offset) + 1n) : undefined
        if (sent !== undefined) waitFrom = Math.max(waitFrom, sent)
      }
      lost += Math.max(0, until - waitFrom)
      if (trace) process.stderr.write(`[lost] ${a.member} p${p} assigned +${Math.round(a.at - from)} ms: ${Math.round(until - waitFrom)} ms${until === nextRound ? ' (to the next round)' : ''}\n`)
    }
  }
  return lost / 1000
}

/** Whether the assignment at `i` kept `p` at its member running: in the member's previous assignment, and not closed there since. */
export function keptRunning(events: readonly GroupEvent[], i: number, p: number): boolean {
  const a = events[i]
  if (a?.t !== 'assignment') return false
  const j = events.slice(0, i).findLastIndex((e) => e.t === 'assignment' && e.member === a.member)
  const previous = events[j]
  if (previous?.t !== 'assignment' || !previous.partitions.includes(p)) return false
  return !events.slice(j + 1, i).some((e) => e.t === 'closed' && e.member === a.member && e.partition === p)
}

async function rolling(partitions: number, sizeMb: number, baseline: boolean): Promise<Outcome> {
  return GroupBench.run('rolling', partitions, sizeMb, async (bench, { stateBytes }) => {
    const names = ['a', 'b', 'c']
    const common = { snapshotEveryMs: 2000, roundRobin: baseline }
    await bench.startTogether(names, common, { balanced: (running) => running === partitions / 3 })
    const steadyFrom = baseline ? undefined : await steady(bench)
    const home = bench.owners()
    const from = now()
    let stayedGapMsMax = 0
    for (const name of names) {
      bench.log(`restarting ${name}`)
      const closeAt = now()
      await bench.members.get(name)!.close(baseline)
      bench.members.delete(name)
      await bench.member(bench.spec(name, common))
      await bench.settled(`every partition after ${name}'s restart`)
      const others = bench.partitions.filter((p) => home.get(p) !== name)
      stayedGapMsMax = Math.max(stayedGapMsMax, longestCommitGap(bench.events, others, closeAt, now()))
    }
    const end = now()
    const after = bench.owners()
    const since = bench.events.filter((e) => e.at >= from)
    return {
      partitions,
      partitionsHome: bench.partitions.filter((p) => after.get(p) === home.get(p)).length,
      bytesDownloaded: since.reduce((sum, e) => sum + (e.t === 'started' ? e.bytesDownloaded : 0), 0),
      stateBytes,
      partitionSecondsLost: round(tidemarkSecondsLost(bench.events, from, bench.sentAt), 2),
      partitionSecondsLostToCommit: round(tidemarkSecondsLost(bench.events, from), 2),
      groupPartitionSecondsLost: round(partitionSecondsLost(bench.events, bench.partitions, from, end), 2),
      stayedGapMsMax: round(stayedGapMsMax, 1),
      steadyGapMsMax: steadyFrom === undefined ? 0 : round(longestCommitGap(bench.events, bench.partitions, steadyFrom, from), 1),
    }
  })
}

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { partitions: 12, 'size-mb': 24, rounds: 3 })
  const loadAvgAtStart = loadAvg()
  const pairs: Array<{ ours: Outcome; roundRobin: Outcome }> = []
  for (let r = 0; r < opts.rounds; r++) {
    const ours = await rolling(opts.partitions, opts['size-mb'], false)
    const roundRobin = await rolling(opts.partitions, opts['size-mb'], true)
    pairs.push({ ours, roundRobin })
    progress(`round ${r + 1}: ours ${ours.partitionSecondsLost} s, round-robin ${roundRobin.partitionSecondsLost} s`)
  }
  // One draw of the baseline says little: which partitions round-robin moves
  // depends on kafkajs's random member ids (6.9 to 97.7 partition-seconds in
  // three rounds of one run). As in the other benches, the figure is the
  // median over interleaved rounds, and the target the median of the
  // per-round ratios; each round's figures are printed too.
  const med = (pick: (o: Outcome) => number, side: 'ours' | 'roundRobin'): number => round(median(pairs.map((p) => pick(p[side]))), 2)
  const each = (pick: (o: Outcome) => number, side: 'ours' | 'roundRobin'): number[] => pairs.map((p) => pick(p[side]))
  const result = {
    bench: 'rolling',
    sizeMb: opts['size-mb'],
    partitions: opts.partitions,
    // The worst round: every partition home and nothing downloaded in every one.
    partitionsHome: Math.min(...each((o) => o.partitionsHome, 'ours')),
    bytesDownloaded: Math.max(...each((o) => o.bytesDownloaded, 'ours')),
    stateBytes: Math.min(...each((o) => o.stateBytes, 'ours')),
    partitionSecondsLost: med((o) => o.partitionSecondsLost, 'ours'),
    roundRobinPartitionSecondsLost: med((o) => o.partitionSecondsLost, 'roundRobin'),
    ...prefixed('lostRatio', pairedRatio(pairs.map((p) => p.ours.partitionSecondsLost / p.roundRobin.partitionSecondsLost))),
    partitionSecondsLostRounds: each((o) => o.partitionSecondsLost, 'ours'),
    roundRobinPartitionSecondsLostRounds: each((o) => o.partitionSecondsLost, 'roundRobin'),
    partitionSecondsLostToCommit: med((o) => o.partitionSecondsLostToCommit, 'ours'),
    roundRobinPartitionSecondsLostToCommit: med((o) => o.partitionSecondsLostToCommit, 'roundRobin'),
    groupPartitionSecondsLost: med((o) => o.groupPartitionSecondsLost, 'ours'),
    roundRobinGroupPartitionSecondsLost: med((o) => o.groupPartitionSecondsLost, 'roundRobin'),
    // The worst round of Tidemark's way.
    stayedGapMsMax: Math.max(...each((o) => o.stayedGapMsMax, 'ours')),
    steadyGapMsMax: Math.max(...each((o) => o.steadyGapMsMax, 'ours')),
    roundRobinPartitionsHome: each((o) => o.partitionsHome, 'roundRobin'),
    roundRobinBytesDownloaded: each((o) => o.bytesDownloaded, 'roundRobin'),
    uvThreadPoolSize: threadPoolSize(),
    loadAvgAtStart,
    loadAvgAtEnd: loadAvg(),
  }
  emit(result)
  saveFigures('rolling', args, result)
}

function progress(what: string): void {
  process.stderr.write(`[rolling] ${what}\n`)
}
