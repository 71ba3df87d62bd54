import { mkdir, rm } from 'node:fs/promises'
import { resolve } from 'node:path'
import { isTidemarkError, TidemarkError } from '../errors.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { callListener } from '../logging/listener.js'
import { checkLogger, type Logger } from '../logging/logger.js'
import { corrupt, type CorruptReason } from './archive.js'
import { listManifests, readManifest, type ManifestRef } from './catalog.js'
import { FollowerCopy } from './follow-copy.js'
import { ByteRate, meteredStore, systemClock, type FollowerClock } from './follow-rate.js'
import { SnapshotLayout } from './layout.js'
import type { SnapshotManifest } from './manifest.js'
import { checkInt, checkKnown } from '../util/index.js'
import { checkPacer, type SnapshotPacer } from './pacer.js'
import { checkFunction, checkObject, checkSnapshotStore } from './options.js'
import { prefetchSnapshot } from './prefetch.js'
import type { ReusableFile, SnapshotSummary } from './restore/index.js'

export type { FollowerClock } from './follow-rate.js'

export interface FollowerStartOptions {
  /** From the end of one sync to the start of the next. Default 30 s. */
  intervalMs?: number
  /** Shared by followers on one clock: at most its `slots` syncs of theirs start within `intervalMs` (see start()). */
  pacer?: SnapshotPacer
  /** With a pacer: this follower's weight in the line, the highest first. Default: the bytes it was behind at its last listing. */
  debt?: () => number
}

/** How soon a follower whose turn the pacer refused asks again (at most its intervalMs). */
const PACED_ASK_MS = 1000

export const FOLLOWER_DEFAULTS = Object.freeze({
  /** 0: no bound. */
  maxBytesPerSecond: 0,
  /** 0: no bound. */
  maxDiskBytes: 0,
  /** A standby's download is background work: fewer ranged reads at once than a restore's 6. */
  downloadConcurrency: 2,
  intervalMs: 30_000,
})

export interface SnapshotFollowerOptions {
  snapshotStore: SnapshotStore
  job: string
  partition: string | number
  /**
   * The copy's directory, created if absent, and only ever written under
   * files/, incoming/ and follower.json. Put it on the file system of the
   * store directory a restore will fill: the restore hard-links its files.
   * A directory an earlier follower of the same partition left is taken up
   * (every file hashed again first).
   */
  dir: string
  /** Downloaded bytes per second, for all of this follower's reads together. Default 0: no bound. */
  maxBytesPerSecond?: number
  /** Bytes the copy may take on disk, downloads in progress included; a snapshot larger than this is skipped. Default 0: no bound. */
  maxDiskBytes?: number
  /** Ranged reads at once. Default 2. */
  downloadConcurrency?: number
  onEvent?: (event: SnapshotFollowerEvent) => void
  logger?: Logger
  /** Where polling and the byte budget take their time from. Default: the process's timers. */
  clock?: FollowerClock
}

export type FollowerSkipReason = CorruptReason | 'disk-budget'

export interface FollowerSkippedSnapshot {
  id: string
  key: string
  reason: FollowerSkipReason
  message: string
}

export type SnapshotFollowerEvent =
  /** The copy now matches `snapshot`. */
  | { type: 'synced'; snapshot: SnapshotSummary; bytesDownloaded: number; filesDownloaded: number; filesKept: number }
  /** A snapshot will not be followed: it does not verify (as a restore would skip it), or it does not fit maxDiskBytes. It is not tried again. */
  | { type: 'skipped'; skipped: FollowerSkippedSnapshot }
  /** A sync failed (the store, the local disk, snapshots deleted under it again and again); the copy is what it was. */
  | { type: 'failed'; error: unknown }
  /** Files of an earlier follower's copy that no longer verify, dropped when the copy was taken up. */
  | { type: 'files-dropped'; names: string[] }

export interface SnapshotFollowerSyncResult {
  /** The snapshot the copy matches after the sync, if any. */
  snapshot: SnapshotSummary | undefined
  /** Whether the copy moved to a newer snapshot. */
  changed: boolean
  /** Bytes read from the store's data objects by this sync (tar headers included). */
  bytesDownloaded: number
  filesDownloaded: number
  /** Files of the new snapshot that the copy already held. */
  filesKept: number
  /** Snapshots this sync skipped, newest first. */
  skipped: FollowerSkippedSnapshot[]
}

export interface SnapshotFollowerStatus {
  /** The snapshot whose files the copy holds (its id, epoch, sequence and positions), or undefined. */
  snapshot: SnapshotSummary | undefined
  /** Bytes of the files the copy holds. */
  bytesHeld: number
  filesHeld: number
  /** Bytes read from data objects since the follower was made. */
  bytesDownloaded: number
  /** The newest snapshot listed at the last sync. */
  newest: { id: string; epoch: number; sequence: number } | undefined
  /** Listed snapshots newer than the copy, not counting skipped ones. */
  snapshotsBehind: number
  /** File bytes the newest snapshot that can be followed holds and the copy does not (as of the last sync). */
  bytesBehind: number
  syncing: boolean
  /** clock.now() at the end of the last sync that did not fail. */
  lastSyncAt: number | undefined
  /** The last sync's error, until a sync succeeds. */
  lastError: unknown
}

const KNOWN = ['snapshotStore', 'job', 'partition', 'dir', 'onEvent', 'logger', 'clock', 'maxBytesPerSecond', 'maxDiskBytes', 'downloadConcurrency']

/** A snapshot deleted under a sync (GC retired it for a newer one) makes the sync start over with the new newest, this many times. */
const MAX_ATTEMPTS = 4

/**
 * Keeps a local copy of one partition's newest snapshot, for a standby that
 * may have to take the partition over: each sync lists the manifests,
 * reads the newest one it does not match, and downloads only the files the
 * copy lacks (same name, size and SHA-256); table files never change, so
 * after the first sync that is what the snapshots added. Files are
 * verified as a restore verifies them, and the copy moves to a snapshot
 * only once all its files verified. A restore given `reusableFiles()` as
 * `reuse` then downloads only what came after the last sync.
 *
 * Knows nothing of who owns the partition: it reads the snapshot store only.
 */
export class SnapshotFollower {
  readonly layout: SnapshotLayout
  readonly options: Readonly<{ dir: string; maxBytesPerSecond: number; maxDiskBytes: number; downloadConcurrency: number }>
  readonly #store: SnapshotStore
  readonly #metered: SnapshotStore
  readonly #copy: FollowerCopy
  readonly #clock: FollowerClock
  readonly #onEvent: ((event: SnapshotFollowerEvent) => void) | undefined
  readonly #logger: Logger
  /** Snapshots that will never be followed (they do not verify, or do not fit), by id. */
  readonly #skipped = new Map<string, FollowerSkippedSnapshot>()
  #opened: Promise<void> | undefined
  #chain: Promise<unknown> = Promise.resolve()
  #syncing = false
  #bytesDownloaded = 0
  #newest: ManifestRef | undefined
  #snapshotsBehind = 0
  #bytesBehind = 0
  #lastSyncAt: number | undefined
  #lastError: unknown
  #polling: { intervalMs: number; timer: unknown; pacer: SnapshotPacer | undefined } | undefined
  #disposed = false

  constructor(options: SnapshotFollowerOptions) {
    const o = checkObject(options, 'follower options')
    checkKnown(o, KNOWN, 'follower')
    this.#store = checkSnapshotStore(o.snapshotStore, 'snapshotStore')
    this.layout = new SnapshotLayout(o.job, o.partition)
    if (typeof o.dir !== 'string' || o.dir === '') throw new TypeError(`dir must be a non-empty path string, got ${JSON.stringify(o.dir)}`)
    const d = FOLLOWER_DEFAULTS
    this.options = Object.freeze({
      dir: resolve(o.dir),
      maxBytesPerSecond: checkInt(o.maxBytesPerSecond ?? d.maxBytesPerSecond, 'maxBytesPerSecond', 0),
      maxDiskBytes: checkInt(o.maxDiskBytes ?? d.maxDiskBytes, 'maxDiskBytes', 0),
      downloadConcurrency: checkInt(o.downloadConcurrency ?? d.downloadConcurrency, 'downloadConcurrency', 1, 64),
    })
    this.#clock = checkClock(o.clock)
    this.#onEvent = checkFunction(o.onEvent, 'onEvent')
    this.#logger = checkLogger(o.logger, 'logger')
    const rate = this.options.maxBytesPerSecond > 0 ? new ByteRate(this.options.maxBytesPerSecond, this.#clock) : undefined
    this.#metered = meteredStore(this.#store, (n) => { this.#bytesDownloaded += n }, rate)
    this.#copy = new FollowerCopy(this.options.dir, this.layout.job, this.layout.partition)
  }

  /**
   * Brings the copy up to the newest snapshot that verifies and fits. Calls
   * run one after another. Rejects when the store or the local disk fails
   * (after a `failed` event); the copy is then what it was before.
   */
  sync(): Promise<SnapshotFollowerSyncResult> {
    if (this.#disposed) return Promise.reject(new TypeError(`the follower of ${this.layout.prefix} was disposed`))
    const run = this.#chain.then(() => this.#syncOnce())
    this.#chain = run.catch(() => undefined)
    return run
  }

  /**
   * Syncs now, then `intervalMs` after each sync ends, until stop(). Failures are `failed` events.
   *
   * With a `pacer` (shared by the followers of a process or member, on one
   * clock), each sync waits for its turn: at most the pacer's `slots` syncs
   * of those followers start within `intervalMs`, so their listings do not
   * grow with the partitions they follow; the follower whose `debt()` is
   * highest goes first (default: the bytes it was behind at its last
   * listing). Beyond `slots` followers, each syncs every `intervalMs` ×
   * followers / `slots`.
   */
  start(options: FollowerStartOptions = {}): void {
    const o = checkObject(options, 'start options')
    checkKnown(o, ['intervalMs', 'pacer', 'debt'], 'follower start')
    const intervalMs = checkInt(o.intervalMs ?? FOLLOWER_DEFAULTS.intervalMs, 'intervalMs', 1)
    const pacer = checkPacer(o.pacer)
    const given = checkFunction<() => number>(o.debt, 'debt')
    // Called from a timer: a throw is logged (callListener) and counts as 0, as does a value that is not a number.
    const debt = given === undefined ? () => this.#bytesBehind : () => {
      const d = callListener(given, 0, this.#logger, { job: this.layout.job, partition: this.layout.partition, callback: 'debt' })
      return typeof d === 'number' && !Number.isNaN(d) ? d : 0
    }
    if (this.#disposed) throw new TypeError(`the follower of ${this.layout.prefix} was disposed`)
    if (this.#polling !== undefined) return
    const polling = { intervalMs, timer: undefined as unknown, pacer }
    this.#polling = polling
    const tick = (): void => {
      polling.timer = undefined
      if (pacer !== undefined && !pacer.request(polling, intervalMs, this.#clock.now(), debt())) {
        // Asks again soon: the pacer drops a follower that stops asking (SnapshotPacer's 10 s).
        polling.timer = this.#clock.setTimeout(tick, Math.min(intervalMs, PACED_ASK_MS))
        return
      }
      this.sync().catch(() => undefined).finally(() => {
        if (this.#polling === polling) polling.timer = this.#clock.setTimeout(tick, intervalMs)
      })
    }
    tick()
  }

  /** Stops polling and waits for a sync in flight. The copy stays; sync() may still be called. */
  async stop(): Promise<void> {
    const polling = this.#polling
    this.#polling = undefined
    if (polling?.timer !== undefined) this.#clock.clearTimeout(polling.timer)
    polling?.pacer?.leave(polling)
    await this.#chain
  }

  status(): SnapshotFollowerStatus {
    return {
      snapshot: this.#copy.snapshot,
      bytesHeld: this.#copy.bytesHeld,
      filesHeld: this.#copy.files.length,
      bytesDownloaded: this.#bytesDownloaded,
      newest: this.#newest === undefined ? undefined : { id: this.#newest.id, epoch: this.#newest.epoch, sequence: this.#newest.sequence },
      snapshotsBehind: this.#snapshotsBehind,
      bytesBehind: this.#bytesBehind,
      syncing: this.#syncing,
      lastSyncAt: this.#lastSyncAt,
      lastError: this.#lastError,
    }
  }

  /**
   * The copy's files, for restoreSnapshot's `reuse`, after any sync in
   * flight. Call stop() first when polling: a later sync removes the files
   * its snapshot no longer holds, and a restore links the files it is given.
   */
  async reusableFiles(): Promise<ReusableFile[]> {
    await this.#chain
    await this.#open()
    return this.#copy.reusable()
  }

  /** Stops, and removes the copy: what the follower wrote, then the directory if that left it empty. */
  async dispose(): Promise<void> {
    await this.stop()
    this.#disposed = true
    await this.#copy.remove()
  }

  #open(): Promise<void> {
    this.#opened ??= this.#copy.open().then((dropped) => {
      if (dropped.length > 0) this.#emit({ type: 'files-dropped', names: dropped })
    }).catch((err: unknown) => {
      this.#opened = undefined
      throw err
    })
    return this.#opened
  }

  async #syncOnce(): Promise<SnapshotFollowerSyncResult> {
    this.#syncing = true
    const before = this.#bytesDownloaded
    const skipped: FollowerSkippedSnapshot[] = []
    try {
      await this.#open()
      const outcome = await this.#follow(skipped)
      this.#lastSyncAt = this.#clock.now()
      this.#lastError = undefined
      const bytesDownloaded = this.#bytesDownloaded - before
      if (outcome !== undefined) this.#emit({ type: 'synced', snapshot: this.#copy.snapshot!, bytesDownloaded, ...outcome })
      return { snapshot: this.#copy.snapshot, changed: outcome !== undefined, bytesDownloaded, filesDownloaded: outcome?.filesDownloaded ?? 0, filesKept: outcome?.filesKept ?? 0, skipped }
    } catch (error) {
      this.#lastError = error
      this.#emit({ type: 'failed', error })
      throw error
    } finally {
      // What a sync downloaded for a snapshot it did not commit goes, so that the disk holds the copy only.
      await this.#copy.trim().catch(() => undefined)
      await rm(this.#copy.incomingDir, { recursive: true, force: true }).catch(() => undefined)
      this.#syncing = false
    }
  }

  /** Moves the copy to the newest snapshot it can; undefined when it stays where it is. */
  async #follow(skipped: FollowerSkippedSnapshot[]): Promise<{ filesDownloaded: number; filesKept: number } | undefined> {
    let gone: TidemarkError | undefined
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const refs = await listManifests(this.#store, this.layout)
      if (gone !== undefined) {
        // A data object was missing: if its manifest is still listed, the
        // snapshot lost an object (skipped, as a restore skips it); if not,
        // GC retired it for a newer one, which this attempt follows.
        const id = gone.details.snapshot as string
        const ref = refs.find((r) => r.id === id)
        if (ref !== undefined) this.#skip(ref, gone, skipped)
        gone = undefined
      }
      const candidates = this.#noteListing(refs)
      this.#snapshotsBehind = candidates.length
      for (const ref of candidates) {
        let manifest: SnapshotManifest
        try {
          manifest = await readManifest(this.#store, this.layout, ref)
        } catch (err) {
          if (!isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT')) throw err
          // A manifest that vanished since the listing was retired: list again.
          if (isTidemarkError(err.cause, 'TIDEMARK_DFS_NOT_FOUND')) {
            gone = err
            break
          }
          this.#skip(ref, err, skipped)
          continue
        }
        const max = this.options.maxDiskBytes
        if (max > 0 && manifest.stateBytes > max) {
          this.#skip(ref, { reason: 'disk-budget', message: `snapshot ${manifest.id} holds ${manifest.stateBytes} bytes of files, more than maxDiskBytes (${max})` }, skipped)
          continue
        }
        // The lag to the newest snapshot that can be followed, should this download fail.
        this.#bytesBehind = this.#missingBytes(manifest)
        const fetched = await this.#fetch(manifest)
        if ('filesDownloaded' in fetched) {
          await this.#copy.commit(manifest, summary(this.layout, manifest))
          // Every newer candidate was skipped on the way here.
          this.#snapshotsBehind = 0
          this.#bytesBehind = 0
          return fetched
        }
        if (isTidemarkError(fetched.error, 'TIDEMARK_DFS_NOT_FOUND')) {
          gone = corrupt('object-missing', `snapshot ${manifest.id}: ${fetched.error.message}`, { snapshot: manifest.id, object: fetched.error.details.key }, fetched.error)
          break
        }
        this.#skip(ref, fetched.error, skipped)
      }
      if (gone === undefined) {
        if (this.#snapshotsBehind === 0) this.#bytesBehind = 0
        return undefined
      }
    }
    throw new TidemarkError('TIDEMARK_DFS_NOT_FOUND', `the snapshots of ${this.layout.prefix} were deleted under the follower's download ${MAX_ATTEMPTS} times in a row; the copy stays at ${this.#copy.snapshot?.id ?? 'no snapshot'}`, { cause: gone, details: { job: this.layout.job, partition: this.layout.partition } })
  }

  /** Downloads the files of `manifest` that the copy lacks into its pool; the error that kept a file out, if any did. */
  async #fetch(manifest: SnapshotManifest): Promise<{ filesDownloaded: number; filesKept: number } | { error: TidemarkError }> {
    const need = manifest.files.filter((f) => !this.#copy.has(f))
    const max = this.options.maxDiskBytes
    if (max > 0 && this.#copy.bytesOnDisk + need.reduce((sum, f) => sum + f.size, 0) > max) await this.#copy.prune(manifest)
    const result = { filesDownloaded: need.length, filesKept: manifest.files.length - need.length }
    if (need.length === 0) return result
    const errors: Array<{ error: unknown; object: string }> = []
    // Created here, so that a local failure surfaces; the prefetch itself reports only downloads.
    await mkdir(this.#copy.incomingDir, { recursive: true })
    const prefetch = prefetchSnapshot({
      snapshotStore: this.#metered,
      job: this.layout.job,
      partition: this.layout.partition,
      manifest: { ...manifest, files: need },
      dir: this.#copy.incomingDir,
      downloadConcurrency: this.options.downloadConcurrency,
      onError: (error, object) => errors.push({ error, object }),
    })
    const got = await prefetch.finished()
    await this.#copy.adopt(got)
    await rm(this.#copy.incomingDir, { recursive: true, force: true })
    if (got.length === need.length) return result
    const verdict = (e: { error: unknown; object: string }): TidemarkError | undefined => {
      const { error, object } = e
      if (isTidemarkError(error, 'TIDEMARK_DFS_NOT_FOUND')) return new TidemarkError('TIDEMARK_DFS_NOT_FOUND', `data object ${object} does not exist`, { cause: error, details: { key: object } })
      if (error instanceof RangeError) return corrupt('object-truncated', `snapshot ${manifest.id}: data object ${object} is shorter than its manifest says: ${error.message}`, { object, snapshot: manifest.id }, error)
      if (isTidemarkError(error, 'TIDEMARK_SNAPSHOT_CORRUPT')) return corrupt(error.details.reason as CorruptReason, `snapshot ${manifest.id}: ${error.message}`, { ...error.details, snapshot: manifest.id }, error.cause)
      return undefined
    }
    // The store or the local disk failed: that says nothing about the snapshot.
    const other = errors.find((e) => verdict(e) === undefined)
    if (other !== undefined) throw other.error
    if (errors.length === 0) throw new Error(`the follower's download of snapshot ${manifest.id} into ${this.#copy.incomingDir} failed`)
    const verdicts = errors.map(verdict) as TidemarkError[]
    return { error: verdicts.find((v) => v.code === 'TIDEMARK_SNAPSHOT_CORRUPT') ?? verdicts[0]! }
  }

  /** Refs newer than the copy that may still be followed, newest first; updates the status's view of the newest. */
  #noteListing(refs: readonly ManifestRef[]): ManifestRef[] {
    this.#newest = refs[0]
    const at = this.#copy.snapshot
    return refs.filter((r) => (at === undefined || r.epoch > at.epoch || (r.epoch === at.epoch && r.sequence > at.sequence)) && !this.#skipped.has(r.id))
  }

  #missingBytes(manifest: SnapshotManifest): number {
    return manifest.files.filter((f) => !this.#copy.has(f)).reduce((sum, f) => sum + f.size, 0)
  }

  #skip(ref: ManifestRef, err: TidemarkError | { reason: FollowerSkipReason; message: string }, skipped: FollowerSkippedSnapshot[]): void {
    const reason = err instanceof TidemarkError ? ((err.details.reason as CorruptReason | undefined) ?? 'manifest-unreadable') : err.reason
    const entry: FollowerSkippedSnapshot = { id: ref.id, key: ref.key, reason, message: err.message }
    if (!this.#skipped.has(ref.id) && this.#snapshotsBehind > 0) this.#snapshotsBehind--
    this.#skipped.set(ref.id, entry)
    skipped.push(entry)
    this.#emit({ type: 'skipped', skipped: entry })
  }

  #emit(event: SnapshotFollowerEvent): void {
    const fields = { job: this.layout.job, partition: this.layout.partition, event: event.type }
    switch (event.type) {
      case 'synced': this.#logger.info({ ...fields, snapshot: event.snapshot.id, bytesDownloaded: event.bytesDownloaded }, 'follower synced'); break
      case 'skipped': this.#logger.warn({ ...fields, snapshot: event.skipped.id, reason: event.skipped.reason, detail: event.skipped.message }, 'follower skipped a snapshot'); break
      case 'failed': this.#logger.warn({ ...fields, err: event.error }, 'follower sync failed; the copy is unchanged'); break
      case 'files-dropped': this.#logger.warn({ ...fields, names: event.names }, 'follower dropped files that no longer verify'); break
    }
    callListener(() => this.#onEvent?.(event), undefined, this.#logger, fields)
  }
}

function summary(layout: SnapshotLayout, m: SnapshotManifest): SnapshotSummary {
  return { id: m.id, key: layout.manifestKey(m.epoch, m.sequence), epoch: m.epoch, sequence: m.sequence, createdAt: m.createdAt, positions: [...m.positions] }
}

function checkClock(value: unknown): FollowerClock {
  if (value === undefined) return systemClock
  const c = value as Partial<FollowerClock> | null
  if (c === null || typeof c !== 'object' || typeof c.now !== 'function' || typeof c.setTimeout !== 'function' || typeof c.clearTimeout !== 'function') {
    throw new TypeError('clock must be { now(), setTimeout(fn, ms), clearTimeout(handle) }')
  }
  return c as FollowerClock
}
