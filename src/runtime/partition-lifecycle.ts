// Long file: the life of a partition is one state machine (claim, restore,
// store, outputs, snapshots, failure, shutdown); split, its steps would
// reach into each other's private state.
import { existsSync } from 'node:fs'
import { mkdir, rm } from 'node:fs/promises'
import { dirname } from 'node:path'
import { asTidemarkError, isTidemarkError, TidemarkError } from '../errors.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { acquireClaim, type Claim, type ClaimTakeover } from '../ownership/claim.js'
import { acquireAssigned } from '../ownership/assigned.js'
import type { MemberLease } from '../ownership/member-lease.js'
import { PartitionStore } from '../store/partition-store.js'
import type { PartitionStoreOptions } from '../store/store-options.js'
import { listVerifiedManifests, type VerifiedManifests } from '../snapshot/catalog.js'
import { SnapshotLayout } from '../snapshot/layout.js'
import { finishPrefetch, prefetchSnapshot, removeStalePrefetch, type Prefetch } from '../snapshot/prefetch.js'
import type { RestoreResult, ReusableFile, SkippedSnapshot } from '../snapshot/restore/index.js'
import { defaultSnapshotPacer, SnapshotScheduler, type SnapshotSchedulerOptions } from '../snapshot/scheduler.js'
import { Snapshotter } from '../snapshot/snapshotter.js'
import { type SnapshotResult, type SnapshotterOptions } from '../snapshot/snapshotter-types.js'
import { errorFields } from '../logging/logger.js'
import { reportUndeclaredStates } from './undeclared-states.js'
import { StateSizeWatch, type StateSizeSettings } from './state-size.js'
import type { PartitionOutputs } from '../outputs/partition-outputs.js'
import { inspectIntact, restoredTables, restoreStep, standbyFiles, type IntactLocal, type RestoredStep, type RestoreStepOptions } from './restore-step.js'
import { ClaimKeeper } from './claim-keeper.js'
import { leadOver, sinceSnapshot } from './since-snapshot.js'
import type { LifecycleEvents } from './lifecycle-events.js'

export type { LifecycleEvents, OwnershipEvent } from './lifecycle-events.js'

/**
 * The settings of a partition's snapshots, as both runtimes take them
 * (`snapshots` of PartitionProcessor and of StatefulConsumer).
 */
export interface LifecycleSnapshotSettings
  extends Pick<SnapshotterOptions, 'retain' | 'graceMs' | 'maxAmplification' | 'maxChainLength' | 'uploadConcurrency' | 'maxObjectBytes' | 'gcEverySnapshots' | 'gcIntervalMs' | 'checkpoint'> {
  /** Where snapshots go and come from; it also holds the partition's claim, so it must write conditionally. */
  store: SnapshotStore
  /** When to snapshot (time, events, bytes committed since the last one). */
  schedule?: Omit<SnapshotSchedulerOptions, 'onSnapshot' | 'onError'>
}

/**
 * How the partition's claim is taken and kept (docs/ownership.md).
 * - `lease`: a standalone owner. The claim is taken only when no live lease
 *   holds it (or by force), and renewed on a timer; a batch commits only
 *   while the lease holds.
 * - `assigned`: an owner that a consumer group assigned the partition to.
 *   The claim has no lease (the group's assignment decides); the previous
 *   owner gets `waitMs` to release it after its hand-off snapshot, then it
 *   is taken by force. A running owner looks at it before each batch, at
 *   most once per CLAIM_CHECK_MS.
 */
export type ClaimPolicy =
  | { kind: 'lease'; leaseMs: number; takeover: ClaimTakeover; owner?: string; clock: () => number; memberLease?: MemberLease }
  | { kind: 'assigned'; waitMs: number; signal?: AbortSignal }

/** The shared fields (job, partition, path, states, standby and the restore's settings) are RestoreStepOptions'. */
export interface PartitionLifecycleOptions extends RestoreStepOptions {
  store?: Omit<PartitionStoreOptions, 'path' | 'states'>
  snapshots?: LifecycleSnapshotSettings
  /** Required with snapshots. */
  claim?: ClaimPolicy
  /** The partition's outbox and dedupe: attached to the store once it is open, closed before it. */
  outputs: PartitionOutputs
  events: LifecycleEvents
  /** The state size's soft limit and the pace of its measures (state-size.ts): measured at the start and after commits. */
  stateSize?: StateSizeSettings
  /** Called once, when the partition stops on a failure (the first one). */
  onFailure?(error: unknown): void
}

/** Where a start found its state. */
export interface LifecycleStart {
  source: 'local' | 'snapshot' | 'empty'
  /** The snapshot restored (or compared with, for 'local'). */
  snapshot?: string
  /** Snapshots that could not be used, newest first, and why. */
  skipped: SkippedSnapshot[]
  bytesDownloaded: number
  /** This owner's epoch: its claim's, above every earlier claim's and every snapshot that verifies (0 without snapshots). */
  epoch: number
  /** Milliseconds an assigned owner waited for the previous owner's release (0: the claim was free, released, or taken at once). */
  claimWaitMs: number
}

/**
 * Ranged reads at once of the prefetch a new assignee runs while it waits
 * for the previous owner's release (a restore uses 6). The prefetch is
 * speculative and shares the snapshot store with what is on the critical
 * path: the old owner's hand-off upload, the claim requests that notice the
 * release, and the ranges stop() must wait for. At 6 per partition the
 * rebalance bench (REBALANCE_TRACE=1) saw the claim taken 200-320 ms after
 * the release and stop() wait 100-530 ms; at 2, 100-150 ms and 35-60 ms.
 */
const PREFETCH_CONCURRENCY = 2

/**
 * The life of one partition, the same for every runtime: take the claim,
 * restore (the local store when it is intact and not behind the newest
 * snapshot, else the newest usable snapshot, else empty), open the store,
 * attach the outputs, snapshot on a schedule, stop on the first failure,
 * and shut down (snapshots, outputs, store, then the claim's release).
 * A runtime keeps only its source loop: it reads events, applies them
 * through the store, calls beforeCommit() before and committed() after
 * each batch, and reports failures through fail().
 *
 * One failure policy: the first failure stops the partition (it is logged
 * once, scheduling stops, `stopped` aborts, onFailure is called). A lost
 * claim, or snapshots fenced by a newer epoch, is a failure too; any other
 * snapshot failure is reported and processing goes on, unless the store
 * itself failed (its reopen after a checkpoint).
 */
export class PartitionLifecycle {
  readonly #o: PartitionLifecycleOptions
  readonly #layout: SnapshotLayout
  #store: PartitionStore | undefined
  #snapshotter: Snapshotter | undefined
  #scheduler: SnapshotScheduler | undefined
  #claim: Claim | undefined
  #keeper: ClaimKeeper | undefined
  #claimWaitMs = 0
  /** Offsets the store was past the snapshot its start restored or compared it with (since-snapshot.ts); undefined: none, or reset. */
  #leadAtStart: number | undefined
  #size: StateSizeWatch | undefined
  #failure: { error: unknown } | undefined
  /** The last snapshot failure that did not stop the partition: a failed hand-off carries it. */
  #lastSnapshotError: TidemarkError | undefined
  #shutdown: Promise<void> | undefined
  /** Aborted when the partition stops on a failure, so that a source loop does not sleep through it. */
  readonly #stopped = new AbortController()

  constructor(options: PartitionLifecycleOptions) {
    if (options.snapshots !== undefined && options.claim === undefined) throw new TypeError('a lifecycle with snapshots needs a claim policy')
    this.#o = options
    this.#layout = new SnapshotLayout(options.job, options.key)
  }

  /** The partition store; undefined before start() has opened it and after the shutdown began. */
  get store(): PartitionStore | undefined {
    return this.#store
  }

  get claim(): Claim | undefined { return this.#claim }

  get snapshotter(): Snapshotter | undefined { return this.#snapshotter }

  /** The error that stopped the partition (the first one), or undefined. */
  get failure(): { error: unknown } | undefined { return this.#failure }

  /** Aborted with the failure when the partition stops on one. */
  get stopped(): AbortSignal {
    return this.#stopped.signal
  }

  get shuttingDown(): boolean {
    return this.#shutdown !== undefined
  }

  /**
   * Takes the claim, restores, opens the store, then calls `prepare` (a
   * runtime's own checks of where its source resumes, which may reset the
   * store; `claimWaitMs` tells it how long the claim kept it waiting),
   * attaches the outputs and starts the snapshots. A failure shuts down
   * what was started and rejects.
   */
  async start(prepare?: (claim: { claimWaitMs: number }) => Promise<void>): Promise<LifecycleStart> {
    const o = this.#o
    // Closed here unless handed to the restore, which closes it in every outcome but one: the store comes back open.
    let early: Promise<IntactLocal | undefined> | undefined
    try {
      let restored: RestoreResult | undefined
      let opened: PartitionStore | undefined
      let skipped: SkippedSnapshot[] = []
      let known: VerifiedManifests | undefined
      if (o.snapshots !== undefined) {
        const store = o.snapshots.store
        early = this.#inspectEarly()
        // The claim comes first: nothing is committed or published before it
        // is held, and nothing restored but a group's warm standby copy (into
        // this member's own directory, #restoreAhead). Its epoch is above every
        // snapshot that verifies, so this owner's snapshots fence every writer
        // before it. The listing serves the restore and the first snapshot
        // too, unless a snapshot committed after it (the previous owner's hand-off).
        const listed = await listVerifiedManifests(store, this.#layout)
        const ahead = o.standby !== undefined && o.claim?.kind === 'assigned' ? this.#restoreAhead(store, listed, early) : undefined
        ahead?.catch(() => undefined) // awaited after the claim: a failure meanwhile is not unhandled
        if (ahead !== undefined) early = undefined
        let prefetch: Prefetch | undefined
        try {
          const current = await this.#acquire(store, listed, (p) => { prefetch = p })
          o.events.phase?.('claimed')
          // Listed again once the claim is held when that listing was not current
          // (a hand-off committed after it): the restore and the first snapshot use it.
          known = current ? listed : await listVerifiedManifests(store, this.#layout, listed)
        } catch (err) {
          await prefetch?.dispose()
          await ahead?.then((step) => step.store?.close()).catch(() => undefined)
          throw err
        }
        let kept: RestoredStep
        if (ahead === undefined) {
          if (prefetch === undefined) await removeStalePrefetch(o.path)
          const reuse = await finishPrefetch(prefetch, known.valid[0]?.manifest) ?? await standbyFiles(o)
          if (reuse !== undefined) o.events.phase?.(`reusing ${reuse.length} files`)
          const local = await early
          early = undefined
          kept = await restoreStep(o, store, known, reuse, local, prefetch)
        } else {
          kept = await this.#afterAhead(ahead, store, known)
        }
        restored = kept.result
        opened = kept.store
        skipped = this.#skipped(restored, listed)
      } else {
        await mkdir(dirname(o.path), { recursive: true })
        await removeStalePrefetch(o.path)
      }
      o.events.phase?.('restored')
      this.#store = opened ?? await this.#open()
      o.events.phase?.(opened === undefined ? 'opened' : 'opened early')
      reportUndeclaredStates(this.#store, o.logger, { job: o.job, topic: o.topic, partition: o.partition }, o.events.undeclaredStates)
      this.#size = new StateSizeWatch(o)
      await this.#size.started(restored?.source === 'snapshot' ? restored.verifiedFiles?.reduce((sum, f) => sum + f.size, 0) : undefined)
      await prepare?.({ claimWaitMs: this.#claimWaitMs })
      // A store that prepare reset is empty, without a position: no lead.
      this.#leadAtStart = leadOver(restored?.snapshot?.positions, this.#store.position(o.topic, o.partition), o)
      // Delivers what the outbox holds (after a restart or a restore: what no owner confirmed).
      await o.outputs.attach(this.#store)
      if (o.snapshots !== undefined) this.#startSnapshots(o.snapshots, known, restored)
      // The claim was lost, or the store failed, while starting.
      if (this.#failure !== undefined) throw this.#failure.error
      if (this.#shutdown !== undefined) throw new TidemarkError('TIDEMARK_PROCESSOR_CLOSED', `partition ${o.topic}/${o.partition} was closed while it started`)
      const position = this.#store.position(o.topic, o.partition)
      return {
        source: restored?.source ?? (position === undefined ? 'empty' : 'local'),
        ...(restored?.snapshot === undefined ? {} : { snapshot: restored.snapshot.id }),
        skipped,
        bytesDownloaded: restored?.bytesDownloaded ?? 0,
        epoch: this.#claim?.epoch ?? 0,
        claimWaitMs: this.#claimWaitMs,
      }
    } catch (err) {
      await early?.then((local) => local?.store?.close()).catch(() => undefined)
      await this.shutdown().catch(() => undefined)
      throw err
    }
  }

  /** The local store, opened while the claim is taken: the directory is this process's alone (LevelDB's lock), and nothing is committed from it before the claim. */
  #inspectEarly(): Promise<IntactLocal | undefined> {
    return inspectIntact(this.#o.path, () => this.#open(false))
  }

  /**
   * A consumer group's moved partition, restored over its warm standby copy
   * while the claim is taken: the two took about half a second each, in
   * series, under a scale-out's load (docs/consumer-group.md, step 3). The
   * directory is this member's own, and what is restored is a snapshot
   * that verified: the store is only used once the claim is held, and only
   * if the listing was current (#afterAhead). `early` is closed here unless
   * it comes back open.
   */
  async #restoreAhead(store: SnapshotStore, listed: VerifiedManifests, early: Promise<IntactLocal | undefined>): Promise<RestoredStep> {
    const o = this.#o
    let reuse: ReusableFile[] | undefined
    try {
      await removeStalePrefetch(o.path)
      reuse = await standbyFiles(o)
    } catch (err) {
      await early.then((local) => local?.store?.close()).catch(() => undefined)
      throw err
    }
    o.events.phase?.(`restoring ahead, reusing ${reuse?.length ?? 0} files`)
    const step = await restoreStep(o, store, listed, reuse, await early, undefined)
    // Opened ahead too (as #inspectEarly opens a local store): nothing is committed before the claim.
    return step.store === undefined ? { ...step, store: await this.#open() } : step
  }

  /**
   * The store restored ahead if the newest snapshot listed once the claim
   * was held is the one it restored. Else the previous owner committed one
   * since (its hand-off): restored again over what was restored ahead, whose
   * tables are linked, so only the hand-off's files are downloaded. A failed
   * restore ahead is tried again so too (the hand-off may be the first).
   */
  async #afterAhead(ahead: Promise<RestoredStep>, store: SnapshotStore, known: VerifiedManifests): Promise<RestoredStep> {
    const o = this.#o
    const step = await ahead.catch((error: unknown) => { o.logger.warn({ job: o.job, topic: o.topic, partition: o.partition, ...errorFields(error) }, 'the restore ahead of the claim failed; restoring again'); return undefined })
    if (step !== undefined && step.result.snapshot?.key === known.valid[0]?.ref.key) return step
    await step?.store?.close()
    const reuse = step === undefined ? undefined : await restoredTables(o.path, step.result)
    o.events.phase?.(reuse === undefined ? 'restoring again' : `restoring the hand-off, reusing ${reuse.length} files`)
    return restoreStep(o, store, known, reuse, await this.#inspectEarly(), undefined)
  }

  /** Discards the local state and opens an empty store in its place (a runtime's rebuild on purpose, inside start's prepare). */
  async resetStore(): Promise<PartitionStore> {
    await this.#store?.close()
    this.#store = undefined
    await rm(this.#o.path, { recursive: true, force: true })
    this.#store = await this.#open()
    return this.#store
  }

  #open(create = true): Promise<PartitionStore> {
    const o = this.#o
    return PartitionStore.open({ ...o.store, path: o.path, states: o.outputs.states(o.states), ...(create ? {} : { create }) })
  }

  /** Resolves true when `listed` is current for the claim taken. */
  async #acquire(store: SnapshotStore, listed: VerifiedManifests, onPrefetch: (p: Prefetch) => void): Promise<boolean> {
    const o = this.#o
    const policy = o.claim!
    if (policy.kind === 'lease') {
      // acquireClaim runs a race again that a force lost to the replaced holder's own renewal.
      const claim = await acquireClaim({
        store, job: o.job, partition: o.key, minEpoch: listed.newestEpoch, takeover: policy.takeover, clock: policy.clock,
        ...(policy.memberLease === undefined ? { leaseMs: policy.leaseMs } : { memberLease: policy.memberLease }),
        ...(policy.owner === undefined ? {} : { owner: policy.owner }),
      })
      this.#keep(claim)
      // A previous owner that released the claim after that listing may
      // have committed a snapshot it lacks (its last one, recorded in the
      // claim it released): then the restore lists again.
      return claim.listingIsCurrent(listed.refs)
    }
    let prefetch: Prefetch | undefined
    const { claim, listingIsCurrent, waitedMs } = await acquireAssigned({
      store, job: o.job, partition: o.key, listed, waitMs: policy.waitMs,
      ...(policy.signal === undefined ? {} : { signal: policy.signal }),
      onChange: () => o.events.phase?.('claim-changed'),
      // While the previous owner takes its hand-off snapshot, the newest
      // snapshot's files are downloaded: the hand-off is incremental, so
      // the restore is then left with the files it added. Not when a local
      // store is there: the restore may use it as it is.
      onWait: () => {
        const newest = listed.valid[0]?.manifest
        if (newest === undefined || existsSync(o.path) || o.standby !== undefined) return
        o.events.phase?.('prefetching')
        prefetch = prefetchSnapshot({
          snapshotStore: store, job: o.job, partition: o.key, manifest: newest, dir: `${o.path}.prefetch`,
          downloadConcurrency: Math.min(PREFETCH_CONCURRENCY, o.downloadConcurrency ?? PREFETCH_CONCURRENCY),
        })
        onPrefetch(prefetch)
      },
    })
    this.#keep(claim)
    this.#claimWaitMs = waitedMs
    return listingIsCurrent
  }

  #startSnapshots(settings: LifecycleSnapshotSettings, known: VerifiedManifests | undefined, restored: RestoreResult | undefined): void {
    const o = this.#o
    const { store, schedule, ...rest } = settings
    const claim = this.#claim!
    this.#snapshotter = new Snapshotter({
      ...pickSnapshotterOptions(rest),
      snapshotStore: store,
      partitionStore: this.#store!,
      job: o.job,
      partition: o.key,
      epoch: claim.epoch,
      onEvent: (event) => o.events.snapshotter(event),
      logger: o.logger,
      // One HEAD right before the manifest: a snapshot of an owner that
      // lost the claim does not commit (epoch order covers the rest).
      beforeCommit: () => claim.check(),
      ...(known === undefined ? {} : { knownManifests: known }),
      // Its first snapshot (a hand-off, often) then hashes only what is new.
      ...(restored?.verifiedFiles === undefined ? {} : { verifiedFiles: restored.verifiedFiles }),
    })
    // Hashes ahead what the first snapshot would hash: off a hand-off's critical path.
    void this.#snapshotter.prepare()
    this.#scheduler = new SnapshotScheduler(this.#snapshotter, {
      ...schedule,
      // Partitions that start together snapshot apart (SnapshotSchedulerOptions.phase).
      phase: schedule?.phase ?? Math.random(),
      pacer: schedule?.pacer ?? (schedule?.clock === undefined ? defaultSnapshotPacer() : undefined), // turns for time-based snapshots; a pacer compares its schedulers' clocks
      // A snapshot measures the state (its files) as it goes: a fresh state size at no cost.
      onSnapshot: (result) => { this.#size?.measured(result.bytesTotal); o.events.snapshot(result) },
      onError: (error) => this.snapshotFailed(error),
    })
    this.#scheduler.start()
  }

  /**
   * The restore's skipped snapshots and the manifests that do not verify
   * and that the restore did not try (reported here), newest first.
   */
  #skipped(restored: RestoreResult, listed: VerifiedManifests): SkippedSnapshot[] {
    const reported = new Set(restored.skipped.map((s) => s.key))
    const unreported: SkippedSnapshot[] = listed.invalid
      .filter((m) => !reported.has(m.ref.key))
      .map((m) => ({ id: m.ref.id, key: m.ref.key, reason: m.reason, message: m.message }))
    for (const skipped of unreported) this.#o.events.restore({ type: 'snapshot-skipped', skipped })
    // Keys hold the zero-padded (epoch, sequence): descending keys are newest first.
    return [...restored.skipped, ...unreported].sort((a, b) => (a.key < b.key ? 1 : a.key > b.key ? -1 : 0))
  }

  #keep(claim: Claim): void {
    this.#claim = claim
    const dead = claim.deadHolder
    if (dead !== undefined && claim.previous !== undefined) {
      this.#o.events.ownership({ type: 'holder-dead', holder: { ...claim.previous.owner }, epoch: claim.previous.epoch, pid: dead.pid, reason: dead.reason })
    }
    this.#keeper = new ClaimKeeper(claim, this.#o.claim!, { lost: (error) => this.lost(error), event: (event) => this.#o.events.ownership(event) })
  }

  /**
   * Before each batch commit: nothing more is committed once the partition
   * stopped (the claim lost), nor when the claim's keeper cannot prove the
   * claim still holds (ClaimKeeper.beforeCommit).
   */
  beforeCommit(): Promise<void> | undefined {
    if (this.#failure !== undefined) throw this.#failure.error
    return this.#keeper?.beforeCommit()
  }

  /**
   * Looks at the claim now (one HEAD): false when another owner took it
   * (stopIfClaimLost() then stops the partition); true while this owner
   * holds it, without a claim, or when the store cannot tell now.
   */
  async holdsClaim(): Promise<boolean> {
    if (this.#failure !== undefined) return false
    return this.#keeper?.holds() ?? true
  }

  /** Stops the partition when a look at the claim found it taken (after the batch in flight settled). */
  stopIfClaimLost(): void {
    const lost = this.#keeper?.lostFound
    if (lost !== undefined) this.lost(lost)
  }

  /** After each batch commit. */
  committed(events: number, bytes: number, offset: bigint): void {
    this.#scheduler?.noteCommit(events, bytes)
    this.#o.outputs.committed(offset)
    void this.#size?.committed()
  }

  /** A snapshot of everything committed now (after one in flight); undefined without snapshots or when it failed. */
  snapshot(): Promise<SnapshotResult | undefined> {
    return this.#scheduler?.trigger() ?? Promise.resolve(undefined)
  }

  /**
   * The last snapshot of a close (snapshots.onClose): none when this
   * owner's last snapshot already covers everything committed.
   */
  closeSnapshot(): Promise<SnapshotResult | undefined> {
    return this.#sinceSnapshot() === 'nothing' ? Promise.resolve(undefined) : this.snapshot()
  }

  /**
   * A hand-off snapshot within `timeoutMs` (it goes on in the background
   * past it; the shutdown waits for it). `lost` when another owner holds
   * the claim: its snapshots fence ours, and it replays from its own.
   * `skipped` (the events committed since the last snapshot) when fewer
   * than `minEvents` were, or nothing was, and a snapshot of this owner
   * committed: the next owner replays them instead.
   */
  async handoff(timeoutMs: number, minEvents = 0): Promise<{ snapshot: SnapshotResult } | { skipped: number } | { failed: 'timeout' | 'lost' | 'failed'; error?: unknown }> {
    if (this.#scheduler === undefined) return { failed: 'failed' }
    const since = this.#sinceSnapshot()
    if (since === 'nothing') return { skipped: 0 }
    if (since !== undefined && since.events < minEvents) return { skipped: since.events }
    const lost = this.#keeper?.lostFound ?? await this.#claim?.check().then(() => undefined, (error: unknown) => error)
    if (lost !== undefined) return { failed: isTidemarkError(lost, 'TIDEMARK_OWNERSHIP_LOST') ? 'lost' : 'failed', error: lost }
    this.#lastSnapshotError = undefined
    // No GC on the way: the next owner waits for this snapshot (the GC stays due for its next one).
    const snapshot = this.#scheduler.trigger({ gc: false })
      .then((r) => r === undefined ? { failed: 'failed' as const, error: this.#failure?.error ?? this.#lastSnapshotError } : { snapshot: r })
    let timer: NodeJS.Timeout | undefined
    const timeout = new Promise<{ failed: 'timeout' }>((resolve) => {
      timer = setTimeout(() => resolve({ failed: 'timeout' }), timeoutMs)
    })
    try {
      return await Promise.race([snapshot, timeout])
    } finally {
      clearTimeout(timer)
    }
  }

  /** Since the partition's last snapshot (since-snapshot.ts). */
  #sinceSnapshot(): { events: number; bytes: number } | 'nothing' | undefined {
    return this.#scheduler === undefined ? undefined : sinceSnapshot(this.#scheduler, this.#snapshotter?.lastCommitted !== undefined, this.#leadAtStart)
  }

  /** The claim is gone: the partition stops within the batch in flight. */
  lost(error: unknown): void {
    if (this.#failure !== undefined) return
    this.#o.events.ownership({ type: 'lost', error: asTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST', 'the claim was lost') })
    this.fail(error)
  }

  /**
   * Only the first failure stops the partition and is reported: after the
   * store failed (a commit, the reopen after a checkpoint), other calls of
   * it fail too, and those errors say nothing new.
   */
  fail(error: unknown): void {
    if (this.#failure !== undefined) return
    this.#failure = { error }
    const o = this.#o
    o.logger.error({ job: o.job, topic: o.topic, partition: o.partition, ...errorFields(error) }, 'partition stopped')
    // No new snapshot of a failed partition; one in flight finishes (and
    // does not commit once the claim is lost: its check fails).
    void this.#scheduler?.stop()
    this.#stopped.abort(error)
    o.onFailure?.(error)
  }

  /** The one verdict on a failed snapshot. */
  snapshotFailed(error: unknown): void {
    if (this.#failure !== undefined) return
    // Another owner holds the partition: its claim, or snapshots of a newer
    // epoch. That is no snapshot failure to retry but the end of this owner.
    if (isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST') || isTidemarkError(error, 'TIDEMARK_SNAPSHOT_FENCED')) {
      this.lost(error)
      return
    }
    // The partition store itself failed (its reopen after the checkpoint):
    // processing cannot go on, so the partition stops with this error.
    if (isTidemarkError(error) && error.code.startsWith('TIDEMARK_STORE_') && !error.retriable) {
      this.fail(error)
      return
    }
    this.#lastSnapshotError = asTidemarkError(error, 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', `snapshot of ${this.#o.topic}/${this.#o.partition} failed`, { retriable: false })
    this.#o.events.snapshotFailed(this.#lastSnapshotError)
  }

  /**
   * Stops scheduling, waits for a snapshot in flight, closes the outputs and
   * the store, and releases the claim (once nothing of this owner can write
   * to shared storage any more: an assigned claim while the store closes, a
   * leased one last; a claim that was lost is not released). Idempotent.
   */
  shutdown(): Promise<void> {
    this.#shutdown ??= this.#close()
    return this.#shutdown
  }

  async #close(): Promise<void> {
    this.#keeper?.stop()
    let released: Promise<void> | undefined
    try {
      await this.#scheduler?.stop()
      await this.#snapshotter?.close()
      await this.#o.outputs.close()
      // An assigned claim is released while the store closes (25-120 ms of
      // a hand-over under load): its next owner is another member, or a task
      // here that starts once this one closed (consumer/assignments.ts). A
      // leased one last: its next owner may open this directory at once.
      if (this.#o.claim?.kind === 'assigned') released = this.#release()
      await this.#store?.close()
      this.#o.events.phase?.('store-closed')
    } finally {
      await (released ?? this.#release())
      this.#o.events.phase?.('released')
    }
  }

  async #release(): Promise<void> {
    try {
      const lastSnapshot = this.#snapshotter?.lastCommitted
      await this.#claim?.release(lastSnapshot === undefined ? {} : { lastSnapshot })
    } catch (error) {
      // The lease runs out on its own, or the next assignee takes the claim by force.
      this.#o.events.ownership({ type: 'release-failed', error: asTidemarkError(error, 'TIDEMARK_DFS_REQUEST_FAILED', 'releasing the claim failed', { retriable: true }) })
    }
  }
}

/** Only the Snapshotter's own options pass (the processor's settings also hold onClose). */
function pickSnapshotterOptions(settings: Omit<LifecycleSnapshotSettings, 'store' | 'schedule'> & { onClose?: unknown }): Omit<LifecycleSnapshotSettings, 'store' | 'schedule'> {
  const { onClose: _onClose, ...rest } = settings
  return rest
}
