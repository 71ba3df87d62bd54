// Shared by the snapshot tests: a partition store filled with deterministic
// data, and a digest of everything LevelDB holds, to compare a restored store
// with the one that was snapshotted.
import { createHash } from 'node:crypto'
import { readdir } from 'node:fs/promises'
import { ClassicLevel } from 'classic-level'
import { join } from 'node:path'
import { FsSnapshotStore, PartitionStore, rawCodec, Snapshotter, valueState, type SnapshotterOptions } from '../../src/index.js'

export const kv = valueState('kv', { codec: rawCodec() })
export const TOPIC = 'events'

export function keyOf(i: number): string {
  return `k${i.toString().padStart(8, '0')}`
}

/** ~60 bytes that change with the version, and compress the way real values do (a little). */
export function valueOf(i: number, version: number): Uint8Array {
  return Buffer.from(`v${version}:${i}:${((i * 2654435761) >>> 0).toString(36)}:${'abcdefghij'.repeat(4)}`)
}

export async function openKvStore(path: string, options: { writeBufferSize?: number } = {}): Promise<PartitionStore> {
  return PartitionStore.open({ path, states: [kv], ...options })
}

/** Writes keys [from, to) at `version` in batches, each batch committed at the next offset. Returns the last offset. */
export async function writeKeys(store: PartitionStore, keys: Iterable<number>, version: number, firstOffset: bigint, batch = 5000): Promise<bigint> {
  let offset = firstOffset - 1n
  let tx = store.transaction()
  let n = 0
  for (const i of keys) {
    tx.value(kv).put(keyOf(i), valueOf(i, version))
    if (++n % batch === 0) {
      await tx.commit({ topic: TOPIC, partition: 0, offset: ++offset })
      tx = store.transaction()
    }
  }
  if (tx.size > 0) await tx.commit({ topic: TOPIC, partition: 0, offset: ++offset })
  return offset
}

export function* range(from: number, to: number): Generator<number> {
  for (let i = from; i < to; i++) yield i
}

/** SHA-256 over every key and value of a closed LevelDB directory (state, positions, metadata), and the entry count. */
export async function levelDigest(path: string): Promise<{ sha256: string; entries: number }> {
  const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer' })
  await db.open({ createIfMissing: false })
  const hash = createHash('sha256')
  let entries = 0
  const it = db.iterator()
  try {
    while (true) {
      const batch = await it.nextv(4096)
      if (batch.length === 0) break
      for (const [k, v] of batch) {
        hash.update(`${k.length}:`).update(k).update(`${v.length}:`).update(v)
        entries++
      }
    }
  } finally {
    await it.close()
    await db.close()
  }
  return { sha256: hash.digest('hex'), entries }
}

/** The digest of an open partition store, taken while it is quiesced (closed) for a moment. */
export async function storeDigest(store: PartitionStore): Promise<{ sha256: string; entries: number }> {
  return store.quiesce((path) => levelDigest(path))
}

/**
 * Waits until LevelDB's background compaction has gone quiet: the set of
 * table files stays the same for `quietMs`. Tests that measure what an
 * incremental snapshot uploads call it first, so that they measure the
 * snapshotter and not a compaction that a bulk load left running.
 */
export async function waitForCompactions(path: string, quietMs = 1500, maxMs = 60_000): Promise<void> {
  const tables = async (): Promise<string> => (await readdir(path)).filter((n) => n.endsWith('.ldb')).sort().join(',')
  const deadline = performance.now() + maxMs
  let last = await tables()
  let since = performance.now()
  while (performance.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    const now = await tables()
    if (now !== last) {
      last = now
      since = performance.now()
    } else if (performance.now() - since >= quietMs) {
      return
    }
  }
  throw new Error(`compactions in ${path} did not settle within ${maxMs} ms`)
}

export interface Fixture {
  dir: string
  store: PartitionStore
  dfs: FsSnapshotStore
  snapshotter: Snapshotter
  /** The next offset to commit. */
  offset: bigint
  /** Writes keys [from, to) at `version` and returns the last committed offset. */
  write(from: number, to: number, version: number): Promise<bigint>
  close(): Promise<void>
}

/** A partition store with `keys` keys in a temp dir, a file-system snapshot store beside it, and a Snapshotter. */
export async function fixture(dir: string, keys: number, options: Partial<SnapshotterOptions> = {}): Promise<Fixture> {
  const store = await openKvStore(join(dir, 'store'))
  const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
  const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0, ...options })
  const f: Fixture = {
    dir,
    store,
    dfs,
    snapshotter,
    offset: 0n,
    async write(from, to, version) {
      const last = await writeKeys(store, range(from, to), version, f.offset, 1000)
      f.offset = last + 1n
      return last
    },
    async close() {
      await snapshotter.close()
      await store.close()
      await dfs.close()
    },
  }
  if (keys > 0) await f.write(0, keys, 1)
  return f
}
