/**
 * Data objects are plain tar archives (tar-stream), one entry per LevelDB
 * file, so that any tar tool can inspect them. The manifest records where
 * each file's data starts, so a restore reads just the byte ranges it needs
 * and still parses them as tar: every header it meets must be exactly the
 * entry the manifest promised, or the object is treated as corrupt.
 */
import { createHash } from 'node:crypto'
import fs, { createReadStream } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { promisify } from 'node:util'
import tar from 'tar-stream'
import { TidemarkError } from '../errors.js'
import { OffThreadFile } from './file-writer.js'
import { fdClose } from '../util/index.js'

export const TAR_BLOCK = 512
const END_OF_ARCHIVE = 2 * TAR_BLOCK
/** Fixed, so that the same files always make the same archive. */
const MTIME = new Date(0)

export function paddedSize(size: number): number {
  return Math.ceil(size / TAR_BLOCK) * TAR_BLOCK
}

/** The exact size of the archive that packFiles() produces for these files. */
export function archiveSize(files: readonly { size: number }[]): number {
  return files.reduce((sum, f) => sum + TAR_BLOCK + paddedSize(f.size), 0) + END_OF_ARCHIVE
}

export interface PackInput {
  name: string
  path: string
  size: number
}

export interface PackedEntry {
  name: string
  size: number
  sha256: string
  /** Where the file's data starts in the archive. */
  offset: number
}

/** Files up to this size are read with one call; larger ones are streamed. */
const WHOLE_FILE_BYTES = 64 * 1024 * 1024

/**
 * A streaming archive of the files, hashed as they are read, so each file is
 * read once. `entries` settles when the last byte was handed to the stream
 * (or rejects with the first read error, which also fails the stream).
 *
 * Table files are small (LevelDB's maxFileSize, 2 MiB by default), so each is
 * read with one call and hashed in one piece. Measured against streaming
 * (1 MiB reads) and against hashing on the thread pool (WebCrypto, which
 * copies the input), this costs the least CPU per byte, and on a small
 * machine the upload competes with the S3 client and the server for it.
 *
 * A file is read only once the pack has handed the previous one on (the
 * pack's entry callback waits for its drain), and the returned stream
 * buffers nothing ahead (highWaterMark 0). Each archive being uploaded
 * otherwise held about four files (two read ahead, one in each stream's
 * buffer) even while its upload waited for a slot: 16 partitions
 * snapshotting at once in one process peaked at 410-474 MB RSS, 340-367 MB
 * without (bench/partitions.ts), and one partition's upload rate did not
 * drop (bench/snapshot.ts, 256 MiB: uploadRatio 0.86-0.93 before, 0.96-0.99).
 *
 * Nothing is read before the stream is first read: a snapshot store reads
 * a body only once the upload has its slot (the stores' maxConcurrentUploads),
 * and every archive waiting for a slot held its first file whole until then.
 * 1,024 partitions whose snapshots came due together after a catch-up
 * (`npm run bench -- many`) held 660 MB of such files while 16 uploaded.
 */
export function packFiles(files: readonly PackInput[]): { stream: Readable; entries: Promise<PackedEntry[]> } {
  const pack = tar.pack()
  let begin!: () => void
  const begun = new Promise<void>((resolve) => { begin = resolve })
  async function* lazily(): AsyncGenerator<Buffer> {
    begin()
    yield* pack as AsyncIterable<Buffer>
  }
  const stream = Readable.from(lazily(), { objectMode: false, highWaterMark: 0 })
  stream.once('close', begin)
  const entries = (async () => {
    await begun
    if (stream.destroyed) {
      // Destroyed before it was read (its upload failed first): nothing to read, and nobody to hear the pack's error.
      pack.destroy()
      throw new Error('the archive was destroyed before it was read')
    }
    const out: PackedEntry[] = []
    let pos = 0
    try {
      for (let i = 0; i < files.length; i++) {
        const file = files[i]!
        const whole = await readWhole(file)
        const header = { name: file.name, size: file.size, mode: 0o644, mtime: MTIME, type: 'file' as const }
        let sha256: string
        if (whole !== undefined) {
          if (whole.data.byteLength !== file.size) throw new Error(`${file.path} is ${whole.data.byteLength} bytes, expected ${file.size}`)
          // The entry's own 'error' too: an upload that stops reading early
          // destroys the pack, which destroys the entry in flight with an
          // AbortError; unheard, that was an uncaught exception.
          await new Promise<void>((resolve, reject) => { pack.entry(header, whole.data, (err) => (err ? reject(err) : resolve())).on('error', reject) })
          sha256 = whole.sha256
        } else {
          sha256 = await streamEntry(pack, header, file.path)
        }
        out.push({ name: file.name, size: file.size, sha256, offset: pos + TAR_BLOCK })
        pos += TAR_BLOCK + paddedSize(file.size)
      }
      pack.finalize()
      return out
    } catch (err) {
      pack.destroy(err as Error)
      throw err
    }
  })()
  // The caller learns about a failure from the stream (its upload fails);
  // this keeps an unobserved rejection from crashing the process meanwhile.
  entries.catch(() => undefined)
  return { stream, entries }
}

async function readWhole(file: PackInput): Promise<{ data: Buffer; sha256: string } | undefined> {
  if (file.size > WHOLE_FILE_BYTES) return undefined
  const data = await readFile(file.path)
  return { data, sha256: createHash('sha256').update(data).digest('hex') }
}

async function streamEntry(pack: tar.Pack, header: tar.Header | { name: string; size: number; mode: number; mtime: Date; type: 'file' }, path: string): Promise<string> {
  const hash = createHash('sha256')
  const entry = pack.entry(header)
  const written = settled(entry)
  for await (const chunk of createReadStream(path, { highWaterMark: 1024 * 1024 }) as AsyncIterable<Buffer>) {
    hash.update(chunk)
    if (!entry.write(chunk)) await drained(entry)
  }
  entry.end(undefined) // streamx's end(data) takes an optional last chunk
  await written
  return hash.digest('hex')
}

type StreamLike = NodeJS.EventEmitter & { destroyed?: boolean }

function settled(stream: StreamLike): Promise<void> {
  return new Promise((resolve, reject) => {
    stream.once('finish', resolve)
    stream.once('error', reject)
    stream.once('close', () => reject(new Error('tar entry closed before it was written')))
  })
}

function drained(stream: StreamLike): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (err?: Error): void => {
      stream.off('drain', onDrain)
      stream.off('close', onClose)
      stream.off('error', done)
      if (err !== undefined) reject(err)
      else resolve()
    }
    const onDrain = (): void => done()
    const onClose = (): void => done(new Error('tar stream closed'))
    stream.on('drain', onDrain)
    stream.on('close', onClose)
    stream.on('error', done)
  })
}

export interface ExpectedEntry {
  name: string
  size: number
  sha256: string
  /** Where the file's data starts in the object. */
  offset: number
}

export type CorruptReason =
  | 'manifest-unreadable'
  | 'object-missing'
  | 'object-truncated'
  | 'unsafe-entry'
  | 'entry-mismatch'
  | 'checksum-mismatch'
  | 'archive-corrupt'
  | 'store-invalid'

export function corrupt(reason: CorruptReason, message: string, details: Record<string, unknown> = {}, cause?: unknown): TidemarkError {
  return new TidemarkError('TIDEMARK_SNAPSHOT_CORRUPT', message, { cause, details: { reason, ...details } })
}

/**
 * Reads a run of consecutive entries that starts at the tar header at byte
 * `start` of an object and writes each file into `dir`. Every entry must be
 * the expected one, in order: a plain file, with the expected name, size
 * and position. A link, a device, a path with a separator, a pax header,
 * anything else is refused before a byte of it is written, so nothing can
 * land outside `dir`. Files are created exclusively ('wx'): an entry cannot
 * replace or write through anything that exists. The descriptor of each
 * written file goes to options.onFile, which then owns it (the restore's
 * fsync queue syncs and closes it); without onFile it is closed here.
 */
export async function extractRun(
  source: Readable,
  start: number,
  expected: readonly ExpectedEntry[],
  dir: string,
  options: { object: string; onBytes?: (n: number) => void; onFile?: (fd: number) => void },
): Promise<void> {
  const extract = tar.extract()
  const where = { object: options.object }
  let sourceError: unknown
  source.on('error', (err) => {
    sourceError = err
    extract.destroy(err)
  })
  // Registered before pipe(): it sees each chunk before the extractor does.
  const unchecked = new UncheckedBytes(start, expected)
  const onBytes = options.onBytes
  source.on('data', (chunk: Buffer) => {
    unchecked.take(chunk)
    onBytes?.(chunk.byteLength)
  })
  source.pipe(extract as unknown as NodeJS.WritableStream)
  let i = 0
  try {
    for await (const entry of extract) {
      const header = entry.header as tar.Header & { byteOffset?: number }
      const want = expected[i]
      const at = start + (header.byteOffset ?? -1)
      const name = typeof header.name === 'string' ? header.name : ''
      if (want === undefined) throw corrupt('entry-mismatch', `${options.object} has an unexpected entry ${JSON.stringify(name)} at byte ${at}`, where)
      if (header.type !== 'file') {
        throw corrupt('unsafe-entry', `${options.object}: entry ${JSON.stringify(name)} is a ${String(header.type)}, not a plain file`, { ...where, file: want.name, entry: name, type: header.type })
      }
      if (name !== want.name || name.includes('/') || name.includes('\\')) {
        throw corrupt(isUnsafeName(name) ? 'unsafe-entry' : 'entry-mismatch', `${options.object}: entry at byte ${at} is named ${JSON.stringify(name)}, expected '${want.name}'`, { ...where, file: want.name, entry: name })
      }
      if (header.pax !== undefined && header.pax !== null) {
        throw corrupt('entry-mismatch', `${options.object}: '${name}' has a pax header, which this format never writes`, { ...where, file: want.name })
      }
      if (at !== want.offset) {
        throw corrupt('entry-mismatch', `${options.object}: '${name}' starts at byte ${at}, the manifest says ${want.offset}`, { ...where, file: want.name })
      }
      if (header.size !== want.size) {
        throw corrupt('entry-mismatch', `${options.object}: '${name}' is ${String(header.size)} bytes in the archive, the manifest says ${want.size}`, { ...where, file: want.name })
      }
      unchecked.checkHeader(i, options.object)
      await writeEntry(entry as unknown as AsyncIterable<Buffer>, join(dir, name), want, options)
      i++
    }
    // The extractor has consumed the whole range: every padding went by.
    for (let j = 0; j < i; j++) unchecked.checkPadding(j, options.object)
  } catch (err) {
    source.destroy()
    extract.destroy()
    throw classify(err, sourceError, options.object)
  }
  if (sourceError !== undefined) throw classify(sourceError, sourceError, options.object)
  if (i !== expected.length) {
    throw corrupt('object-truncated', `${options.object} ended after ${i} of ${expected.length} entries (next: '${expected[i]!.name}')`, { ...where, file: expected[i]!.name })
  }
}

/**
 * Copies byte ranges of a stream as its chunks go by: `regions` are
 * [at, at + length) in stream positions (0 is the first byte seen).
 */
export class StreamRegions {
  readonly #regions: Array<{ at: number; bytes: Buffer; filled: number }>
  /** Region indexes by position, and the first of them not wholly seen yet. */
  readonly #order: number[]
  #next = 0
  #pos = 0

  constructor(regions: ReadonlyArray<{ at: number; length: number }>) {
    this.#regions = regions.map((r) => ({ at: r.at, bytes: Buffer.alloc(Math.max(0, r.length)), filled: 0 }))
    this.#order = this.#regions.map((_, i) => i).sort((a, b) => this.#regions[a]!.at - this.#regions[b]!.at)
  }

  take(chunk: Buffer): void {
    const end = this.#pos + chunk.byteLength
    for (let o = this.#next; o < this.#order.length; o++) {
      const region = this.#regions[this.#order[o]!]!
      if (region.at >= end) break
      const from = Math.max(region.at + region.filled, this.#pos)
      const to = Math.min(region.at + region.bytes.byteLength, end)
      if (to > from) {
        chunk.copy(region.bytes, from - region.at, from - this.#pos, to - this.#pos)
        region.filled = to - region.at
      }
      if (region.filled === region.bytes.byteLength && o === this.#next) this.#next++
    }
    this.#pos = end
  }

  /** Region i's bytes, or undefined while (or when, at the end) the stream has not passed all of it. */
  bytes(i: number): Buffer | undefined {
    const region = this.#regions[i]!
    return region.filled === region.bytes.byteLength ? region.bytes : undefined
  }
}

/** Where a ustar header's checksum field is, and its size. */
const CHECKSUM_AT = 148
const CHECKSUM_BYTES = 8

/**
 * Whether a header's checksum field is as packFiles() writes it: six octal
 * digits, a space, a NUL. tar-stream compares the field's value with the
 * header's sum, which leaves the field out, and parses it leniently (a
 * leading space or another terminator reads as the same number), so a flip
 * there went unnoticed; with this, every byte of a header is checked.
 */
function canonicalChecksumField(field: Buffer): boolean {
  if (field.byteLength !== CHECKSUM_BYTES || field[6] !== 0x20 || field[7] !== 0) return false
  for (let i = 0; i < 6; i++) if (field[i]! < 0x30 || field[i]! > 0x37) return false
  return true
}

/**
 * What is wrong with a whole header (512 bytes) that should be the one
 * packFiles() writes for a file `name` of `size` bytes, or undefined: its
 * sum, its checksum field's form, the name, the size, the type (a plain
 * file) and the ustar magic. For readers that do not parse with tar-stream
 * (snapshots verify); a restore parses with it and checks the rest itself.
 */
export function tarHeaderProblem(header: Buffer, want: { name: string; size: number }): string | undefined {
  let sum = 8 * 0x20
  for (let i = 0; i < TAR_BLOCK; i++) if (i < CHECKSUM_AT || i >= CHECKSUM_AT + CHECKSUM_BYTES) sum += header[i]!
  const field = header.subarray(CHECKSUM_AT, CHECKSUM_AT + CHECKSUM_BYTES)
  if (!canonicalChecksumField(field) || parseInt(field.toString('latin1', 0, 6), 8) !== sum) return 'its checksum does not match'
  const nameEnd = header.indexOf(0)
  const name = header.toString('utf8', 0, nameEnd < 0 || nameEnd > 100 ? 100 : nameEnd)
  if (name !== want.name) return `it names ${JSON.stringify(name)}`
  const sizeField = header.toString('latin1', 124, 136)
  if (!/^[0-7]{11} $/.test(sizeField) || parseInt(sizeField, 8) !== want.size) return `its size field is ${JSON.stringify(sizeField)}`
  if (header[156] !== 0x30) return 'it is not a plain file'
  if (header.toString('latin1', 257, 263) !== 'ustar\0') return 'it is not a ustar header'
  return undefined
}

/** Whether the padding after a file is all zeros, as packFiles() writes it. */
export function zeroPadding(bytes: Buffer): boolean {
  for (let i = 0; i < bytes.byteLength; i++) if (bytes[i] !== 0) return false
  return true
}

/**
 * The bytes of a run that tar-stream reads but does not check: each
 * header's checksum field (see canonicalChecksumField) and the zero padding
 * after each file's data. Every other header byte is in the header's sum,
 * and a file's bytes are in its SHA-256: with these two, a flipped bit
 * anywhere in the bytes a restore reads fails the snapshot.
 */
class UncheckedBytes {
  readonly #regions: StreamRegions
  readonly #expected: readonly ExpectedEntry[]

  constructor(start: number, expected: readonly ExpectedEntry[]) {
    this.#expected = expected
    this.#regions = new StreamRegions(expected.flatMap((e) => [
      { at: e.offset - TAR_BLOCK - start + CHECKSUM_AT, length: CHECKSUM_BYTES },
      { at: e.offset - start + e.size, length: paddedSize(e.size) - e.size },
    ]))
  }

  take(chunk: Buffer): void {
    this.#regions.take(chunk)
  }

  checkHeader(i: number, object: string): void {
    const field = this.#regions.bytes(2 * i)
    if (field === undefined || !canonicalChecksumField(field)) {
      const name = this.#expected[i]!.name
      throw corrupt('archive-corrupt', `${object}: the tar header of '${name}' has a damaged checksum field (${JSON.stringify(field?.toString('latin1'))})`, { object, file: name })
    }
  }

  checkPadding(i: number, object: string): void {
    const padding = this.#regions.bytes(2 * i + 1)
    if (padding === undefined || !zeroPadding(padding)) {
      const name = this.#expected[i]!.name
      throw corrupt('archive-corrupt', `${object}: the padding after '${name}' is damaged (it must be zeros)`, { object, file: name })
    }
  }
}

function checkEntry(want: ExpectedEntry, object: string, size: number, sha256: string): void {
  if (size !== want.size) {
    throw corrupt('object-truncated', `${object}: '${want.name}' has ${size} of ${want.size} bytes`, { object, file: want.name })
  }
  if (sha256 !== want.sha256) {
    throw corrupt('checksum-mismatch', `${object}: '${want.name}' has SHA-256 ${sha256}, the manifest says ${want.sha256}`, { object, file: want.name })
  }
}

/** Passes a written file's descriptor to onFile, or closes it (in the background: a close error of a written file changes nothing). */
function handOver(fd: number, onFile: ((fd: number) => void) | undefined): void {
  if (onFile !== undefined) onFile(fd)
  else fs.close(fd, () => undefined)
}

/**
 * Writes one entry as it streams and checks its size and SHA-256 at the
 * end; a file that fails is removed with the directory. The bytes are
 * written and hashed by the process's writer thread (file-writer.ts), off
 * the event loop; a download holds at most a few of its batches. The file
 * is created exclusively ('wx'): nothing that exists is replaced or written
 * through.
 */
async function writeEntry(entry: AsyncIterable<Buffer>, path: string, want: ExpectedEntry, options: { object: string; onFile?: (fd: number) => void }): Promise<void> {
  const fd = await fsOpen(path, 'wx', 0o644)
  let file: OffThreadFile | undefined
  let written: { size: number; sha256: string }
  try {
    file = new OffThreadFile(fd)
    for await (const chunk of entry) {
      const wait = file.write(chunk)
      if (wait !== undefined) await wait
    }
    written = await file.end()
  } catch (err) {
    // The writer is done with the descriptor before it is closed (its number
    // could be reused); after a failed end() there is nothing left to abort.
    await file?.abort()
    await fdClose(fd)
    throw err
  }
  handOver(fd, options.onFile)
  checkEntry(want, options.object, written.size, written.sha256)
}

const fsOpen = promisify(fs.open)

function isUnsafeName(name: string): boolean {
  return name.startsWith('/') || name.split(/[\\/]/).includes('..') || /^[A-Za-z]:/.test(name)
}

function classify(err: unknown, sourceError: unknown, object: string): unknown {
  if (err instanceof TidemarkError || err instanceof RangeError) return err
  if (sourceError !== undefined && err !== sourceError) return sourceError
  if (err === sourceError) return err
  const message = (err as Error)?.message ?? String(err)
  if (/unexpected end of data/i.test(message)) return corrupt('object-truncated', `${object} ended in the middle of an entry`, { object }, err)
  if ((err as NodeJS.ErrnoException)?.code !== undefined) return err // a local file-system error, not the archive's fault
  return corrupt('archive-corrupt', `${object} is not a valid archive where the manifest points: ${message}`, { object }, err)
}
