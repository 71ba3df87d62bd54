/**
 * The group half of issue 38's `many`: a StatefulConsumer job of --members
 * members (4), each in its own process, running --partitions partitions
 * (1,024) of --size-mb MiB (4) on librdkafka's mock cluster, file-system
 * snapshots, a record to every partition every 200 ms all along
 * (bench/_group.ts builds the job and loads the state).
 *
 *   npm run bench -- many-group [--partitions 1024] [--members 4] [--size-mb 4]
 *
 * In order:
 * 1. The members start together with empty state directories and restore
 *   every partition from its snapshot (`startFromSnapshotsMs`, for
 *   information). Each member then stops at once (SIGTERM: every member hands
 *   its partitions off together, as at a redeploy) and starts again on its
 *   own state directory: `startAllMs` is from the restart to every partition
 *   started, `startAllCommittedMs` to each one's first commit after it;
 *   `startedFromLocal` counts the partitions that opened a local store.
 * 2. After 30 s of steady processing a member joins with an empty state
 *   directory, warm-up on (as many warm-ups at once as partitions move):
 *   `groupMoved` partitions change owner, against `groupMovedMinimum`, the
 *   fewest a balanced assignment must move; `groupTidemarkGapMsMax` is the
 *   longest time from the assignment that gave the new member a moved
 *   partition to its first commit there (the group's own rounds, which the
 *   mock holds for the session timeout, are not Tidemark's), split for
 *   information into its longest parts: `groupToStartMsMax` from the
 *   assignment to the partition's start beginning, `groupRestoreMsMax` the
 *   start itself (claim, restore, open), `groupToCommitMsMax` from started
 *   to the first commit; `groupGapUnmeasured` counts the moved partitions
 *   without an assignment, a start and a commit at the new owner since the
 *   join (their task was replaced, say), which the maxima leave out;
 *   `stayedReopened` counts the partitions that did not move but were closed
 *   or started.
 * 3. One of the first members gets SIGTERM: `handoffAllMs` is from the signal
 *   to its exit, with every partition it ran handed off (`handoffPartitions`);
 *   `handoffResumedMs` to each of them committing at another member (the
 *   group's round included, for information).
 *
 * Commits are not kept as events: at 5,120 records a second the bench keeps
 * per partition its latest owner and each member's first commit since the
 * phase began, which is all the figures need.
 */
import { join } from 'node:path'
import { saveFigures } from './_figures.js'
import { dirBytes, GroupBench, now, stickyMinimum, topicPartition, type GroupEvent, type MemberSpec } from './_group.js'
import { emit, intFlags, loadAvg, round } from './_util.js'

const WORDS = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h']

/** Each member's first commit of each partition since `reset()`. */
class FirstCommits {
  #at = new Map<string, number>()
  reset(): void {
    this.#at.clear()
  }
  note(member: string, partition: number, at: number): void {
    const key = `${member}/${partition}`
    if (!this.#at.has(key)) this.#at.set(key, at)
  }
  of(member: string, partition: number): number | undefined {
    return this.#at.get(`${member}/${partition}`)
  }
}

/** Keeps every event but commits in bench.events; commits go to `first` and wake the waits. */
function lightRecorder(bench: GroupBench, first: FirstCommits): void {
  // Waits look again at most every 50 ms for commits (thousands a second), at once for the rest.
  let wake: NodeJS.Timeout | undefined
  bench.record = (e: GroupEvent): void => {
    if (e.t === 'commit') {
      first.note(e.member, e.partition, e.at)
      wake ??= setTimeout(() => { wake = undefined; bench.changes.emit('change') }, 50)
      return
    }
    bench.events.push(e)
    if (e.t === 'failed') bench.log(`${e.member}: partition ${e.partition} failed: ${e.error}`)
    bench.changes.emit('change')
  }
}

/** Who runs each partition now, by the started and closed events (commits are not kept). */
function ownersNow(bench: GroupBench): Map<number, string> {
  const owners = new Map<number, string>()
  for (const e of bench.events) {
    if (e.t === 'started') owners.set(e.partition, e.member)
    else if ((e.t === 'closed' || e.t === 'failed') && owners.get(e.partition) === e.member) owners.delete(e.partition)
  }
  return owners
}

/** Resolves once every partition runs somewhere and has committed at its owner since `reset()`. */
async function allCommitted(bench: GroupBench, first: FirstCommits, what: string): Promise<void> {
  let owners = ownersNow(bench)
  let seen = bench.events.length
  await bench.until(what, () => {
    if (bench.events.length !== seen) { owners = ownersNow(bench); seen = bench.events.length }
    return bench.partitions.every((p) => { const o = owners.get(p); return o !== undefined && first.of(o, p) !== undefined })
  }, 900_000)
}

async function waitExit(bench: GroupBench, name: string): Promise<void> {
  const member = bench.members.get(name)!
  await member.close()
  bench.members.delete(name)
}

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { partitions: 1024, members: 4, 'size-mb': 4, 'max-warmups': 32 })
  const n = opts.members
  const names = WORDS.slice(0, n)
  const joiner = WORDS[n]!
  const loadAvgAtStart = loadAvg()
  const result = await GroupBench.run('many-group', opts.partitions, opts['size-mb'], async (bench, loaded) => {
    const first = new FirstCommits()
    lightRecorder(bench, first)
    const common: Omit<MemberSpec, 'name' | 'stateDir'> = { warmup: { maxWarmups: opts['max-warmups'] } }
    // Spawned, loaded (tsx compiling the sources takes seconds under load), then started together.
    const startMembers = async (who: readonly string[]): Promise<number> => {
      first.reset()
      const members = await Promise.all(who.map((name) => bench.child(bench.spec(name, { ...common, holdStart: true }))))
      const from = now()
      for (const m of members) m.go!()
      return from
    }
    const startedSince = (from: number): Map<number, Extract<GroupEvent, { t: 'started' }>> => {
      const starts = new Map<number, Extract<GroupEvent, { t: 'started' }>>()
      for (const e of bench.events) if (e.t === 'started' && e.at >= from) starts.set(e.partition, e)
      return starts
    }

    // 1. From snapshots, then a redeploy: every member stops and starts again on its local stores.
    let from = await startMembers(names)
    await allCommitted(bench, first, `${n} members to run every partition from its snapshot`)
    const startFromSnapshotsMs = now() - from
    bench.log(`every partition runs (${round(startFromSnapshotsMs / 1000, 1)} s from snapshots); the members stop and start again`)
    await Promise.all(names.map((name) => waitExit(bench, name)))
    from = await startMembers(names)
    await bench.until('every partition to start at a member again', () => startedSince(from).size === bench.partitions.length, 900_000)
    const starts = startedSince(from)
    const startAllMs = Math.max(...[...starts.values()].map((s) => s.at)) - from
    await allCommitted(bench, first, 'every partition to commit after the restart')
    const startAllCommittedMs = now() - from
    const startedFromLocal = [...starts.values()].filter((s) => s.source === 'local').length
    bench.log(`restarted: all started in ${round(startAllMs / 1000, 1)} s, ${startedFromLocal} from local stores`)

    // 2. Scale-out by one member.
    await new Promise((resolve) => setTimeout(resolve, 30_000))
    const before = ownersNow(bench)
    const owned = names.map((m) => [...before.values()].filter((o) => o === m).length)
    const groupMovedMinimum = stickyMinimum(owned, 1, opts.partitions)
    bench.log(`${owned.join('/')} partitions per member; ${joiner} joins`)
    first.reset()
    const joinAt = await startMembers([joiner])
    const share = Math.floor(opts.partitions / (n + 1))
    await bench.until(`${joiner} to run its share`, () => [...ownersNow(bench).values()].filter((o) => o === joiner).length >= share, 900_000)
    await allCommitted(bench, first, 'every partition to commit after the scale-out')
    const after = ownersNow(bench)
    const moved = bench.partitions.filter((p) => after.get(p) !== before.get(p))
    const since = bench.events.filter((e) => e.at >= joinAt)
    const stayedReopened = bench.partitions.filter((p) => !moved.includes(p) && since.some((e) => (e.t === 'started' || e.t === 'closed') && e.partition === p)).length
    let gapMax = 0
    let claimWaitMsMax = 0
    let restoreMsMax = 0
    let toStartMsMax = 0
    let toCommitMsMax = 0
    let bytesDownloadedAtMove = 0
    // A moved partition whose owner started it without an assignment since the join that listed it
    // (its task was replaced after a failure, say) has no gap to measure: counted and named, not hidden.
    const unmeasured: number[] = []
    for (const p of moved) {
      const owner = after.get(p)!
      const start = since.findLast((e): e is Extract<GroupEvent, { t: 'started' }> => e.t === 'started' && e.partition === p && e.member === owner)
      const assignments = since.filter((e) => e.t === 'assignment' && e.member === owner && start !== undefined && e.at <= start.at && e.partitions.includes(p))
      const committedAt = first.of(owner, p)
      if (start === undefined || assignments.length === 0 || committedAt === undefined) {
        unmeasured.push(p)
        continue
      }
      const assignedAt = Math.max(...assignments.map((e) => e.at))
      gapMax = Math.max(gapMax, committedAt - assignedAt)
      toStartMsMax = Math.max(toStartMsMax, start.at - start.restoreMs - assignedAt)
      toCommitMsMax = Math.max(toCommitMsMax, committedAt - start.at)
      claimWaitMsMax = Math.max(claimWaitMsMax, start.claimWaitMs)
      restoreMsMax = Math.max(restoreMsMax, start.restoreMs)
      bytesDownloadedAtMove += start.bytesDownloaded
    }
    const warmupBytes = since.reduce((sum, e) => sum + (e.t === 'synced' && e.member === joiner ? e.bytesDownloaded : 0), 0)
    bench.log(`${moved.length} moved (minimum ${groupMovedMinimum}); longest assignment to first commit ${round(gapMax, 1)} ms`)
    if (unmeasured.length > 0) bench.log(`no gap measured for ${unmeasured.length} moved partitions (no start, assignment or commit at the new owner since the join): ${unmeasured.slice(0, 16).join(', ')}`)

    // 3. SIGTERM of one member: its hand-offs.
    await new Promise((resolve) => setTimeout(resolve, 10_000))
    const leaver = names[0]!
    const handoffPartitions = [...ownersNow(bench).entries()].filter(([, o]) => o === leaver).map(([p]) => p)
    first.reset()
    const termAt = now()
    await waitExit(bench, leaver)
    const handoffAllMs = now() - termAt
    const handedOff = bench.events.filter((e): e is Extract<GroupEvent, { t: 'closed' }> => e.t === 'closed' && e.member === leaver && e.at >= termAt)
    await allCommitted(bench, first, `${leaver}'s partitions to commit elsewhere`)
    const handoffResumedMs = now() - termAt
    let movedStateBytes = 0
    for (const p of moved.slice(0, 16)) {
      const tp = topicPartition(bench.shared, p)
      movedStateBytes += await dirBytes(join(bench.dir.path, after.get(p)!, `${tp.topic}-${tp.partition}`))
    }
    return {
      stateBytes: loaded.stateBytes,
      startFromSnapshotsMs: round(startFromSnapshotsMs, 1),
      startAllMs: round(startAllMs, 1),
      startAllCommittedMs: round(startAllCommittedMs, 1),
      startedFromLocal,
      groupMoved: moved.length,
      groupMovedMinimum,
      groupTidemarkGapMsMax: round(gapMax, 1),
      groupClaimWaitMsMax: round(claimWaitMsMax, 1),
      groupRestoreMsMax: round(restoreMsMax, 1),
      groupToStartMsMax: round(toStartMsMax, 1),
      groupToCommitMsMax: round(toCommitMsMax, 1),
      groupGapUnmeasured: unmeasured.length,
      groupBytesDownloadedAtMove: bytesDownloadedAtMove,
      groupWarmupBytes: warmupBytes,
      groupMovedStateBytesSample: movedStateBytes,
      stayedReopened,
      handoffPartitions: handoffPartitions.length,
      handoffAllMs: round(handoffAllMs, 1),
      handoffSnapshots: handedOff.filter((e) => e.handoff === 'snapshot').length,
      handoffSkipped: handedOff.filter((e) => e.handoff === 'skipped').length,
      handoffResumedMs: round(handoffResumedMs, 1),
    }
  })
  const line = { bench: 'many-group', partitions: opts.partitions, members: n, sizeMb: opts['size-mb'], ...result, loadAvgAtStart, loadAvgAtEnd: loadAvg() }
  emit(line)
  saveFigures('many-group', args, line)
}
