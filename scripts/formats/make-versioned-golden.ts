/**
 * Writes the golden samples of versioned states (test/formats/versioned-samples.ts)
 * and next to each the JSON that today's code at version 3 reads from it:
 *
 *   npx tsx scripts/formats/make-versioned-golden.ts [<folder>] [--replace]
 *
 * The folder defaults to test/fixtures/formats/state-versions; as with
 * make-golden.ts an existing folder is refused, and --replace is only for
 * checking that a second run gives the same bytes. Three programs write in
 * turn (version 1, 2, 3), and a snapshot is taken after each; the data object
 * token and the creation time are fixed through encodeManifest.
 */
import { cp, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { listManifests } from '../../src/snapshot/catalog.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { encodeManifest, parseManifest } from '../../src/snapshot/manifest.js'
import { Snapshotter } from '../../src/snapshot/snapshotter.js'
import { PartitionStore } from '../../src/store/partition-store.js'
import { STORE_MARKER } from '../../src/store/store-dir.js'
import { CLOCK_MS } from '../../test/formats/samples.js'
import {
  VERSIONED_DIR, VERSIONED_JOB, VERSIONED_SAMPLES, versionedExpectedPath, versionedStates, writeVersion, type VersionedSampleName,
} from '../../test/formats/versioned-samples.js'

async function main(): Promise<void> {
  const args = process.argv.slice(2)
  const replace = args.includes('--replace')
  const target = resolve(args.find((a) => !a.startsWith('--')) ?? VERSIONED_DIR)
  if (!replace && (await stat(target).catch(() => undefined)) !== undefined) {
    console.error(`${target} exists; committed samples are not rewritten (pass --replace only to check that a run gives the same bytes)`)
    process.exit(2)
  }
  const work = await mkdtemp(join(tmpdir(), 'tidemark-versioned-golden-'))
  const out = join(work, 'state-versions')
  try {
    const root = join(out, 'snapshot-store')
    const path = join(out, 'partition-store')
    const dfs = new FsSnapshotStore({ root })
    let offset = 0n
    for (const version of [1, 2, 3] as const) {
      const store = await PartitionStore.open({ path, states: versionedStates(version) })
      offset = await writeVersion(store, version, offset)
      const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: VERSIONED_JOB, partition: 0, epoch: 1, gcAfterSnapshot: false, checkpoint: 'close', maxAmplification: 100 })
      await snapshotter.takeSnapshot()
      await store.close()
    }
    await fixManifests(dfs, root)
    // LevelDB's own logs (wall-clock times), its lock file and the checkpoints' folder are not part of the format.
    for (const name of await readdir(path)) if (/^(?:LOG|LOG\.old|LOCK)$/.test(name)) await rm(join(path, name))
    await rm(`${path}.checkpoints`, { recursive: true, force: true })
    const marker = JSON.parse(await readFile(join(path, STORE_MARKER), 'utf8')) as Record<string, unknown>
    await writeFile(join(path, STORE_MARKER), `${JSON.stringify({ ...marker, createdAt: new Date(CLOCK_MS).toISOString() })}\n`)
    for (const name of Object.keys(VERSIONED_SAMPLES) as VersionedSampleName[]) {
      const reading = join(work, `read-${name}`)
      const result = await VERSIONED_SAMPLES[name](out, reading)
      await writeFile(versionedExpectedPath(name, out), `${JSON.stringify(result, null, 2)}\n`)
      await rm(reading, { recursive: true, force: true })
    }
    await rm(target, { recursive: true, force: true })
    await cp(out, target, { recursive: true })
    console.log(`wrote the samples of ${Object.keys(VERSIONED_SAMPLES).join(', ')} into ${target}`)
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}

/** Fixed data object tokens and creation times, written back through encodeManifest. */
async function fixManifests(dfs: FsSnapshotStore, root: string): Promise<void> {
  const layout = new SnapshotLayout(VERSIONED_JOB, 0)
  const fixed = (key: string): string => key.replace(/^(data\/\d{10}-\d{12}-)[^-]+(-\d+\.tar)$/, '$100000000$2')
  for (const ref of await listManifests(dfs, layout)) {
    const manifest = parseManifest(await readFile(join(root, ref.key)), { job: VERSIONED_JOB, partition: '0', epoch: ref.epoch, sequence: ref.sequence })
    for (const o of manifest.objects) {
      const from = join(root, layout.prefix, o.key)
      const to = join(root, layout.prefix, fixed(o.key))
      if (from !== to) await rename(from, to).catch((err: NodeJS.ErrnoException) => { if (err.code !== 'ENOENT') throw err })
    }
    await writeFile(join(root, ref.key), encodeManifest({
      ...manifest,
      createdAt: new Date(CLOCK_MS).toISOString(),
      objects: manifest.objects.map((o) => ({ ...o, key: fixed(o.key) })),
      files: manifest.files.map((f) => ({ ...f, object: fixed(f.object) })),
    }))
  }
}

await main()
