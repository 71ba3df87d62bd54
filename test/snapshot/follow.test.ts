// SnapshotFollower (a standby's warm copy of a partition's snapshots), the
// restore from that copy, and the restore over a local store that is only
// behind: each downloads the files it lacks and links the rest.
import { randomBytes } from 'node:crypto'
import { existsSync, mkdtempSync, readdirSync, statSync } from 'node:fs'
import { open as openFile, readdir, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { afterEach, describe, expect, it, onTestFinished } from 'vitest'
import { S3SnapshotStore } from '../../connectors/s3/index.js'
import type { PartitionStore} from '../../src/index.js';
import {
  FsSnapshotStore, restoreSnapshot, SnapshotFollower, SnapshotPacer, Snapshotter, TidemarkError,
  type FollowerClock, type SnapshotFollowerEvent, type SnapshotResult, type SnapshotStore, type SnapshotterOptions,
} from '../../src/index.js'
import { sha256File } from '../../src/util/index.js'
import { ManualClock, until } from '../helpers/manual-clock.js'
import { useTestBucket } from '../helpers/s3-bucket.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { keyOf, kv, levelDigest, openKvStore, range, storeDigest, TOPIC, waitForCompactions } from './helpers.js'

/** About 8 MiB of incompressible values: several table files, several ranged reads. */
const KEYS = 8000
const open: Array<{ close(): Promise<void> }> = []
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()))
})

const padded = (size: number): number => 512 + Math.ceil(size / 512) * 512
/** The bytes a download of these files reads: each file's tar header, data and padding. */
const tarBytes = (files: ReadonlyArray<{ size: number }>): number => files.reduce((sum, f) => sum + padded(f.size), 0)
const uploaded = (s: SnapshotResult) => s.files.filter((f) => f.uploaded)

/** Counts the bytes of data objects read through the store's get (one wrapped call). */
function countGets(dfs: SnapshotStore): { bytes: number; requests: number } {
  const counter = { bytes: 0, requests: 0 }
  const get = dfs.get.bind(dfs)
  dfs.get = (async (key, options) => {
    const body = await get(key, options)
    if (!key.includes('/data/')) return body
    counter.requests++
    return Readable.from((async function* () {
      for await (const chunk of body as AsyncIterable<Buffer>) {
        counter.bytes += chunk.byteLength
        yield chunk
      }
    })())
  }) as typeof dfs.get
  return counter
}

interface Source {
  dir: string
  dfs: SnapshotStore
  store: PartitionStore
  snapshotter: Snapshotter
  /** Rewrites `percent` % of the keys with new random values (table files that no snapshot holds yet) and snapshots. */
  next(percent?: number, options?: { full?: boolean }): Promise<SnapshotResult>
  digest(): Promise<{ sha256: string; entries: number }>
}

async function source(dir: string, options: Partial<SnapshotterOptions> = {}, dfs: SnapshotStore = new FsSnapshotStore({ root: join(dir, 'dfs') })): Promise<Source> {
  const store = await openKvStore(join(dir, 'store'))
  open.push(store)
  const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0, gcAfterSnapshot: false, ...options })
  open.push(snapshotter)
  let offset = 0n
  let round = 0
  const write = async (keys: Iterable<number>): Promise<void> => {
    let tx = store.transaction()
    for (const i of keys) {
      tx.value(kv).put(keyOf(i), randomBytes(1000))
      if (tx.size >= 1000) {
        await tx.commit({ topic: TOPIC, partition: 0, offset: offset++ })
        tx = store.transaction()
      }
    }
    if (tx.size > 0) await tx.commit({ topic: TOPIC, partition: 0, offset: offset++ })
  }
  await write(range(0, KEYS))
  await storeDigest(store)
  await waitForCompactions(store.path, 300)
  return {
    dir,
    dfs,
    store,
    snapshotter,
    async next(percent = 1, opts = {}) {
      if (round++ > 0) {
        const step = Math.round(100 / percent)
        await write((function* () { for (let i = round; i < KEYS; i += step) yield i })())
      }
      return snapshotter.takeSnapshot(opts)
    },
    digest: () => storeDigest(store),
  }
}

function follower(s: { dfs: SnapshotStore; dir: string }, options: Partial<ConstructorParameters<typeof SnapshotFollower>[0]> = {}): { follower: SnapshotFollower; events: SnapshotFollowerEvent[] } {
  const events: SnapshotFollowerEvent[] = []
  const f = new SnapshotFollower({ snapshotStore: s.dfs, job: 'job', partition: 0, dir: join(s.dir, 'copy'), onEvent: (e) => events.push(e), ...options })
  return { follower: f, events }
}

/** Restores from the follower's copy into a fresh directory and returns the state's digest. */
async function restoreFrom(s: Source, f: SnapshotFollower, name: string): Promise<{ digest: { sha256: string; entries: number }; bytesDownloaded: number; snapshot: string | undefined }> {
  const target = join(s.dir, name)
  const result = await restoreSnapshot({ snapshotStore: s.dfs, job: 'job', partition: 0, target, reuse: await f.reusableFiles() })
  return { digest: await levelDigest(target), bytesDownloaded: result.bytesDownloaded, snapshot: result.snapshot?.id }
}

describe('SnapshotFollower', () => {
  it('follows three successive snapshots, downloading only the table files each one added', { timeout: 60_000 }, async () => {
    const s = await source(tempDir('tidemark-follow-'))
    const counter = countGets(s.dfs)
    const { follower: f, events } = follower(s)
    const snaps: SnapshotResult[] = []
    let total = 0
    for (let i = 0; i < 3; i++) {
      const snap = await s.next()
      snaps.push(snap)
      const before = counter.bytes
      const result = await f.sync()
      const want = i === 0 ? snap.files : uploaded(snap)
      // Exactly the files the copy lacked: what the snapshot uploaded over its parent, which the copy matched.
      expect(counter.bytes - before).toBe(tarBytes(want))
      expect(result).toMatchObject({ changed: true, bytesDownloaded: tarBytes(want), filesDownloaded: want.length, filesKept: snap.files.length - want.length, skipped: [] })
      expect(result.snapshot?.id).toBe(snap.id)
      total += tarBytes(want)
      expect(f.status()).toMatchObject({ snapshot: { id: snap.id, epoch: snap.epoch, sequence: snap.sequence, positions: snap.positions }, bytesHeld: snap.bytesTotal, filesHeld: snap.files.length, bytesDownloaded: total, snapshotsBehind: 0, bytesBehind: 0, syncing: false, lastError: undefined })
    }
    expect(uploaded(snaps[2]!).some((file) => file.name.endsWith('.ldb'))).toBe(true)
    expect(tarBytes(uploaded(snaps[2]!))).toBeLessThan(snaps[2]!.bytesTotal / 4)
    // Nothing new: one listing, no download.
    const idle = await f.sync()
    expect(idle).toMatchObject({ changed: false, bytesDownloaded: 0 })
    expect(events.map((e) => e.type)).toEqual(['synced', 'synced', 'synced'])
    // The copy holds the newest snapshot's files and nothing else.
    expect((await readdir(join(s.dir, 'copy', 'files'))).length).toBe(snaps[2]!.files.length)
    expect((await restoreFrom(s, f, 'restored')).digest).toEqual(await s.digest())
  })

  it('a snapshot GC\'d under a sync: the sync lists again and follows the new newest, reusing what it holds', { timeout: 60_000 }, async () => {
    const s = await source(tempDir('tidemark-follow-'), { retain: 1, graceMs: 0 })
    await s.next()
    const { follower: f, events } = follower(s)
    await f.sync()
    const s2 = await s.next()
    // Fault injection: the follower's first read of s2's data runs after a
    // full snapshot s3 was taken and GC (retain 1) deleted s2 and its objects.
    const get = s.dfs.get.bind(s.dfs)
    let s3: SnapshotResult | undefined
    let injected = false
    s.dfs.get = (async (key, options) => {
      if (!injected && key.includes('/data/') && key.includes(s2.id)) {
        injected = true
        s.dfs.get = get
        s3 = await s.next(1, { full: true })
        const gc = await s.snapshotter.gc()
        expect(gc.retained).toEqual([s3.id])
      }
      return get(key, options)
    }) as typeof s.dfs.get
    const result = await f.sync()
    expect(injected).toBe(true)
    expect(result.snapshot?.id).toBe(s3!.id)
    expect(result.skipped).toEqual([])
    expect(events.filter((e) => e.type !== 'synced')).toEqual([])
    // s3 is full: every file was uploaded again, but the copy kept s1's that s3 still holds.
    expect(result.filesKept).toBeGreaterThan(0)
    expect(result.bytesDownloaded).toBeLessThan(tarBytes(s3!.files))
    expect((await restoreFrom(s, f, 'restored')).digest).toEqual(await s.digest())
  })

  it('never takes a corrupt object: the snapshot is skipped and reported, the copy stays at the last one that verifies', { timeout: 60_000 }, async () => {
    const s = await source(tempDir('tidemark-follow-'))
    const s1 = await s.next()
    const digest1 = await s.digest()
    const { follower: f, events } = follower(s)
    await f.sync()
    const s2 = await s.next()
    // One bit flipped in the data of a table file that s2 added.
    const victim = uploaded(s2).find((file) => file.name.endsWith('.ldb'))!
    const handle = await openFile(join(s.dir, 'dfs', 'job', '0', victim.object), 'r+')
    const byte = Buffer.alloc(1)
    await handle.read(byte, 0, 1, victim.offset + 100)
    byte[0] = byte[0]! ^ 0x10
    await handle.write(byte, 0, 1, victim.offset + 100)
    await handle.close()

    const result = await f.sync()
    expect(result).toMatchObject({ changed: false, snapshot: { id: s1.id } })
    expect(result.skipped).toEqual([expect.objectContaining({ id: s2.id, reason: 'checksum-mismatch' })])
    expect(events.filter((e) => e.type === 'skipped')).toHaveLength(1)
    // Not kept, not served: no file of the copy is the damaged one, and every file verifies.
    const files = await f.reusableFiles()
    expect(files.map((file) => file.name).sort()).toEqual(s1.files.map((file) => file.name).sort())
    for (const file of files) expect(await sha256File(file.path)).toBe(file.sha256)
    expect(readdirSync(join(s.dir, 'copy', 'files')).length).toBe(s1.files.length)
    // A skipped snapshot is not downloaded again.
    expect(await f.sync()).toMatchObject({ changed: false, bytesDownloaded: 0, skipped: [] })
    expect(f.status()).toMatchObject({ snapshot: { id: s1.id }, snapshotsBehind: 0 })
    // A restore from the copy skips s2 as well and restores s1 exactly.
    const restored = await restoreFrom(s, f, 'restored')
    expect(restored).toMatchObject({ snapshot: s1.id, bytesDownloaded: 0 })
    expect(restored.digest).toEqual(digest1)
  })

  it('a failing store fails the sync and keeps the last good copy; the lag is reported', { timeout: 60_000 }, async () => {
    const s = await source(tempDir('tidemark-follow-'))
    const s1 = await s.next()
    const { follower: f, events } = follower(s)
    await f.sync()
    const s2 = await s.next()
    const get = s.dfs.get.bind(s.dfs)
    s.dfs.get = (async (key, options) => {
      if (key.includes('/data/')) throw new TidemarkError('TIDEMARK_DFS_UNAVAILABLE', 'injected')
      return get(key, options)
    }) as typeof s.dfs.get
    await expect(f.sync()).rejects.toMatchObject({ code: 'TIDEMARK_DFS_UNAVAILABLE' })
    expect(events.at(-1)).toMatchObject({ type: 'failed', error: { code: 'TIDEMARK_DFS_UNAVAILABLE' } })
    expect(f.status()).toMatchObject({
      snapshot: { id: s1.id }, newest: { id: s2.id }, snapshotsBehind: 1,
      bytesBehind: uploaded(s2).reduce((sum, file) => sum + file.size, 0), lastError: { code: 'TIDEMARK_DFS_UNAVAILABLE' },
    })
    expect((await readdir(join(s.dir, 'copy', 'files'))).length).toBe(s1.files.length)
    s.dfs.get = get
    expect(await f.sync()).toMatchObject({ changed: true, snapshot: { id: s2.id } })
    expect(f.status()).toMatchObject({ snapshotsBehind: 0, bytesBehind: 0, lastError: undefined })
  })

  it('a restore from the copy downloads only what came after the last sync, and restores the newest state', { timeout: 60_000 }, async () => {
    const s = await source(tempDir('tidemark-follow-'))
    await s.next()
    const { follower: f } = follower(s)
    await f.sync()
    await s.next()
    await f.sync()
    const s3 = await s.next()
    const counter = countGets(s.dfs)
    const plain = await restoreSnapshot({ snapshotStore: s.dfs, job: 'job', partition: 0, target: join(s.dir, 'plain') })
    expect(plain.bytesDownloaded).toBe(tarBytes(s3.files))
    const before = counter.bytes
    const restored = await restoreFrom(s, f, 'restored')
    expect(restored.snapshot).toBe(s3.id)
    expect(counter.bytes - before).toBe(tarBytes(uploaded(s3)))
    expect(restored.bytesDownloaded).toBe(tarBytes(uploaded(s3)))
    expect(restored.digest).toEqual(await s.digest())
    // The restored store holds its own links to the files: removing the copy leaves it whole.
    await f.dispose()
    expect(existsSync(join(s.dir, 'copy'))).toBe(false)
    expect(await levelDigest(join(s.dir, 'restored'))).toEqual(restored.digest)
    await expect(f.sync()).rejects.toThrow(/disposed/)
  })

  it('a copy on another file system than the target is copied by the restore instead of linked', { timeout: 60_000 }, async () => {
    const s = await source(tempDir('tidemark-follow-'))
    await s.next()
    // /dev/shm is a tmpfs here, the temp directory is not: link() fails with EXDEV between them.
    const elsewhere = mkdtempSync(join('/dev/shm', 'tidemark-follow-'))
    onTestFinished(() => rm(elsewhere, { recursive: true, force: true }))
    expect(statSync(elsewhere).dev).not.toBe(statSync(s.dir).dev)
    const { follower: f } = follower(s, { dir: join(elsewhere, 'copy') })
    await f.sync()
    const s2 = await s.next()
    const restored = await restoreFrom(s, f, 'restored')
    expect(restored).toMatchObject({ snapshot: s2.id, bytesDownloaded: tarBytes(uploaded(s2)) })
    expect(restored.digest).toEqual(await s.digest())
  })

  it('polls on its clock until stopped', { timeout: 60_000 }, async () => {
    const s = await source(tempDir('tidemark-follow-'))
    const s1 = await s.next()
    const clock = new ManualClock()
    const { follower: f, events } = follower(s, { clock })
    const synced = (id: string): Promise<void> => until(() => events.some((e) => e.type === 'synced' && e.snapshot.id === id))
    f.start({ intervalMs: 1000 })
    await synced(s1.id)
    const s2 = await s.next()
    await until(() => clock.pending === 1)
    clock.advance(999)
    expect(f.status().syncing).toBe(false)
    clock.advance(1)
    await synced(s2.id)
    await f.stop()
    expect(clock.pending).toBe(0)
    await s.next()
    clock.advance(10_000)
    expect(f.status()).toMatchObject({ syncing: false, snapshot: { id: s2.id } })
    expect(events.map((e) => e.type)).toEqual(['synced', 'synced'])
  })

  it('start() refuses options it does not know and a pacer that is not one', async () => {
    const s = await source(tempDir('tidemark-follow-'))
    const { follower: f } = follower(s)
    expect(() => f.start({ intervalMs: 1000, every: 5 } as never)).toThrow(/every/)
    expect(() => f.start({ pacer: { slots: 4 } } as never)).toThrow(/pacer must be a SnapshotPacer/)
    expect(() => f.start({ debt: 5 } as never)).toThrow(/debt/)
    expect(f.status().syncing).toBe(false)
  })

  it('a debt() that throws is logged and counts as 0: the follower still takes its turn', { timeout: 60_000 }, async () => {
    const s = await source(tempDir('tidemark-follow-'))
    const s1 = await s.next()
    const errors: string[] = []
    const logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: (_f: object, message: string) => { errors.push(message) } }
    const { follower: f, events } = follower(s, { clock: new ManualClock(), logger })
    f.start({ intervalMs: 1000, pacer: new SnapshotPacer({ slots: 1 }), debt: () => { throw new Error('debt bug') } })
    await until(() => events.some((e) => e.type === 'synced' && e.snapshot.id === s1.id))
    expect(errors).toEqual(['a listener threw; what called it goes on'])
    await f.stop()
  })

  it('paces its downloads to maxBytesPerSecond', { timeout: 60_000 }, async () => {
    const s = await source(tempDir('tidemark-follow-'))
    const s1 = await s.next()
    // Virtual time: a wait moves the clock on at once.
    let now = 0
    const clock: FollowerClock = { now: () => now, setTimeout: (fn, ms) => { now += ms; setImmediate(fn) }, clearTimeout: () => undefined }
    const rate = 1024 * 1024
    const { follower: f } = follower(s, { clock, maxBytesPerSecond: rate, downloadConcurrency: 1 })
    const result = await f.sync()
    expect(result.bytesDownloaded).toBe(tarBytes(s1.files))
    // The first second's worth passes at once, the rest at the rate.
    expect(now).toBeCloseTo(((result.bytesDownloaded - rate) / rate) * 1000, -1)
  })

  it('stays within maxDiskBytes: a snapshot too large is skipped; one that fits only without the old files prunes them first', { timeout: 60_000 }, async () => {
    const s = await source(tempDir('tidemark-follow-'))
    const s1 = await s.next()
    const small = follower(s, { maxDiskBytes: s1.bytesTotal - 1, dir: join(s.dir, 'small') })
    expect(await small.follower.sync()).toMatchObject({ changed: false, bytesDownloaded: 0, skipped: [{ id: s1.id, reason: 'disk-budget' }] })
    expect(small.events.map((e) => e.type)).toEqual(['skipped'])
    expect(small.follower.status()).toMatchObject({ snapshot: undefined, snapshotsBehind: 0, bytesHeld: 0 })

    const { follower: f } = follower(s)
    await f.sync()
    const s2 = await s.next(5)
    // Room for s2, not for s1's copy and s2's new files together.
    const budget = s2.bytesTotal
    const held = s1.bytesTotal + uploaded(s2).reduce((sum, file) => sum + file.size, 0)
    expect(held).toBeGreaterThan(budget)
    const tight = follower(s, { maxDiskBytes: budget, dir: join(s.dir, 'copy') })
    // At its first read, the follower has removed what s2 does not hold, so that the copy and the download fit together.
    const s2Files = new Set(s2.files.map((file) => `${file.name}.${file.sha256}`))
    let atFirstRead: { foreign: string[]; bytes: number } | undefined
    const get = s.dfs.get.bind(s.dfs)
    s.dfs.get = (async (key, options) => {
      if (atFirstRead === undefined && key.includes('/data/')) {
        const names = readdirSync(join(s.dir, 'copy', 'files'))
        atFirstRead = { foreign: names.filter((n) => !s2Files.has(n)), bytes: duBytes(join(s.dir, 'copy', 'files')) }
      }
      return get(key, options)
    }) as typeof s.dfs.get
    const result = await tight.follower.sync()
    expect(result).toMatchObject({ changed: true, snapshot: { id: s2.id }, filesDownloaded: uploaded(s2).length })
    expect(atFirstRead).toEqual({ foreign: [], bytes: s2.bytesTotal - uploaded(s2).reduce((sum, file) => sum + file.size, 0) })
    expect(duBytes(join(s.dir, 'copy', 'files'))).toBe(s2.bytesTotal)
    expect((await restoreFrom(s, tight.follower, 'restored')).digest).toEqual(await s.digest())
  })

  it('takes up the copy an earlier follower left, hashing it again: a damaged file is dropped and downloaded again', { timeout: 60_000 }, async () => {
    const s = await source(tempDir('tidemark-follow-'))
    const s1 = await s.next()
    await follower(s).follower.sync()
    const counter = countGets(s.dfs)
    const again = follower(s)
    expect(await again.follower.sync()).toMatchObject({ changed: false, snapshot: { id: s1.id }, bytesDownloaded: 0 })
    expect(counter.bytes).toBe(0)

    const victim = (await again.follower.reusableFiles()).find((file) => file.name.endsWith('.ldb'))!
    await writeFile(victim.path, randomBytes(victim.size))
    const third = follower(s)
    const result = await third.follower.sync()
    expect(third.events[0]).toEqual({ type: 'files-dropped', names: [victim.name] })
    expect(result).toMatchObject({ changed: true, snapshot: { id: s1.id }, filesDownloaded: 1, bytesDownloaded: padded(victim.size) })
    for (const file of await third.follower.reusableFiles()) expect(await sha256File(file.path)).toBe(file.sha256)
  })

  it('refuses options it does not know and values out of range', () => {
    const dfs = new FsSnapshotStore({ root: '/tmp/none' })
    expect(() => new SnapshotFollower({ snapshotStore: dfs, job: 'job', partition: 0, dir: '/tmp/x', maxDiskBytes: -1 })).toThrow(/maxDiskBytes must be an integer from 0/)
    expect(() => new SnapshotFollower({ snapshotStore: dfs, job: 'job', partition: 0, dir: '' })).toThrow(TypeError)
    expect(() => new SnapshotFollower({ snapshotStore: dfs, job: 'job', partition: 0, dir: '/tmp/x', standby: true } as never)).toThrow(/unknown follower option 'standby'/)
    expect(() => new SnapshotFollower({ snapshotStore: dfs, job: 'job', partition: 0, dir: '/tmp/x' }).start({ intervalMs: 0 })).toThrow(/intervalMs must be an integer from 1/)
  })
})

describe('restore over a local store that is behind', () => {
  it('keeps the table files it shares with the snapshot and downloads only the rest', { timeout: 60_000 }, async () => {
    const s = await source(tempDir('tidemark-behind-'))
    const s1 = await s.next()
    const target = join(s.dir, 'target')
    const first = await restoreSnapshot({ snapshotStore: s.dfs, job: 'job', partition: 0, target })
    expect(first.bytesDownloaded).toBe(tarBytes(s1.files))
    await s.next()
    const s3 = await s.next()
    // What the store there holds of s3: its table files of the same name, size and hash.
    const local = new Map<string, string>()
    for (const name of await readdir(target)) if (name.endsWith('.ldb')) local.set(name, await sha256File(join(target, name)))
    const missing = s3.files.filter((file) => local.get(file.name) !== file.sha256)
    // The fixture's precondition: some table files are shared, so there is
    // something to keep. How many depends on the compactions LevelDB ran
    // between the snapshots (it asked for less than half the bytes before,
    // and a compaction that rewrote more failed the test with the restore
    // right); what is checked is that exactly the missing ones are fetched.
    expect(missing.length).toBeLessThan(s3.files.length)

    const counter = countGets(s.dfs)
    const events: string[] = []
    const result = await restoreSnapshot({ snapshotStore: s.dfs, job: 'job', partition: 0, target, onEvent: (e) => events.push(e.type) })
    expect(result).toMatchObject({ source: 'snapshot', snapshot: { id: s3.id }, bytesDownloaded: tarBytes(missing) })
    expect(counter.bytes).toBe(tarBytes(missing))
    expect(events).toContain('local-store-replaced')
    expect(await levelDigest(target)).toEqual(await s.digest())
  })
})

describe('SnapshotFollower on S3', () => {
  const bucket = useTestBucket('follow')

  it('follows two snapshots with ranged reads of only the new files, and a restore from the copy reads only the delta', { timeout: 120_000 }, async () => {
    const dfs = new S3SnapshotStore(bucket.storeOptions(randomName('p')))
    open.push(dfs)
    const s = await source(tempDir('tidemark-follow-s3-'), {}, dfs)
    const counter = countGets(dfs)
    const { follower: f } = follower(s)
    const s1 = await s.next()
    expect((await f.sync()).bytesDownloaded).toBe(tarBytes(s1.files))
    const s2 = await s.next()
    const before = counter.bytes
    expect(await f.sync()).toMatchObject({ changed: true, snapshot: { id: s2.id }, bytesDownloaded: tarBytes(uploaded(s2)) })
    expect(counter.bytes - before).toBe(tarBytes(uploaded(s2)))
    const s3 = await s.next()
    await f.stop()
    const restored = await restoreFrom(s, f, 'restored')
    expect(restored).toMatchObject({ snapshot: s3.id, bytesDownloaded: tarBytes(uploaded(s3)) })
    expect(restored.digest).toEqual(await s.digest())
  })
})

/** Sum of the sizes of the files under a directory. */
function duBytes(dir: string): number {
  let sum = 0
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    try {
      sum += entry.isDirectory() ? duBytes(path) : statSync(path).size
    } catch {
      // Removed meanwhile.
    }
  }
  return sum
}
