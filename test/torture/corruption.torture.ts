// The corruption and hostile-archive matrix. Every object kind of a snapshot
// (its manifest, its own data object, a data object it shares with an older
// snapshot) x bit flip, truncation, deletion and swap with another
// snapshot's object, on the file-system store and on radosgw; hand-made tars
// with every unsafe entry type; junk manifests. A damaged snapshot is never
// restored: the restore falls back to an older one or fails with the
// documented code, nothing is written outside the target, and the user's
// files beside the target (and in a target that is not a store) survive.
import { existsSync } from 'node:fs'
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import tar from 'tar-stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  FsSnapshotStore, openFileLog, PartitionProcessor, restoreSnapshot, SnapshotLayout, Snapshotter,
  type RestoreResult, type SnapshotManifest, type SnapshotResult, type SnapshotStore,
} from '../../src/index.js'
import { paddedSize } from '../../src/snapshot/archive.js'
import { listManifests, readManifest } from '../../src/snapshot/catalog.js'
import { encodeManifest } from '../../src/snapshot/manifest.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { addSale, fold, readTotals, saleAt, TOPIC, totals, type Sale } from '../runtime/fixtures/totals.js'
import { levelDigest, openKvStore, range, storeDigest, writeKeys } from '../snapshot/helpers.js'
import { count, deadline, makeBucket, recordFigures, rng, s3Store, scaled, type Rng } from './common.js'

const VARIANTS = scaled(1, 4)
const layout = new SnapshotLayout('job', 0)
const USER_FILE = 'my-notes.txt'
const USER_TEXT = 'the user wrote this; no restore may remove it\n'

const figures = {
  corruptionCases: 0, detected: 0, wrongData: 0, corruptionOutcomes: {} as Record<string, number>,
  hostileArchives: 0, refused: 0, junkManifests: 0, junkSurvived: 0, userFileCases: 0,
}
afterAll(() => recordFigures('corruption', figures))

let bucket: Awaited<ReturnType<typeof makeBucket>>
beforeAll(async () => {
  bucket = await makeBucket('torture-corrupt')
})
afterAll(async () => {
  await bucket?.remove()
})

async function collect(stream: AsyncIterable<Buffer>): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(chunk)
  return Buffer.concat(chunks)
}

async function readObject(dfs: SnapshotStore, key: string): Promise<Buffer> {
  return collect((await dfs.get(key)) as AsyncIterable<Buffer>)
}

interface Two {
  dir: string
  dfs: SnapshotStore
  a: SnapshotResult
  b: SnapshotResult
  digestA: { sha256: string; entries: number }
  digestB: { sha256: string; entries: number }
  manifestB: SnapshotManifest
}

/** A full snapshot A, then B: incremental, with an object of its own and files in one of A's. */
async function twoSnapshots(kind: 'fs' | 's3'): Promise<Two> {
  const dir = tempDir('tidemark-torture-corrupt-')
  const dfs = kind === 'fs' ? new FsSnapshotStore({ root: join(dir, 'dfs') }) : s3Store(bucket.bucket, randomName('p'))
  const store = await openKvStore(join(dir, 'store'))
  try {
    const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0, gcAfterSnapshot: false, maxObjectBytes: 1024 * 1024 })
    const last = await writeKeys(store, range(0, 8000), 1, 0n, 1000)
    const a = await snapshotter.takeSnapshot({ full: true })
    const digestA = await storeDigest(store)
    await writeKeys(store, range(8000, 8500), 2, last + 1n, 500)
    const b = await snapshotter.takeSnapshot()
    const digestB = await storeDigest(store)
    expect(b.full, 'B is incremental').toBe(false)
    expect(b.files.some((f) => !f.uploaded) && b.files.some((f) => f.uploaded), 'B shares files with A and has its own').toBe(true)
    const manifestB = (await snapshotter.latest())!
    return { dir, dfs, a, b, digestA, digestB, manifestB }
  } finally {
    await store.close()
  }
}

/** A parent directory with a user file in it, and the target inside it. */
async function restoreSite(dir: string): Promise<{ parent: string; target: string; check(): Promise<void> }> {
  const parent = join(dir, 'site')
  await mkdir(parent, { recursive: true })
  await writeFile(join(parent, USER_FILE), USER_TEXT)
  const target = join(parent, 'target')
  const outside = new Set(await readdir(dir))
  return {
    parent,
    target,
    async check() {
      expect(await readFile(join(parent, USER_FILE), 'utf8'), 'the user file beside the target survives').toBe(USER_TEXT)
      const left = (await readdir(parent)).filter((n) => n !== USER_FILE && n !== 'target')
      expect(left, 'nothing but the target is left beside it (no temporary or moved-aside directories)').toEqual([])
      expect(new Set(await readdir(dir)), 'nothing is written beside the site').toEqual(outside)
    },
  }
}

type Outcome = { ok: true; result: RestoreResult } | { ok: false; error: unknown }

async function attempt(dfs: SnapshotStore, target: string, extra: { allowEmpty?: boolean } = {}): Promise<Outcome> {
  return restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target, ...extra }).then((result) => ({ ok: true as const, result }), (error: unknown) => ({ ok: false as const, error }))
}

const OBJECTS = ['manifest', 'own data', 'shared data'] as const
const DAMAGES = ['bit flip', 'truncation', 'deletion', 'swap'] as const

/** Damages one object of B; returns what it did, for the failure message. */
async function damage(t: Two, object: (typeof OBJECTS)[number], how: (typeof DAMAGES)[number], r: Rng): Promise<string> {
  const ownKey = t.b.objects[0]!
  const sharedRel = t.manifestB.files.find((f) => !t.b.objects.includes(layout.dataKey(f.object)))!.object
  const key = object === 'manifest' ? t.b.key : object === 'own data' ? ownKey : layout.dataKey(sharedRel)
  if (how === 'deletion') {
    await t.dfs.deleteMany([key])
    return key
  }
  const bytes = await readObject(t.dfs, key)
  let next: Buffer
  let what = key
  if (how === 'swap') {
    // Another snapshot's object of the same kind.
    next = await readObject(t.dfs, object === 'manifest' ? t.a.key : object === 'own data' ? t.a.objects[0]! : ownKey)
  } else if (how === 'truncation') {
    // Past every byte a restore reads of it would be harmless: cut before the last file's end.
    const ends = t.manifestB.files.filter((f) => layout.dataKey(f.object) === key).map((f) => f.offset + f.size)
    const limit = object === 'manifest' ? bytes.length - 1 : Math.max(...ends) - 1
    const length = r.int(0, limit)
    next = bytes.subarray(0, length)
    what = `${key} cut to ${length} of ${bytes.length} bytes`
  } else {
    // A bit that matters: inside the manifest's file list, or inside a file (or
    // its tar header, or the padding after it) that B reads from the object.
    let at: number
    if (object === 'manifest') {
      const start = bytes.indexOf('"files":[') + 9
      at = r.int(start, bytes.length - 4)
    } else {
      const file = r.pick(t.manifestB.files.filter((f) => layout.dataKey(f.object) === key))
      at = r.int(file.offset - 512, file.offset + paddedSize(file.size) - 1)
    }
    const bit = r.int(0, 7)
    next = Buffer.from(bytes)
    next[at] = next[at]! ^ (1 << bit)
    what = `${key} bit ${bit} of byte ${at} flipped`
  }
  await t.dfs.deleteMany([key])
  await t.dfs.put(key, next)
  return what
}

describe.each(['fs', 's3'] as const)('corruption matrix on the %s store', (kind) => {
  for (const object of OBJECTS) {
    for (const how of DAMAGES) {
      it(`${object} x ${how}: the damaged snapshot is never restored (${VARIANTS} variant${VARIANTS > 1 ? 's' : ''})`, async () => {
        const r = rng(`corrupt-${kind}-${object}-${how}`)
        const expired = deadline(120_000)
        for (let v = 0; v < (how === 'bit flip' || how === 'truncation' ? VARIANTS : 1) && !expired(); v++) {
          const t = await twoSnapshots(kind)
          try {
            const what = await damage(t, object, how, r)
            const site = await restoreSite(t.dir)
            const outcome = await attempt(t.dfs, site.target)
            figures.corruptionCases++
            const label = `${kind}: ${what}`
            if (outcome.ok) {
              const { result } = outcome
              count(figures.corruptionOutcomes, `fell back (${result.skipped[0]?.reason ?? 'no skip'})`)
              const digest = await levelDigest(site.target)
              const returnedB = result.snapshot?.id === t.b.id
              if (returnedB || digest.sha256 !== t.digestA.sha256) figures.wrongData++
              expect(returnedB, `${label}: B is damaged and must not be restored`).toBe(false)
              // Only A can stand in for it, and only when B's damage spared A.
              expect(object, `${label}: a damaged object that A shares takes A down too`).not.toBe('shared data')
              expect(result.snapshot?.id).toBe(t.a.id)
              // A deleted manifest leaves no snapshot B to skip.
              expect(result.skipped.map((s) => s.id), label).toEqual(object === 'manifest' && how === 'deletion' ? [] : [t.b.id])
              expect(digest, `${label}: A is restored exactly`).toEqual(t.digestA)
            } else {
              const e = outcome.error as { code?: string; details?: { skipped?: Array<{ id: string }> } }
              count(figures.corruptionOutcomes, `failed (${e.code})`)
              expect(e.code, `${label}: ${String(outcome.error)}`).toBe('TIDEMARK_SNAPSHOT_NOT_FOUND')
              expect(object, `${label}: only a shared object's damage leaves no usable snapshot`).toBe('shared data')
              expect(e.details?.skipped?.map((s) => s.id), label).toEqual([t.b.id, t.a.id])
              expect(existsSync(site.target), `${label}: a failed restore creates no target`).toBe(false)
            }
            figures.detected++
            await site.check()
          } finally {
            await t.dfs.close()
          }
        }
      })
    }
  }
})

// ---- hostile archives ----

type Entry = { header: tar.Header | (Partial<tar.Header> & { name: string }); data?: Buffer; patch?: (bytes: Buffer) => void }

/** Sets a ustar header's size field (at `at`) and fixes its checksum. */
function patchSize(bytes: Buffer, at: number, octal: string): void {
  bytes.write(`${octal}\0`, at + 124, 12, 'ascii')
  bytes.fill(0x20, at + 148, at + 156)
  let sum = 0
  for (let i = at; i < at + 512; i++) sum += bytes[i]!
  bytes.write(`${sum.toString(8).padStart(6, '0')}\0 `, at + 148, 8, 'ascii')
}

describe('hostile archives', () => {
  // (dir: the test's directory; name, size, data: the file the entry stands in for)
  const cases: Array<[string, (dir: string, name: string, size: number, data: Buffer) => Entry[]]> = [
    ['a symlink out of the target', (dir, name) => [{ header: { name, type: 'symlink', linkname: join(dir, 'outside') } }]],
    ['a relative symlink', (_dir, name) => [{ header: { name, type: 'symlink', linkname: '../../outside' } }]],
    ['a hard link to a relative path', (_dir, name) => [{ header: { name, type: 'link', linkname: '../outside' } }]],
    ['a hard link to an absolute path', (dir, name) => [{ header: { name, type: 'link', linkname: join(dir, 'site', USER_FILE) } }]],
    ['an absolute path', (dir, _name, size, data) => [{ header: { name: join(dir, 'abs-target'), size }, data }]],
    ['a .. path', (_dir, _name, size, data) => [{ header: { name: '../x', size }, data }]],
    ['a deep .. path', (_dir, _name, size, data) => [{ header: { name: '../../../../x', size }, data }]],
    ['a path into a subdirectory', (_dir, name, size, data) => [{ header: { name: `sub/${name}`, size }, data }]],
    ['a character device', (_dir, name) => [{ header: { name, type: 'character-device', devmajor: 1, devminor: 3 } }]],
    ['a block device', (_dir, name) => [{ header: { name, type: 'block-device', devmajor: 7, devminor: 0 } }]],
    ['a fifo', (_dir, name) => [{ header: { name, type: 'fifo' } }]],
    ['a directory', (_dir, name) => [{ header: { name, type: 'directory' } }]],
    ['a pax header that renames the entry', (_dir, name, size, data) => [{ header: { name, size, pax: { path: '../../pax-escape' } }, data }]],
    ['a duplicate name', (_dir, name, size, data) => [{ header: { name, size }, data }, { header: { name, size }, data }]],
    ['an oversized header (size field of 8 GiB)', (_dir, name, size, data) => [{ header: { name, size }, data, patch: (bytes) => patchSize(bytes, 0, '77777777777') }]],
  ]

  for (const [what, entries] of cases) {
    it(`${what}: refused, nothing written outside the target, the user's files survive`, async () => {
      const dir = tempDir('tidemark-torture-hostile-')
      const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
      const store = await openKvStore(join(dir, 'store'))
      try {
        const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0, gcAfterSnapshot: false })
        await writeKeys(store, range(0, 5000), 1, 0n, 1000)
        const good = await snapshotter.takeSnapshot()
        const digest = await storeDigest(store)
        const latest = (await snapshotter.latest())!
        const files = latest.files.filter((f) => (f.name.endsWith('.ldb') || f.name.endsWith('.log')) && f.size > 0)
        const victim = files[0]!
        const second = files[1] ?? latest.files.find((f) => f.name.startsWith('MANIFEST-'))!
        const original = await readObject(dfs, layout.dataKey(victim.object))
        const data = original.subarray(victim.offset, victim.offset + victim.size)
        const secondData = (await readObject(dfs, layout.dataKey(second.object))).subarray(second.offset, second.offset + second.size)

        // The evil object: the crafted entries where the victim was, then the
        // second file (so a duplicate stands where the manifest expects it).
        const pack = tar.pack()
        const list = entries(dir, victim.name, victim.size, Buffer.from(data))
        for (const e of list) {
          if (e.data !== undefined) pack.entry(e.header, e.data)
          else pack.entry(e.header)
        }
        pack.entry({ name: second.name, size: second.size }, secondData)
        // Long enough for every file the manifest places in it, as a real object would be.
        pack.entry({ name: 'filler', size: data.length }, Buffer.from(data))
        pack.finalize()
        const bytes = await collect(pack as unknown as AsyncIterable<Buffer>)
        for (const e of list) e.patch?.(bytes)
        const id = `0000000000-${String(latest.sequence + 1).padStart(12, '0')}`
        const object = `data/${id}-evil0000-0.tar`
        await dfs.put(layout.dataKey(object), bytes)
        // With two crafted entries the manifest places the second file on the
        // second one (the duplicate), so that the restore reads it.
        const secondOffset = list.length === 2 ? 512 + Math.ceil(victim.size / 512) * 512 + 512 : undefined
        const manifest: SnapshotManifest = {
          ...latest,
          id,
          sequence: latest.sequence + 1,
          parent: latest.id,
          full: false,
          objects: [...latest.objects, { key: object, size: bytes.length }],
          files: latest.files.map((f) => (f === victim ? { ...f, object, offset: 512 } : f === second && secondOffset !== undefined ? { ...f, object, offset: secondOffset } : f)),
        }
        await dfs.put(layout.manifestKey(0, manifest.sequence), encodeManifest(manifest))

        const site = await restoreSite(dir)
        const userBefore = new Set(await readdir(dirname(dir)))
        const result = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target: site.target })
        figures.hostileArchives++
        expect(result.snapshot?.id, 'the hostile snapshot is not restored').toBe(good.id)
        expect(result.skipped, result.skipped.map((x) => x.message).join('; ')).toMatchObject([{ id, reason: expect.stringMatching(/^(unsafe-entry|entry-mismatch|archive-corrupt|object-truncated)$/) }])
        figures.refused++
        expect(await levelDigest(site.target)).toEqual(digest)
        await site.check()
        for (const name of ['outside', 'abs-target', 'x', 'pax-escape']) expect(existsSync(join(dir, name)), name).toBe(false)
        for (const name of ['x', 'pax-escape', 'outside']) expect(existsSync(join(dirname(dir), name)) && !userBefore.has(name), name).toBe(false)
      } finally {
        await store.close()
        await dfs.close()
      }
    })
  }
})

// ---- junk manifests ----

describe('junk manifests', () => {
  const junk: Array<[string, (good: SnapshotManifest) => { key: string; body: Buffer }]> = [
    ['junk bytes at the next sequence', (g) => ({ key: layout.manifestKey(g.epoch, g.sequence + 1), body: Buffer.from('\u0000\u00ff not json at all {') })],
    ['a huge manifest (65 MiB)', (g) => ({ key: layout.manifestKey(g.epoch, g.sequence + 1), body: Buffer.alloc(65 * 1024 * 1024, 0x20) })],
    ['another job in the body', (g) => ({ key: layout.manifestKey(g.epoch, g.sequence + 1), body: encodeManifest({ ...g, job: 'other', id: idOf(g.epoch, g.sequence + 1), sequence: g.sequence + 1 }) })],
    ['another partition in the body', (g) => ({ key: layout.manifestKey(g.epoch, g.sequence + 1), body: encodeManifest({ ...g, partition: '7', id: idOf(g.epoch, g.sequence + 1), sequence: g.sequence + 1 }) })],
    ['another epoch in the body than in the name', (g) => ({ key: layout.manifestKey(g.epoch + 1, g.sequence + 1), body: encodeManifest({ ...g, id: idOf(g.epoch, g.sequence + 1), sequence: g.sequence + 1 }) })],
    ['the name 9999999999-000000000000.json', () => ({ key: `${layout.manifestPrefix}9999999999-000000000000.json`, body: Buffer.from('junk') })],
    // 0000000000-999999999999.json when the good snapshot's epoch is 0: the
    // last sequence of its epoch, so that it is the newest manifest.
    ['the name <epoch>-999999999999.json', (g) => ({ key: layout.manifestKey(g.epoch, 999_999_999_999), body: Buffer.from('junk') })],
  ]

  for (const [what, make] of junk) {
    it(`${what}: restores skip it, and a new owner starts, processes and snapshots`, async () => {
      const dir = tempDir('tidemark-torture-junk-')
      const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
      const log = await openFileLog(join(dir, 'log'), { sync: false })
      try {
        await Promise.all(Array.from({ length: 3000 }, (_, i) => log.append(Buffer.from(JSON.stringify(saleAt(i))))))
        const owner = (path: string): PartitionProcessor<Sale> => new PartitionProcessor<Sale>({
          job: 'job', topic: TOPIC, partition: 0, log, path, states: [totals], handler: addSale, batchSize: 500,
          snapshots: { store: dfs, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
        })
        const first = owner(join(dir, 'owner-1'))
        await first.start()
        await first.catchUp({ end: 2000n })
        const good = await first.snapshot()
        expect(good).toBeDefined()
        await first.close()
        const goodManifest = await readManifest(dfs, layout, (await listManifests(dfs, layout))[0]!)
        const { key, body } = make(goodManifest)
        await dfs.put(key, body)
        figures.junkManifests++

        // A plain restore skips it and restores the good snapshot.
        const site = await restoreSite(dir)
        const restored = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target: site.target })
        expect(restored.snapshot?.id).toBe(good!.id)
        expect(restored.skipped).toMatchObject([{ reason: 'manifest-unreadable' }])
        await site.check()

        // A new owner starts from it, processes the rest and takes a snapshot
        // that a restore then returns.
        const second = owner(join(dir, 'owner-2'))
        const failures: unknown[] = []
        second.on('snapshot-failed', (e) => failures.push(e))
        const started = await second.start()
        expect(started.snapshot).toBe(good!.id)
        await second.catchUp()
        const taken = await second.snapshot()
        expect(failures.map(String), 'the new owner\'s snapshots succeed').toEqual([])
        expect(taken?.positions[0]?.offset).toBe(2999n)
        expect(await readTotals(second.store)).toEqual(fold(2999))
        await second.close()
        const again = await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target: join(dir, 'again') })
        expect(again.snapshot?.id).toBe(taken!.id)
        figures.junkSurvived++
      } finally {
        await log.close()
        await dfs.close()
      }
    })
  }
})

function idOf(epoch: number, sequence: number): string {
  return `${String(epoch).padStart(10, '0')}-${String(sequence).padStart(12, '0')}`
}

// ---- the user's files ----

describe("the user's files", () => {
  const targets: Array<[string, string[]]> = [
    ['a directory of user files', [USER_FILE]],
    ['user files and LevelDB-looking names (LOG, 000003.log) but no store', [USER_FILE, 'LOG', '000003.log']],
    ['user files and a stray CURRENT', [USER_FILE, 'CURRENT']],
  ]
  for (const allowEmpty of [false, true]) {
    for (const [what, names] of targets) {
      it(`a target holding ${what} is refused (TIDEMARK_STORE_NOT_A_STORE) and nothing in it is removed${allowEmpty ? ' (allowEmpty)' : ''}`, async () => {
        const dir = tempDir('tidemark-torture-user-')
        const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
        const store = await openKvStore(join(dir, 'store'))
        try {
          await writeKeys(store, range(0, 1000), 1, 0n, 500)
          await new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0 }).takeSnapshot()
          const target = join(dir, 'target')
          await mkdir(target)
          for (const name of names) await writeFile(join(target, name), name === USER_FILE ? USER_TEXT : `not LevelDB's: ${name}\n`)
          figures.userFileCases++
          const outcome = await attempt(dfs, target, { allowEmpty })
          expect(outcome.ok ? outcome.result : (outcome.error as { code?: string }).code, 'the restore refuses a target that is not a store').toBe('TIDEMARK_STORE_NOT_A_STORE')
          expect((await readdir(target)).sort()).toEqual([...names].sort())
          expect(await readFile(join(target, USER_FILE), 'utf8')).toBe(USER_TEXT)
        } finally {
          await store.close()
          await dfs.close()
        }
      })
    }
  }

  it('a target holding an old store and a user file: the user file survives (and a refusal is TIDEMARK_STORE_NOT_A_STORE)', async () => {
    const dir = tempDir('tidemark-torture-user-')
    const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
    const store = await openKvStore(join(dir, 'store'))
    try {
      await writeKeys(store, range(0, 1000), 1, 0n, 500)
      await new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0 }).takeSnapshot()
      const target = join(dir, 'target')
      const old = await openKvStore(target)
      await old.close()
      await writeFile(join(target, USER_FILE), USER_TEXT)
      figures.userFileCases++
      const outcome = await attempt(dfs, target)
      expect(await readFile(join(target, USER_FILE), 'utf8').catch(() => 'removed'), "the user's file in the target survives the restore").toBe(USER_TEXT)
      if (!outcome.ok) expect((outcome.error as { code?: string }).code, String(outcome.error)).toBe('TIDEMARK_STORE_NOT_A_STORE')
    } finally {
      await store.close()
      await dfs.close()
    }
  })
})

