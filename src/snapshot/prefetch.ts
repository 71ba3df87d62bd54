import { mkdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { extractRun } from './archive.js'
import { SnapshotLayout } from './layout.js'
import type { SnapshotManifest } from './manifest.js'
import { planRuns, type ReusableFile } from './restore/index.js'
import { fdClose, mapLimit } from '../util/index.js'

export interface PrefetchOptions {
  snapshotStore: SnapshotStore
  job: string
  partition: string | number
  /** The snapshot whose files to download (usually the newest one, while a newer one is being taken). */
  manifest: SnapshotManifest
  /** A directory of its own, on the file system of the restore's target (its files are hard-linked from there); created, and removed by dispose(). */
  dir: string
  /** Ranged reads at once. Default 6, as a restore. */
  downloadConcurrency?: number
  /**
   * Told why a ranged read left its files out (the object is gone, a file
   * fails its checks, the store failed), so that a caller that acts on the
   * reason (a SnapshotFollower) learns it; the prefetch goes on either way.
   */
  onError?: (error: unknown, object: string) => void
}

export interface Prefetch {
  /**
   * Starts no further download, waits for those in flight, and resolves
   * with every file downloaded and verified (size and SHA-256), not yet
   * fsynced: pass them to restoreSnapshot's `reuse`, which syncs what it
   * links. A failed download only leaves its files out.
   */
  stop(): Promise<ReusableFile[]>
  /**
   * Keeps downloading only the files `wanted` holds (same name, size and
   * SHA-256): a new owner that took the claim knows the snapshot it
   * restores, usually a hand-off that shares most of its files with the one
   * prefetched. Ranges with none of them are skipped from now on.
   */
  narrow(wanted: ReadonlyArray<{ name: string; size: number; sha256: string }>): void
  /** Waits for every download to end (none is stopped), and resolves as stop() does. */
  finished(): Promise<ReusableFile[]>
  /** Stops, then removes the directory (after the restore, whose store holds its own links to the files). */
  dispose(): Promise<void>
}

/**
 * Ranged reads of a prefetch stay short, so that stop() waits little for
 * the ones in flight (at 6 at once, 8 MiB ranges kept a new owner waiting
 * 200-300 ms in the rebalance bench); LevelDB's table files are about 2 MiB.
 */
const PREFETCH_RANGE_BYTES = 4 * 1024 * 1024

/**
 * Downloads a snapshot's files into a directory in the background, for a
 * restore that cannot start yet: a new owner in a consumer group waits for
 * the previous owner's hand-off snapshot, which is incremental, so most of
 * its files are the previous snapshot's. Downloading those while the old
 * owner takes it leaves the restore only the files the hand-off added
 * (restoreSnapshot's `reuse` links the ones whose name, size and SHA-256
 * match). Files are verified as a restore verifies them; nothing here
 * decides what is restored.
 */
export function prefetchSnapshot(options: PrefetchOptions): Prefetch {
  const { snapshotStore: store, manifest, dir } = options
  const layout = new SnapshotLayout(options.job, options.partition)
  const concurrency = options.downloadConcurrency ?? 6
  const done: ReusableFile[] = []
  let stopped = false
  let wanted: Set<string> | undefined
  const fileKey = (f: { name: string; size: number; sha256: string }): string => `${f.name}\u0000${f.size}\u0000${f.sha256}`
  const runs = planRuns(manifest, PREFETCH_RANGE_BYTES, concurrency)
  const work = (async () => {
    // What a crashed process left there would make each exclusive create fail.
    await rm(dir, { recursive: true, force: true })
    await mkdir(dir, { recursive: true })
    await mapLimit(runs, concurrency, async (run) => {
      if (stopped || (wanted !== undefined && !run.entries.some((f) => wanted!.has(fileKey(f))))) return
      const fds: number[] = []
      try {
        const body = await store.get(layout.dataKey(run.object), { range: { start: run.start, end: run.end - 1 } })
        await extractRun(body, run.start, run.entries, dir, { object: layout.dataKey(run.object), onFile: (fd) => fds.push(fd) })
        // Not synced here: an fsync per file makes the other downloads' writes
        // wait for a journal commit each (it held a 100 MiB prefetch to
        // 36 MB/s); the restore syncs the files it links with its own.
        // A run that extracted completely verified each of its files.
        for (const f of run.entries) done.push({ name: f.name, size: f.size, sha256: f.sha256, path: join(dir, f.name) })
      } catch (err) {
        // Its files are left out; the restore downloads them.
        try {
          options.onError?.(err, layout.dataKey(run.object))
        } catch {
          // A listener's mistake must not end the other downloads.
        }
      } finally {
        await Promise.all(fds.map((fd) => fdClose(fd).catch(() => undefined)))
      }
    })
  })().catch(() => undefined)
  const settled = async (): Promise<ReusableFile[]> => {
    await work
    return [...done]
  }
  const stop = (): Promise<ReusableFile[]> => {
    stopped = true
    return settled()
  }
  return {
    stop,
    narrow: (files) => { wanted = new Set(files.map(fileKey)) },
    finished: settled,
    dispose: async () => {
      await stop()
      await rm(dir, { recursive: true, force: true })
    },
  }
}

/**
 * What a new owner that holds the claim reuses of its prefetch: the files
 * that the snapshot it restores (`manifest`) shares with the one prefetched,
 * all of them. The prefetch goes on for those (a hand-off snapshot adds few
 * files to the one before): stopping it would download them again.
 */
export async function finishPrefetch(prefetch: Prefetch | undefined, manifest: SnapshotManifest | undefined): Promise<ReusableFile[] | undefined> {
  if (prefetch === undefined) return undefined
  if (manifest === undefined) return prefetch.stop()
  prefetch.narrow(manifest.files)
  return prefetch.finished()
}

/**
 * A prefetch directory that no prefetch of ours uses is a killed process's:
 * removed once the partition is ours (it holds up to a whole snapshot, and
 * nothing else would ever remove it).
 */
export async function removeStalePrefetch(path: string): Promise<void> {
  await rm(`${path}.prefetch`, { recursive: true, force: true })
}
