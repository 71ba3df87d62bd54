// Long file: the Snapshotter is one state machine over one store (its view,
// the manifests it read, the GC cadence, the upload in flight and its
// commit); its types, options, numbering and upload plan live beside it.
import { randomBytes } from 'node:crypto'
import { rm } from 'node:fs/promises'
import { asTidemarkError, isTidemarkError, TidemarkError } from '../errors.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import type { PartitionStore } from '../store/partition-store.js'
import { archiveSize, packFiles, type PackedEntry } from './archive.js'
import { listManifests, listObjects, readAll, readManifest, readValidManifests, type ManifestRef } from './catalog.js'
import { removeStaleCheckpoints, takeCheckpoint, type Checkpoint } from './checkpoint.js'
import { collectGarbage, type GcListing, type GcResult } from './gc.js'
import { snapshotId, SnapshotLayout } from './layout.js'
import { encodeManifest, type SnapshotFile, type SnapshotManifest, type SnapshotObject } from './manifest.js'
import { checkBoolean, checkFunction, checkObject, checkPartitionStore, checkSnapshotStore, type CheckedFile } from './options.js'
import { planCompaction } from './policy.js'
import { FileHashCache } from './file-hashes.js'
import { checkInt, checkKnown, mapLimit } from '../util/index.js'
import { checkLogger, errorFields, type Logger } from '../logging/logger.js'
import { callListener } from '../logging/listener.js'
import { snapshotEnded, snapshotStarted } from '../metrics/snapshot-metrics.js'
import type { SnapshotResult, SnapshotterEvent, SnapshotterOptions, TakeSnapshotOptions } from './snapshotter-types.js'
import { describeSnapshot, groupBySize, uploadFailed } from './upload.js'
import { availableObjects, checkFence, nextSequence, type StoreView } from './store-view.js'
import { checkVerifiedFiles, KNOWN, resolveSnapshotterOptions, type Resolved } from './snapshotter-options.js'


/** Stores with a snapshot in flight, so that two Snapshotters of one store cannot overlap. */
const busy = new WeakSet<PartitionStore>()

/**
 * Incremental snapshots of one partition store into a snapshot store.
 *
 * takeSnapshot() quiesces the store for a moment to take a checkpoint
 * (hard links), then uploads while processing goes on: only files that no
 * kept snapshot already holds (same name, size and SHA-256) are packed into
 * new data objects; the manifest, written last with a create-only put, is
 * the commit point. A failure anywhere before it leaves the previous
 * snapshot as the latest and at most unreferenced objects, which gc() sweeps.
 */
export class Snapshotter {
  readonly layout: SnapshotLayout
  readonly snapshotStore: SnapshotStore
  readonly partitionStore: PartitionStore
  readonly options: Resolved
  readonly #onEvent: ((event: SnapshotterEvent) => void) | undefined
  readonly #beforeCommit: (() => Promise<void>) | undefined
  readonly #logger: Logger
  /** Parsed manifests by key (they are immutable). */
  readonly #manifests = new Map<string, SnapshotManifest>()
  /** SHA-256 of local table files by name, valid while size, device and inode match (table files never change). */
  readonly #hashes = new FileHashCache()
  /** Relative keys of data objects being uploaded; gc() must not take them. */
  readonly #uploading = new Set<string>()
  /** Invalid manifests already reported, so that each is reported once. */
  readonly #reportedInvalid = new Set<string>()
  /**
   * Trust #view between full listings: the store writes manifests
   * create-only, so a writer that numbered from a stale view collides with
   * the manifest it missed instead of landing beside it.
   */
  readonly #trustView: boolean
  /** An ownership check runs before every manifest, on a store that can hold claims: it stands for the HEAD of the new objects. */
  readonly #claimChecked: boolean
  #view: StoreView | undefined
  /** Successful snapshots since the last GC after a snapshot, and when that ran (undefined: not yet). */
  #sinceGc = 0
  #lastGcAt: number | undefined
  /** Manifests this snapshotter committed: a GC listing taken before one lacks it. */
  #commits = 0
  #inFlight: Promise<unknown> | undefined
  /** verifiedFiles, until prepare() binds them to the files (FileHashCache.seed). */
  #verifiedFiles: readonly CheckedFile[] | undefined
  #prepared: Promise<void> | undefined
  #lastCommitted: string | undefined
  #closed = false
  #staleCheckpointsRemoved = false

  constructor(options: SnapshotterOptions) {
    const o = checkObject(options, 'Snapshotter options')
    checkKnown(o, KNOWN, 'Snapshotter')
    this.snapshotStore = checkSnapshotStore(o.snapshotStore, 'snapshotStore')
    this.partitionStore = checkPartitionStore(o.partitionStore, 'partitionStore')
    this.layout = new SnapshotLayout(o.job, o.partition)
    this.options = resolveSnapshotterOptions(o, this.partitionStore.path)
    this.#onEvent = checkFunction(o.onEvent, 'onEvent')
    this.#beforeCommit = checkFunction(o.beforeCommit, 'beforeCommit')
    const { conditionalPut, compareAndSwap } = this.snapshotStore.capabilities ?? {}
    // A check over a store that cannot hold a claim proves nothing (the
    // consumer group's unclaimed partitions).
    this.#claimChecked = this.#beforeCommit !== undefined && conditionalPut === true && compareAndSwap === true
    // Without create-only puts a writer with a stale view could overwrite
    // another's manifest: then every snapshot lists.
    this.#trustView = conditionalPut === true && (this.#claimChecked || this.options.writerCheck === 'create-only')
    const known = o.knownManifests as SnapshotterOptions['knownManifests']
    if (known !== undefined) {
      if (known === null || typeof known !== 'object' || !Array.isArray(known.refs) || !Array.isArray(known.valid)) {
        throw new TypeError('knownManifests must be { refs, valid } as listManifests and readValidManifests return them')
      }
      if (this.#claimChecked) {
        for (const { ref, manifest } of known.valid) this.#manifests.set(ref.key, manifest)
        // Nothing of the data listing: the parent's objects are HEADed (complete is empty).
        this.#view = { valid: [...known.valid], taken: new Set(known.refs.map((r) => r.key)), objects: new Map(), complete: new Set() }
        // The cadence starts now rather than with a GC after the first
        // snapshot: a start costs no listing beyond the caller's.
        this.#lastGcAt = performance.now()
      }
    }
    this.#logger = checkLogger(o.logger, 'logger')
    this.#verifiedFiles = checkVerifiedFiles(o.verifiedFiles)
  }

  /** The key of the last manifest this snapshotter committed (what a releasing owner tells the next one, ClaimRecord.lastSnapshot). */
  get lastCommitted(): string | undefined {
    return this.#lastCommitted
  }

  /** A snapshot is being taken. */
  get inFlight(): boolean {
    return this.#inFlight !== undefined
  }

  /**
   * Takes a snapshot. Rejects with TIDEMARK_SNAPSHOT_IN_PROGRESS while
   * another one of the same store runs, TIDEMARK_SNAPSHOT_UPLOAD_FAILED when
   * the snapshot store failed (also after its retries) or a new data object
   * vanished before the manifest referenced it (the manifest is withdrawn),
   * and TIDEMARK_SNAPSHOT_FENCED when a newer owner (higher epoch) has
   * written snapshots of the partition or another writer took the manifest
   * key, and with the error of `beforeCommit` as it is. Only manifests that
   * verify count: a listed key that does not is skipped (a
   * 'manifests-invalid' event) and never numbered after.
   */
  async takeSnapshot(options: TakeSnapshotOptions = {}): Promise<SnapshotResult> {
    checkObject(options, 'takeSnapshot options')
    const full = checkBoolean(options.full ?? false, 'full')
    const gc = checkBoolean(options.gc ?? true, 'gc')
    if (this.#closed) throw new TidemarkError('TIDEMARK_STORE_CLOSED', `the snapshotter of ${this.layout.prefix} is closed`)
    if (this.#inFlight !== undefined || busy.has(this.partitionStore)) {
      throw new TidemarkError('TIDEMARK_SNAPSHOT_IN_PROGRESS', `a snapshot of ${this.partitionStore.path} is already being taken`, { details: { job: this.layout.job, partition: this.layout.partition } })
    }
    busy.add(this.partitionStore)
    const started = snapshotStarted()
    const run = this.#take(full, gc)
    this.#inFlight = run
    try {
      const result = await run
      this.#logger.info({ ...this.#labels(), snapshot: result.id, full: result.full, bytesUploaded: result.bytesUploaded, bytesTotal: result.bytesTotal, stallMs: Math.round(result.stallMs) }, 'snapshot committed')
      snapshotEnded(this.#labels(), started, { result })
      return result
    } catch (error) {
      this.#logger.warn({ ...this.#labels(), ...errorFields(error) }, 'snapshot failed; the previous snapshot stays the latest')
      snapshotEnded(this.#labels(), started, { error })
      throw error
    } finally {
      this.#inFlight = undefined
      busy.delete(this.partitionStore)
    }
  }

  /** The partition's snapshots as listed (not read), newest first. */
  async listSnapshots(): Promise<ManifestRef[]> {
    return listManifests(this.snapshotStore, this.layout)
  }

  /** The newest snapshot whose manifest parses (its objects are not checked), or undefined. */
  async latest(): Promise<SnapshotManifest | undefined> {
    for (const ref of await listManifests(this.snapshotStore, this.layout)) {
      try {
        return await this.#read(ref)
      } catch (err) {
        if (!isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT')) throw err
      }
    }
    return undefined
  }

  /**
   * Retention and garbage collection (see collectGarbage): keeps the newest
   * `retain` snapshots, deletes older manifests, and deletes data objects
   * that no kept snapshot references once they are older than `graceMs`,
   * which includes what crashed uploads left.
   */
  async gc(options: { now?: number } = {}): Promise<GcResult> {
    checkObject(options, 'gc options')
    const now = options.now === undefined ? Date.now() : checkInt(options.now, 'now', 0)
    return this.#collect(now, false)
  }

  async #collect(now: number, afterSnapshot: boolean): Promise<GcResult> {
    const commits = this.#commits
    try {
      return await collectGarbage(this.snapshotStore, this.layout, {
        retain: this.options.retain,
        graceMs: this.options.graceMs,
        now,
        protect: this.#uploading,
        cache: this.#manifests,
        // The GC's listing is the snapshotter's full listing too; unless a
        // snapshot ran beside it (a gc() call during one), whose manifest
        // that listing may lack: then the next snapshot lists.
        observe: (listing) => {
          const current = this.#commits === commits && (afterSnapshot || this.#inFlight === undefined)
          this.#view = current ? this.#viewFromGc(listing) : undefined
        },
      })
    } catch (err) {
      // It may have deleted part of what the view holds.
      this.#view = undefined
      throw err
    }
  }

  #viewFromGc(listing: GcListing): StoreView {
    const objects = new Map<string, number>()
    for (const [key, size] of listing.objects) objects.set(key.slice(this.layout.prefix.length), size)
    return {
      valid: listing.parsed,
      taken: new Set(listing.refs.map((r) => r.key)),
      objects,
      complete: new Set(listing.parsed.map((p) => p.ref.key)),
    }
  }

  /** GC after the first snapshot of this Snapshotter, then every gcEverySnapshots snapshots or gcIntervalMs. */
  #gcDue(): boolean {
    if (!this.options.gcAfterSnapshot) return false
    this.#sinceGc++
    return this.#lastGcAt === undefined || this.#sinceGc >= this.options.gcEverySnapshots || performance.now() - this.#lastGcAt >= this.options.gcIntervalMs
  }

  /** Waits for a snapshot in flight and refuses new ones. */
  async close(): Promise<void> {
    this.#closed = true
    await this.#inFlight?.catch(() => undefined)
    await this.#prepared
  }

  /**
   * Does ahead the part of the next snapshot's work that needs no
   * checkpoint: binds `verifiedFiles` to the store's files, then hashes the
   * store's table files that the newest known snapshot (from
   * `knownManifests`) holds under the same name and size, which that
   * snapshot would otherwise hash to learn that it can reference them. A
   * runtime calls it, without waiting, once the store is open: the next
   * snapshot, often a hand-off with a new owner waiting for it, then waits
   * only for what is left of it. Files are read one at a time. It never
   * rejects; what it could not do the snapshot does.
   */
  prepare(): Promise<void> {
    this.#prepared ??= this.#prepare()
    return this.#prepared
  }

  async #prepare(): Promise<void> {
    const path = this.partitionStore.path
    if (this.#verifiedFiles !== undefined) {
      const files = this.#verifiedFiles
      this.#verifiedFiles = undefined
      await this.#hashes.seed(path, files).catch(() => undefined)
    }
    // Without a listing from the caller (a start whose own listing was not
    // current: the previous owner's hand-off committed after it), the first
    // snapshot would list the partition and hash every table file it finds
    // in the newest snapshot, with a new owner waiting when it is a hand-off.
    // A kept view is what a snapshot of a claimed partition would list anyway
    // (one listing of manifests, one of data objects), taken here instead.
    if (this.#view === undefined && this.#trustView && !this.#closed) await this.#currentView().catch(() => undefined)
    for (const file of this.#view?.valid[0]?.manifest.files ?? []) {
      if (this.#closed) return
      await this.#hashes.warm(path, file.name, file.size)
    }
  }

  async #take(forceFull: boolean, gc: boolean): Promise<SnapshotResult> {
    await this.#removeStaleCheckpoints()
    await this.prepare()
    const checkpoint = await takeCheckpoint(this.partitionStore, this.options.checkpointDir, { open: this.options.checkpoint === 'open' })
    const uploadStarted = performance.now()
    try {
      if (checkpoint.liveSetUnknown !== undefined) this.#emit({ type: 'live-set-unknown', message: checkpoint.liveSetUnknown })
      let result: SnapshotResult
      try {
        result = await this.#upload(checkpoint, forceFull, uploadStarted)
      } catch (err) {
        // A failure this snapshotter cannot explain: list again next time.
        this.#view = undefined
        throw err
      }
      if (gc && this.#gcDue()) {
        try {
          result.gc = await this.#collect(Date.now(), true)
          this.#sinceGc = 0
          this.#lastGcAt = performance.now()
        } catch (error) {
          // Not counted as a run: the next snapshot tries again.
          this.#emit({ type: 'gc-failed', error: asTidemarkError(error, 'TIDEMARK_DFS_REQUEST_FAILED', 'garbage collection failed') })
        }
      }
      return result
    } finally {
      await rm(checkpoint.dir, { recursive: true, force: true })
    }
  }

  async #upload(checkpoint: Checkpoint, forceFull: boolean, uploadStarted: number): Promise<SnapshotResult> {
    const { epoch } = this.options
    const view = await this.#currentView()
    checkFence(view.valid.map((v) => v.ref), this.options.epoch)
    const sequence = nextSequence(this.layout, this.options.epoch, view.valid.map((v) => v.ref), view.taken)
    const id = snapshotId(epoch, sequence)

    // What the newest snapshot already holds, by name + size + sha256. Only
    // the newest: every GC keeps it and what it references (also a GC by
    // another process with retain 1), and a table file live now that existed
    // then was live then, so older snapshots add nothing.
    const parent = view.valid[0]?.manifest
    const available = await availableObjects(parent, view, this.layout, (keys) => this.#dfs('check the referenced objects', () => mapLimit(keys, 8, (k) => this.snapshotStore.head(this.layout.dataKey(k)))), (event) => this.#emit(event))
    const held = new Map<string, SnapshotFile>()
    for (const file of parent?.files ?? []) if (available.has(file.object)) held.set(`${file.name}\u0000${file.size}\u0000${file.sha256}`, file)
    const heldNames = new Set([...held.values()].map((f) => `${f.name}\u0000${f.size}`))

    const reuse = new Map<string, SnapshotFile>()
    for (const file of checkpoint.files) {
      if (!heldNames.has(`${file.name}\u0000${file.size}`)) continue
      const match = held.get(`${file.name}\u0000${file.size}\u0000${await this.#hashes.hash(file)}`)
      if (match !== undefined) reuse.set(file.name, match)
    }
    const stateBytes = checkpoint.files.reduce((sum, f) => sum + f.size, 0)
    const decision = planCompaction({
      forceFull,
      hasParent: parent !== undefined,
      stateBytes,
      newBytes: archiveSize(checkpoint.files.filter((f) => !reuse.has(f.name))),
      referenced: [...reuse.values()].map((f) => ({ key: f.object, size: available.get(f.object)! })),
      maxAmplification: this.options.maxAmplification,
      maxChainLength: this.options.maxChainLength,
    })
    if (decision.full) reuse.clear()

    const fresh = checkpoint.files.filter((f) => !reuse.has(f.name))
    const token = randomBytes(4).toString('hex')
    const groups = groupBySize(fresh, this.options.maxObjectBytes)
    const uploaded = new Map<string, PackedEntry & { object: string }>()
    const newObjects: SnapshotObject[] = []
    for (let n = 0; n < groups.length; n++) this.#uploading.add(this.layout.relativeDataKey(id, token, n))
    try {
      await this.#dfs('upload the data objects', () => mapLimit(groups, this.options.uploadConcurrency, async (group, n) => {
        const key = this.layout.relativeDataKey(id, token, n)
        const size = archiveSize(group)
        const { stream, entries } = packFiles(group)
        try {
          await this.snapshotStore.put(this.layout.dataKey(key), stream, { contentLength: size })
        } finally {
          stream.destroy()
        }
        for (const entry of await entries) uploaded.set(entry.name, { ...entry, object: key })
        newObjects.push({ key, size })
      }))
      for (const file of fresh) {
        const entry = uploaded.get(file.name)!
        this.#hashes.remember(file, entry.sha256)
      }

      const { files, manifest } = describeSnapshot({ layout: this.layout, id, epoch, sequence, parent, checkpoint, stateBytes, reuse, uploaded, newObjects, available })
      const key = this.layout.manifestKey(epoch, sequence)
      const body = encodeManifest(manifest)
      await this.#commit(key, body)
      this.#commits++
      this.#lastCommitted = key
      // With a trusted view the ownership check, made after the upload, is
      // the object check too: a GC keeps objects whose id is above every
      // manifest, and only a newer owner (who takes the claim first, which
      // the check finds) can write one above this snapshot's. An object
      // deleted outside those rules is found by the next full listing
      // (the periodic GC) or by a restore, which skips such a snapshot.
      // Without a claim a writer of a higher epoch may have written one
      // unseen, and its GC may take these objects: they are checked.
      if (!this.#claimChecked) await this.#checkUploaded(key, newObjects)
      this.#manifests.set(key, manifest)
      const current = this.#view
      if (current !== undefined) {
        current.valid.unshift({ ref: { key, id, epoch, sequence, size: body.byteLength, lastModified: new Date() }, manifest })
        current.taken.add(key)
        for (const o of newObjects) current.objects.set(o.key, o.size)
        current.complete.add(key)
      }
      this.#hashes.retain(checkpoint.files)
      return {
        id,
        key,
        epoch,
        sequence,
        positions: checkpoint.positions,
        full: manifest.full,
        ...(manifest.full ? { fullReason: decision.reason ?? 'requested' } : {}),
        files,
        bytesTotal: stateBytes,
        bytesUploaded: newObjects.reduce((sum, o) => sum + o.size, 0) + body.byteLength,
        objects: newObjects.map((o) => this.layout.dataKey(o.key)),
        stallMs: checkpoint.stallMs,
        uploadMs: performance.now() - uploadStarted,
      }
    } finally {
      for (let n = 0; n < groups.length; n++) this.#uploading.delete(this.layout.relativeDataKey(id, token, n))
    }
  }

  /**
   * Writes the manifest: the commit point. Create-only where the store can,
   * so two writers of one sequence cannot both win: that collision is what
   * tells a writer with a trusted view that another one wrote meanwhile.
   */
  async #commit(key: string, body: Buffer): Promise<void> {
    if (!this.#trustView) await this.#fenceByListing(key)
    // Last, so that an owner's proof of ownership is as fresh as it can be
    // when the manifest lands; its error is the caller's, passed as it is.
    if (this.#beforeCommit !== undefined) await this.#beforeCommit()
    const ifNoneMatch = this.snapshotStore.capabilities.conditionalPut
    try {
      try {
        await this.snapshotStore.put(key, body, { contentLength: body.byteLength, ifNoneMatch })
      } catch (err) {
        // A store may bound create-only bodies (S3: one request of at most
        // partSize). Fencing is an addition, not what correctness rests on
        // with a claim (its check) or without a trusted view (the listing
        // above); a trusted view without a claim relied on the collision,
        // so it lists now, as an untrusted one would have.
        if (!(ifNoneMatch && err instanceof RangeError)) throw err
        if (this.#trustView && !this.#claimChecked) await this.#fenceByListing(key)
        await this.snapshotStore.put(key, body, { contentLength: body.byteLength })
      }
    } catch (err) {
      if (isTidemarkError(err, 'TIDEMARK_DFS_OBJECT_EXISTS')) {
        // A retry of our own put whose first answer was lost finds our manifest
        // there. Anything else there, larger, smaller or junk, took the key:
        // read at most one byte more than ours, since a larger object differs
        // whatever it holds (and must not fail the read: that would be a
        // retriable error for what no retry can change).
        const existing = await this.#dfs('read back the manifest', async () => {
          try {
            return await readAll(await this.snapshotStore.get(key, { metadata: true }), body.byteLength)
          } catch (readErr) {
            if (readErr instanceof RangeError) return undefined
            throw readErr
          }
        })
        if (existing?.equals(body) === true) return
        // Numbered from a kept view, this writer may meet a key that anyone
        // with write access planted: that is no other writer, and the next
        // snapshot, listing, numbers past it (a GET, on a collision only).
        if (this.#trustView && !this.#claimChecked && !(await this.#holdsManifest(key))) {
          throw new TidemarkError(
            'TIDEMARK_SNAPSHOT_UPLOAD_FAILED',
            `snapshot of ${this.layout.prefix} failed: ${key} holds something that is not a manifest of this partition; the next snapshot lists the manifests and numbers past it; the previous snapshot stays the latest`,
            { cause: err, retriable: true, details: { job: this.layout.job, partition: this.layout.partition, key } },
          )
        }
        throw new TidemarkError('TIDEMARK_SNAPSHOT_FENCED', `another writer committed snapshot ${key} first; is the partition owned twice?`, { cause: err, details: { key } })
      }
      throw uploadFailed('write the manifest', this.layout, err)
    }
  }

  /** Whether `key` holds a manifest that verifies (someone else's snapshot), read in full. */
  async #holdsManifest(key: string): Promise<boolean> {
    const parsed = this.layout.parseManifestKey(key)!
    try {
      await this.#dfs('read the manifest in the way', () => readManifest(this.snapshotStore, this.layout, { key, ...parsed, size: 0, lastModified: new Date(0) }))
      return true
    } catch (err) {
      if (isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT')) return false
      throw err
    }
  }

  /**
   * Lists the manifests and fails when one of a newer epoch verifies (only
   * those need reading), or when `key` is taken: a put that is not
   * create-only would overwrite it.
   */
  async #fenceByListing(key: string): Promise<void> {
    const refs = await this.#dfs('list the snapshots', () => listManifests(this.snapshotStore, this.layout))
    checkFence((await this.#validRefs(refs.filter((r) => r.epoch > this.options.epoch))).map((v) => v.ref), this.options.epoch)
    if (refs.some((r) => r.key === key)) {
      throw new TidemarkError('TIDEMARK_SNAPSHOT_FENCED', `another writer committed snapshot ${key} first; is the partition owned twice?`, { details: { key } })
    }
  }

  /**
   * A new data object can vanish between its upload and the manifest: a gc
   * of another process with a short grace (or a clock far ahead) finds it
   * unreferenced. A manifest is a success only once every object it added is
   * there with its size (one HEAD each, usually one); otherwise it is
   * withdrawn, and also when that cannot be checked.
   */
  async #checkUploaded(key: string, objects: readonly SnapshotObject[]): Promise<void> {
    let vanished: string[]
    try {
      const infos = await mapLimit(objects, 8, (o) => this.snapshotStore.head(this.layout.dataKey(o.key)))
      vanished = objects.filter((o, i) => infos[i]?.size !== o.size).map((o) => this.layout.dataKey(o.key))
    } catch (err) {
      const withdrawn = await this.#withdraw(key)
      throw uploadFailed(`check the uploaded data objects (manifest ${key} ${withdrawn})`, this.layout, err)
    }
    if (vanished.length === 0) return
    const withdrawn = await this.#withdraw(key)
    throw new TidemarkError(
      'TIDEMARK_SNAPSHOT_UPLOAD_FAILED',
      `snapshot of ${this.layout.prefix} failed: data objects ${vanished.join(', ')} vanished before manifest ${key} referenced them (a gc with a short grace?); the manifest ${withdrawn}; the previous snapshot stays the latest`,
      { retriable: true, details: { job: this.layout.job, partition: this.layout.partition, key, vanished } },
    )
  }

  /** Deletes a manifest this writer just committed; says how that went, for the error that follows. */
  async #withdraw(key: string): Promise<string> {
    try {
      await this.snapshotStore.deleteMany([key])
      return 'was deleted'
    } catch (err) {
      // A restore verifies objects and skips such a manifest; gc removes it in time.
      return `could not be deleted (${(err as Error)?.message ?? String(err)})`
    }
  }

  /**
   * The view a snapshot plans with. Trusted, it is kept between full
   * listings (the first snapshot, after a failure, each GC run); otherwise
   * the manifests are listed for every snapshot and the parent's objects
   * are checked with a HEAD each, as before views existed.
   */
  async #currentView(): Promise<StoreView> {
    const known = this.#view
    if (known !== undefined && this.#trustView) return known
    const refs = await this.#dfs('list the snapshots', () => listManifests(this.snapshotStore, this.layout))
    const valid = await this.#validRefs(refs)
    const objects = new Map<string, number>()
    // Untrusted, the objects a snapshot reuses are HEADed each time (as
    // many as the parent has); trusted, one data listing serves until the next.
    if (this.#trustView) {
      const listed = await this.#dfs('list the data objects', () => listObjects(this.snapshotStore, this.layout.dataPrefix))
      for (const info of listed) objects.set(info.key.slice(this.layout.prefix.length), info.size)
    }
    const complete = new Set(this.#trustView ? valid.map((v) => v.ref.key) : [])
    const view: StoreView = { valid, taken: new Set(refs.map((r) => r.key)), objects, complete }
    this.#view = view
    return view
  }

  /** The listed manifests that verify, newest first; the others are reported once and otherwise ignored. */
  async #validRefs(refs: readonly ManifestRef[]): Promise<Array<{ ref: ManifestRef; manifest: SnapshotManifest }>> {
    if (refs.length === 0) return []
    const { valid, invalid } = await this.#dfs('read the manifests', () => readValidManifests(this.snapshotStore, this.layout, refs, { cache: this.#manifests }))
    const fresh = invalid.filter((m) => !this.#reportedInvalid.has(m.ref.key))
    if (fresh.length > 0) {
      for (const m of fresh) this.#reportedInvalid.add(m.ref.key)
      this.#emit({ type: 'manifests-invalid', manifests: fresh.map((m) => ({ key: m.ref.key, reason: m.reason, message: m.message })) })
    }
    return valid
  }

  async #read(ref: ManifestRef): Promise<SnapshotManifest> {
    const cached = this.#manifests.get(ref.key)
    if (cached !== undefined) return cached
    const manifest = await readManifest(this.snapshotStore, this.layout, ref)
    this.#manifests.set(ref.key, manifest)
    return manifest
  }

  /** Checkpoint directories of a process that died mid-snapshot. */
  async #removeStaleCheckpoints(): Promise<void> {
    if (this.#staleCheckpointsRemoved) return
    this.#staleCheckpointsRemoved = true
    // Only directories with the checkpoint marker: the rest is not ours to delete.
    await removeStaleCheckpoints(this.options.checkpointDir)
  }

  async #dfs<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn()
    } catch (err) {
      throw uploadFailed(what, this.layout, err)
    }
  }

  #labels(): { job: string; partition: string } {
    return { job: this.layout.job, partition: this.layout.partition }
  }

  #emit(event: SnapshotterEvent): void {
    const { type, ...fields } = event
    this.#logger.warn({ ...this.#labels(), event: type, ...fields }, `snapshotter: ${type}`)
    callListener(() => this.#onEvent?.(event), undefined, this.#logger, { ...this.#labels(), event: type })
  }
}
