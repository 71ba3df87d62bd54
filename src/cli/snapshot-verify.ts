/**
 * `tidemark snapshots verify`: downloads every object the chosen snapshots
 * reference and checks each file's SHA-256, the tar header before it and
 * the padding after it (what a restore refuses beside the bytes) and each
 * object's size against the manifest, without writing anything anywhere.
 * Objects shared by several snapshots (incremental snapshots reuse their
 * parents' tables) are read once.
 *
 * It lives in the CLI rather than in snapshot/ because nothing else needs it;
 * it reads through the same catalog functions as restore.
 */
import { createHash, type Hash } from 'node:crypto'
import { isTidemarkError } from '../errors.js'
import type { SnapshotStore } from '../snapshot-store/snapshot-store.js'
import { readManifest, type ManifestRef } from '../snapshot/catalog.js'
import type { SnapshotLayout } from '../snapshot/layout.js'
import type { SnapshotManifest } from '../snapshot/manifest.js'
import { paddedSize, StreamRegions, TAR_BLOCK, tarHeaderProblem, zeroPadding } from '../snapshot/archive.js'
import { mapLimit } from '../util/index.js'

export interface VerifyProblem {
  /** The file or object concerned (a manifest key when the manifest itself is unreadable). */
  what: string
  reason: 'manifest-unreadable' | 'object-missing' | 'object-size' | 'checksum-mismatch' | 'archive-corrupt'
  message: string
}

export interface VerifyReport {
  id: string
  ok: boolean
  files: number
  bytes: number
  problems: VerifyProblem[]
}

interface ObjectResult {
  /** Undefined when the object could not be read (problem says why). */
  hashes: Map<number, string> | undefined
  /** Per file (by offset): what is wrong with its tar header or the padding after it, as a restore would refuse it. */
  framing: Map<number, string>
  size: number
  problem?: VerifyProblem
}

/** Objects downloaded at once. */
const CONCURRENCY = 4

export async function verifySnapshots(
  store: SnapshotStore,
  layout: SnapshotLayout,
  refs: readonly ManifestRef[],
  onProgress: (done: number, total: number) => void,
): Promise<VerifyReport[]> {
  const manifests: Array<{ ref: ManifestRef; manifest?: SnapshotManifest; problem?: VerifyProblem }> = []
  for (const ref of refs) {
    try {
      manifests.push({ ref, manifest: await readManifest(store, layout, ref) })
    } catch (err) {
      if (!isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT')) throw err
      manifests.push({ ref, problem: { what: ref.key, reason: 'manifest-unreadable', message: err.message } })
    }
  }

  // Every byte range to hash, per object, over all the snapshots.
  const ranges = new Map<string, { size: number; files: Map<number, { name: string; size: number }> }>()
  for (const { manifest } of manifests) {
    if (manifest === undefined) continue
    for (const o of manifest.objects) if (!ranges.has(o.key)) ranges.set(o.key, { size: o.size, files: new Map() })
    for (const f of manifest.files) ranges.get(f.object)?.files.set(f.offset, { name: f.name, size: f.size })
  }
  const total = [...ranges.values()].reduce((sum, r) => sum + r.size, 0)
  let done = 0
  onProgress(done, total)
  const keys = [...ranges.keys()]
  const results = new Map<string, ObjectResult>()
  await mapLimit(keys, CONCURRENCY, async (key) => {
    const r = ranges.get(key)!
    results.set(key, await hashObject(store, layout.dataKey(key), r.size, r.files, (n) => onProgress((done += n), total)))
  })

  return manifests.map(({ ref, manifest, problem }) => {
    if (manifest === undefined) return { id: ref.id, ok: false, files: 0, bytes: 0, problems: [problem!] }
    const problems: VerifyProblem[] = []
    for (const o of manifest.objects) {
      const p = results.get(o.key)?.problem
      if (p !== undefined) problems.push(p)
    }
    for (const f of manifest.files) {
      const hashes = results.get(f.object)?.hashes
      if (hashes === undefined) continue
      const actual = hashes.get(f.offset)
      const framing = results.get(f.object)?.framing.get(f.offset)
      if (framing !== undefined) problems.push({ what: f.name, reason: 'archive-corrupt', message: `file ${f.name} (object ${f.object} at ${f.offset}): ${framing}` })
      if (actual !== f.sha256) {
        problems.push({ what: f.name, reason: 'checksum-mismatch', message: `file ${f.name} (object ${f.object} at ${f.offset}) has SHA-256 ${actual ?? 'unknown: the object ends before it'}, its manifest says ${f.sha256}` })
      }
    }
    return { id: ref.id, ok: problems.length === 0, files: manifest.files.length, bytes: manifest.stateBytes, problems }
  })
}

/**
 * Streams one object once, hashing each file range (offset -> name, size),
 * checking the tar header before it and the padding after it as a restore
 * does, and counting its bytes.
 */
async function hashObject(store: SnapshotStore, key: string, size: number, files: Map<number, { name: string; size: number }>, onBytes: (n: number) => void): Promise<ObjectResult> {
  let body
  try {
    body = await store.get(key)
  } catch (err) {
    if (!isTidemarkError(err, 'TIDEMARK_DFS_NOT_FOUND')) throw err
    return { hashes: undefined, framing: new Map(), size: 0, problem: { what: key, reason: 'object-missing', message: `data object ${key} does not exist` } }
  }
  const starts = [...files.keys()].sort((a, b) => a - b)
  const framed = new StreamRegions(starts.flatMap((start) => {
    const fileSize = files.get(start)!.size
    return [{ at: start - TAR_BLOCK, length: TAR_BLOCK }, { at: start + fileSize, length: paddedSize(fileSize) - fileSize }]
  }))
  const hashes = new Map<number, string>()
  let position = 0
  let next = 0
  let open: { start: number; end: number; hash: Hash } | undefined
  for await (const chunk of body as AsyncIterable<Buffer>) {
    framed.take(chunk)
    let at = 0
    while (at < chunk.length) {
      if (open === undefined) {
        const start = starts[next]
        // The rest of the chunk is tar headers and padding before the next file, or after the last.
        if (start === undefined || start >= position + (chunk.length - at)) break
        next++
        // A range that overlaps the previous one cannot be read in one pass: its hash stays unknown, a mismatch.
        if (start < position) continue
        at += start - position
        position = start
        open = { start, end: start + files.get(start)!.size, hash: createHash('sha256') }
      }
      const take = Math.min(open.end - position, chunk.length - at)
      open.hash.update(chunk.subarray(at, at + take))
      at += take
      position += take
      if (position === open.end) {
        hashes.set(open.start, open.hash.digest('hex'))
        open = undefined
      }
    }
    position += chunk.length - at
    onBytes(chunk.length)
  }
  // An empty file that starts where the object ends is never opened above.
  for (const start of starts.slice(next)) if (start === position && files.get(start)!.size === 0) hashes.set(start, createHash('sha256').digest('hex'))
  const framing = new Map<number, string>()
  starts.forEach((start, i) => {
    const header = framed.bytes(2 * i)
    const padding = framed.bytes(2 * i + 1)
    // An object that ends before them is reported by its size and the file's hash.
    if (header === undefined || padding === undefined) return
    const problem = tarHeaderProblem(header, files.get(start)!)
    if (problem !== undefined) framing.set(start, `its tar header is damaged: ${problem}`)
    else if (!zeroPadding(padding)) framing.set(start, 'the padding after it is damaged (it must be zeros)')
  })
  if (position !== size) {
    return { hashes, framing, size: position, problem: { what: key, reason: 'object-size', message: `data object ${key} has ${position} bytes, its manifest says ${size}` } }
  }
  return { hashes, framing, size: position }
}
