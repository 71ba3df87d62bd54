import { createHash, randomBytes } from 'node:crypto'
import { constants, type BigIntStats } from 'node:fs'
import { link, lstat, mkdir, open, readdir, realpath, rename, rm, stat, unlink } from 'node:fs/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import { basename, dirname, isAbsolute, join, resolve } from 'node:path'
import type { Readable } from 'node:stream'
import { pathToFileURL } from 'node:url'
import { TidemarkError, type ErrorCode } from '../errors.js'
import { fsyncDir } from '../util/index.js'
import {
  AbstractSnapshotStore,
  RESERVED_SEGMENT_PREFIX,
  bodyChunks,
  compareKeys,
  type InternalPutOptions,
  type ObjectInfo,
  type PutResult,
  type SnapshotStoreCapabilities,
} from './snapshot-store.js'
import { checkTransferLimit, releaseOnClose, TransferLimiter } from './transfer-limiter.js'
import { FS_STORE_DEFAULTS, type FsSnapshotStoreOptions } from './fs-store-options.js'

/**
 * Objects up to this size have a content etag (the MD5 of their bytes, as S3
 * gives a single PutObject); head() reads them to compute it. Larger objects
 * (snapshot data) get an etag from stat instead, which head() must not pay a
 * full read for.
 */
const CONTENT_ETAG_LIMIT = 64 * 1024

/**
 * The snapshot store on a local or mounted file system (NFS, JuiceFS). Keys
 * map to paths under the root. Durability follows the usual recipe: write a
 * temporary file in the target directory, fsync it, rename it into place,
 * fsync the directory, so a crash leaves the old object or the new one and at
 * worst a temporary file that list() ignores and sweepTemporaryFiles()
 * removes once it is old.
 *
 * Etags: an object of at most 64 KiB (claims, manifests) has the MD5 of its
 * bytes as etag, which changes with every replacement that changes a byte;
 * a larger one has `s-<inode>-<size>-<mtime in ns>` from stat, which two
 * replacements inside one file-system timestamp tick that reuse an inode
 * could repeat. put() and head() report them, list() leaves them out (it
 * would read every small object). A put with ifMatch takes a lock file
 * (`.tidemark-tmp-lock-<name>`, created with O_EXCL beside the object)
 * around its compare and rename, so compare-and-swaps of one key from any
 * number of processes on hosts sharing the file system are atomic with
 * respect to each other; plain puts and deletes do not take the lock.
 *
 * The store never goes through a symbolic link below its root (the root
 * itself may be one): a linked directory may lead out of the root, where
 * garbage collection would delete files that are not the store's. list()
 * skips linked directories and files; get, head, put and deleteMany of a key
 * behind a link fail with TIDEMARK_DFS_REQUEST_FAILED. The check compares the
 * directory's real path with the path under the real root, one realpath()
 * per directory and call; it guards against a mistaken setup, not against a
 * process that swaps a directory for a link between the check and the use.
 */
export class FsSnapshotStore extends AbstractSnapshotStore {
  readonly url: string
  readonly root: string
  readonly capabilities: SnapshotStoreCapabilities = Object.freeze({ conditionalPut: true, compareAndSwap: true })
  readonly temporaryFileGraceMs: number
  readonly lockStaleMs: number
  /** realpath(root), once the root exists. */
  #realRoot: string | undefined
  readonly #uploads: TransferLimiter
  readonly #downloads: TransferLimiter

  constructor(options: FsSnapshotStoreOptions) {
    super()
    if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object with a root path')
    const { root, temporaryFileGraceMs = FS_STORE_DEFAULTS.temporaryFileGraceMs, lockStaleMs = FS_STORE_DEFAULTS.lockStaleMs } = options
    if (typeof root !== 'string' || root === '') throw new TypeError(`root must be a non-empty path string, got ${String(root)}`)
    if (!isAbsolute(root)) throw new RangeError(`root ('${root}') must be an absolute path`)
    if (typeof temporaryFileGraceMs !== 'number') throw new TypeError(`temporaryFileGraceMs must be a number, got ${typeof temporaryFileGraceMs}`)
    if (!Number.isSafeInteger(temporaryFileGraceMs) || temporaryFileGraceMs < 0) throw new RangeError(`temporaryFileGraceMs (${temporaryFileGraceMs}) must be an integer >= 0`)
    if (typeof lockStaleMs !== 'number') throw new TypeError(`lockStaleMs must be a number, got ${typeof lockStaleMs}`)
    if (!Number.isSafeInteger(lockStaleMs) || lockStaleMs < 1) throw new RangeError(`lockStaleMs (${lockStaleMs}) must be an integer >= 1`)
    this.lockStaleMs = lockStaleMs
    this.root = resolve(root)
    this.url = pathToFileURL(this.root).href
    this.temporaryFileGraceMs = temporaryFileGraceMs
    this.#uploads = new TransferLimiter(checkTransferLimit(options.maxConcurrentUploads ?? FS_STORE_DEFAULTS.maxConcurrentUploads, 'maxConcurrentUploads'))
    this.#downloads = new TransferLimiter(checkTransferLimit(options.maxConcurrentDownloads ?? FS_STORE_DEFAULTS.maxConcurrentDownloads, 'maxConcurrentDownloads'))
  }

  protected async _put(key: string, body: Readable | Uint8Array, options: InternalPutOptions): Promise<PutResult> {
    // A body in memory takes no slot: its memory is spent, and a claim's renewal must not queue behind snapshot data.
    return body instanceof Uint8Array ? this.#put(key, body, options) : this.#uploads.run(() => this.#put(key, body, options))
  }

  async #put(key: string, body: Readable | Uint8Array, options: InternalPutOptions): Promise<PutResult> {
    const path = this.#path(key)
    const dir = dirname(path)
    try {
      // Checked before mkdir, which would create directories wherever a link leads.
      await this.#assertNoLinkUpTo(dir, 'put', key)
      await mkdirDurably(dir)
    } catch (err) {
      throw fsError(err, 'put', key, path)
    }
    const temp = join(dir, `${RESERVED_SEGMENT_PREFIX}-${randomBytes(8).toString('hex')}`)
    // File-system failures become TidemarkErrors at each call; an error of the
    // caller's body stream passes through as it is: it is not the store's.
    const fail = (err: unknown): never => {
      throw fsError(err, 'put', key, path)
    }
    let size = 0
    let etag = ''
    const md5 = createHash('md5')
    try {
      const file = await open(temp, 'wx', 0o644).catch(fail)
      try {
        for await (const chunk of bodyChunks(key, body, options.contentLength)) {
          await file.write(chunk).catch(fail)
          size += chunk.byteLength
          if (size <= CONTENT_ETAG_LIMIT) md5.update(chunk)
        }
        await file.sync().catch(fail)
        // A rename keeps inode, size and mtime, so the temporary file's stat is the object's.
        etag = size <= CONTENT_ETAG_LIMIT ? md5.digest('hex') : statEtag(await file.stat({ bigint: true }).catch(fail))
      } finally {
        await file.close()
      }
      if (options.ifMatch !== undefined) {
        // It syncs the directory itself, under the lock.
        await this.#swap(key, path, temp, options.ifMatch)
        return { key, size, etag }
      } else if (options.ifNoneMatch) {
        // link() creates the name only if it is free, atomically, also on NFS;
        // rename() would replace an existing object.
        await link(temp, path).catch((err: unknown) => {
          if ((err as NodeJS.ErrnoException).code !== 'EEXIST') fail(err)
          throw new TidemarkError('TIDEMARK_DFS_OBJECT_EXISTS', `'${key}' already exists in ${this.url}`, { cause: err, details: { key, path } })
        })
        await unlink(temp).catch(fail)
      } else {
        await rename(temp, path).catch(fail)
      }
      await fsyncDir(dir).catch(fail)
    } catch (err) {
      await rm(temp, { force: true }).catch(() => {}) // the first failure is the one to report
      throw err
    }
    return { key, size, etag }
  }

  /** Renames `temp` over the object at `path` if the object's etag is `ifMatch`, under the key's lock. */
  async #swap(key: string, path: string, temp: string, ifMatch: string): Promise<void> {
    const lock = join(dirname(path), `${RESERVED_SEGMENT_PREFIX}-lock-${basename(path)}`)
    await this.#lock(key, lock)
    try {
      const current = await this.#info(key, path, true)
      if (current === 'link') throw this.#linked('put', key, path)
      if (current?.etag !== ifMatch) {
        throw new TidemarkError('TIDEMARK_DFS_PRECONDITION_FAILED',
          `put of '${key}' with ifMatch '${ifMatch}' found ${current === undefined ? 'no object' : `another version (etag '${current.etag}')`} at ${path}`,
          { details: { key, path, ifMatch } })
      }
      await rename(temp, path)
      await fsyncDir(dirname(path))
    } catch (err) {
      throw fsError(err, 'put', key, path)
    } finally {
      await unlink(lock).catch(() => {}) // a lock left behind is broken once stale
    }
  }

  /**
   * Creates the lock file, waiting while a live one exists. A stale one (see
   * lockStaleMs) is renamed aside first, so that of two processes breaking
   * it at once only one succeeds; a breaker that finds it moved a fresh lock
   * instead (someone broke and retook it in between) links it back.
   */
  async #lock(key: string, lock: string): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        const handle = await open(lock, 'wx', 0o644)
        await handle.close()
        return
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw fsError(err, 'put', key, lock)
      }
      const held = await lstat(lock).catch((err: unknown) => {
        if (isMissing(err)) return undefined
        throw fsError(err, 'put', key, lock)
      })
      if (held === undefined) continue // released meanwhile
      if (Date.now() - held.mtimeMs > this.lockStaleMs) {
        const aside = `${lock}-broken-${randomBytes(8).toString('hex')}`
        const moved = await rename(lock, aside).then(() => true, (err: unknown) => {
          if (isMissing(err)) return false // another process broke it first
          throw fsError(err, 'put', key, lock)
        })
        if (moved) {
          const broken = await lstat(aside).catch((err: unknown) => {
            throw fsError(err, 'put', key, aside)
          })
          if (broken.ino !== held.ino || broken.mtimeMs !== held.mtimeMs) await link(aside, lock).catch(() => {})
          await unlink(aside).catch(() => {})
        }
        continue
      }
      // A lock is held for one compare and rename: milliseconds.
      await sleep(Math.min(2 + attempt, 20) * (0.5 + Math.random()))
    }
  }

  protected async _get(key: string, range: { start: number; end: number | undefined } | undefined, options: { metadata: boolean }): Promise<Readable> {
    if (options.metadata) return this.#get(key, range)
    const release = await this.#downloads.acquire()
    try {
      return releaseOnClose(await this.#get(key, range), release)
    } catch (err) {
      release()
      throw err
    }
  }

  async #get(key: string, range: { start: number; end: number | undefined } | undefined): Promise<Readable> {
    const path = this.#path(key)
    let file
    try {
      if (await this.#dirState(dirname(path)) === 'linked') throw this.#linked('get', key, dirname(path))
      // O_NOFOLLOW: a link in the object's place fails with ELOOP instead of being read.
      file = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW).catch((err: unknown) => {
        if ((err as NodeJS.ErrnoException).code === 'ELOOP') throw this.#linked('get', key, path, err)
        throw err
      })
    } catch (err) {
      throw fsError(err, 'get', key, path)
    }
    try {
      const info = await file.stat().catch((err: unknown) => {
        throw fsError(err, 'get', key, path)
      })
      // open() succeeds on a directory; a directory is a key prefix, not an object.
      if (!info.isFile()) throw new TidemarkError('TIDEMARK_DFS_NOT_FOUND', `get of '${key}' does not exist at ${path} (a directory)`, { details: { key, path } })
      if (range !== undefined && range.start >= info.size) {
        throw new RangeError(`range.start (${range.start}) is at or past the end of '${key}' (${info.size} bytes)`)
      }
    } catch (err) {
      await file.close()
      throw err
    }
    // The stream owns the handle from here and closes it when it ends or is destroyed.
    return file.createReadStream(range === undefined ? {} : { start: range.start, end: range.end ?? Infinity })
  }

  protected async _head(key: string): Promise<ObjectInfo | undefined> {
    const path = this.#path(key)
    try {
      if (await this.#dirState(dirname(path)) === 'linked') throw this.#linked('head', key, dirname(path))
    } catch (err) {
      throw fsError(err, 'head', key, path)
    }
    const info = await this.#info(key, path, true)
    if (info === 'link') throw this.#linked('head', key, path)
    return info
  }

  /** The object at `path` (lstat: a link is reported, not followed), with its etag when `withEtag`, or undefined. */
  async #info(key: string, path: string, withEtag = false): Promise<ObjectInfo | 'link' | undefined> {
    try {
      const info = await lstat(path)
      if (info.isSymbolicLink()) return 'link'
      if (!info.isFile()) return undefined
      if (!withEtag) return { key, size: info.size, lastModified: info.mtime }
      // Size, time and etag from one open file, so that they describe the same version.
      return await versionInfo(key, path)
    } catch (err) {
      if (isMissing(err)) return undefined
      throw fsError(err, 'head', key, path)
    }
  }

  protected async *_list(prefix: string, options: { startAfter: string | undefined; limit: number }): AsyncGenerator<ObjectInfo> {
    let count = 0
    // Start at the deepest directory that the prefix names in full.
    for await (const info of this.#walk(prefix.slice(0, prefix.lastIndexOf('/') + 1), prefix, options.startAfter)) {
      yield info
      if (++count >= options.limit) return
    }
  }

  async *#walk(dirKey: string, prefix: string, startAfter: string | undefined): AsyncGenerator<ObjectInfo> {
    let entries
    try {
      // A linked directory is not the store's: its keys do not exist.
      if (await this.#dirState(join(this.root, dirKey)) !== 'inside') return
      entries = await readdir(join(this.root, dirKey), { withFileTypes: true })
    } catch (err) {
      if (isMissing(err)) return
      throw fsError(err, 'list', dirKey, join(this.root, dirKey))
    }
    // A directory sorts as its name plus '/', which puts every key of its
    // subtree where S3 would list it ('a.x' < 'a/b' because '.' < '/').
    const children = entries
      .filter((entry) => (entry.isFile() || entry.isDirectory()) && !entry.name.startsWith(RESERVED_SEGMENT_PREFIX))
      .map((entry) => ({ key: dirKey + entry.name + (entry.isDirectory() ? '/' : ''), isDirectory: entry.isDirectory() }))
      .sort((a, b) => compareKeys(a.key, b.key))
    for (const child of children) {
      if (child.isDirectory) {
        if (!child.key.startsWith(prefix) && !prefix.startsWith(child.key)) continue
        // Skip a subtree that lies wholly at or before startAfter.
        if (startAfter !== undefined && compareKeys(child.key, startAfter) <= 0 && !startAfter.startsWith(child.key)) continue
        yield* this.#walk(child.key, prefix, startAfter)
      } else {
        if (!child.key.startsWith(prefix)) continue
        if (startAfter !== undefined && compareKeys(child.key, startAfter) <= 0) continue
        const info = await this.#info(child.key, this.#path(child.key))
        if (info !== undefined && info !== 'link') yield info // undefined: deleted since readdir()
      }
    }
  }

  protected async _deleteMany(keys: string[]): Promise<void> {
    // Every directory is checked before the first unlink, so a call with a
    // key behind a link deletes nothing.
    const states = new Map<string, DirState>()
    for (const key of keys) {
      const dir = dirname(this.#path(key))
      if (states.has(dir)) continue
      try {
        states.set(dir, await this.#dirState(dir))
      } catch (err) {
        throw fsError(err, 'deleteMany', key, dir)
      }
      if (states.get(dir) === 'linked') throw this.#linked('deleteMany', key, dir)
    }
    const dirs = new Set<string>()
    // Bounded parallelism: garbage collection deletes thousands of objects, and
    // on a network file system each unlink is a round trip.
    for (let i = 0; i < keys.length; i += 32) {
      await Promise.all(keys.slice(i, i + 32).map(async (key) => {
        const path = this.#path(key)
        if (states.get(dirname(path)) === 'missing') return
        try {
          await unlink(path)
          dirs.add(dirname(path))
        } catch (err) {
          // EISDIR/EPERM: the key names a directory (a key prefix), so no object.
          const code = (err as NodeJS.ErrnoException).code
          if (isMissing(err) || ((code === 'EISDIR' || code === 'EPERM') && await isDirectory(path))) return
          throw fsError(err, 'deleteMany', key, path)
        }
      }))
    }
    // Empty directories are left in place: removing them would race with a
    // concurrent put() into the same directory, and they cost list() little.
    for (const dir of dirs) {
      try {
        await fsyncDir(dir)
      } catch (err) {
        throw fsError(err, 'deleteMany', keys[0] ?? '', dir)
      }
    }
  }

  /**
   * Removes the temporary files under `prefix` whose last write is older
   * than temporaryFileGraceMs: what puts killed between their write and
   * their rename left. Linked directories are not entered.
   */
  protected override async _sweepTemporaryFiles(prefix: string): Promise<number> {
    return this.#sweep(prefix.slice(0, prefix.lastIndexOf('/') + 1), prefix, Date.now() - this.temporaryFileGraceMs)
  }

  async #sweep(dirKey: string, prefix: string, before: number): Promise<number> {
    const dir = join(this.root, dirKey)
    let entries
    try {
      if (await this.#dirState(dir) !== 'inside') return 0
      entries = await readdir(dir, { withFileTypes: true })
    } catch (err) {
      if (isMissing(err)) return 0
      throw fsError(err, 'sweepTemporaryFiles', dirKey, dir)
    }
    let removed = 0
    for (const entry of entries) {
      const key = dirKey + entry.name
      if (entry.isDirectory()) {
        if (`${key}/`.startsWith(prefix) || prefix.startsWith(`${key}/`)) removed += await this.#sweep(`${key}/`, prefix, before)
      } else if (entry.isFile() && entry.name.startsWith(RESERVED_SEGMENT_PREFIX) && key.startsWith(prefix)) {
        const path = join(dir, entry.name)
        try {
          if ((await lstat(path)).mtimeMs >= before) continue
          await unlink(path)
          removed++
        } catch (err) {
          if (!isMissing(err)) throw fsError(err, 'sweepTemporaryFiles', key, path)
        }
      }
    }
    return removed
  }

  #path(key: string): string {
    return join(this.root, ...key.split('/'))
  }

  /**
   * Whether the directory at `dir` (under the root) is the one its path
   * names, with no link on the way from the root: its real path must be the
   * same path under the real root.
   */
  async #dirState(path: string): Promise<DirState> {
    const dir = resolve(path) // without a trailing '/', as realpath() answers
    try {
      this.#realRoot ??= await realpath(this.root)
      const real = await realpath(dir)
      return real === this.#realRoot + dir.slice(this.root.length) ? 'inside' : 'linked'
    } catch (err) {
      if (isMissing(err)) return 'missing'
      throw err
    }
  }

  /** Fails when the deepest existing directory of `dir` (or `dir` itself) lies behind a link. */
  async #assertNoLinkUpTo(dir: string, op: string, key: string): Promise<void> {
    for (let d = dir; d.startsWith(this.root); d = dirname(d)) {
      const state = await this.#dirState(d)
      if (state === 'linked') throw this.#linked(op, key, d)
      if (state === 'inside' || d === this.root) return
    }
  }

  #linked(op: string, key: string, path: string, cause?: unknown): TidemarkError {
    return new TidemarkError(
      'TIDEMARK_DFS_REQUEST_FAILED',
      `${op} of '${key}' refused: ${path} is or lies behind a symbolic link, which ${this.url} does not follow (it may lead out of the store's root)`,
      { cause, details: { key, path } },
    )
  }
}

type DirState = 'inside' | 'linked' | 'missing'

/** mkdir -p, then fsync the parent of every directory it created, so the new entries survive a crash. */
async function mkdirDurably(dir: string): Promise<void> {
  const first = await mkdir(dir, { recursive: true })
  if (first === undefined) return
  for (let created = dir; ; created = dirname(created)) {
    await fsyncDir(dirname(created))
    if (created === first) return
  }
}

/** The object's info with its etag, or undefined when it is gone or no file; O_NOFOLLOW, as get() reads. */
async function versionInfo(key: string, path: string): Promise<ObjectInfo | 'link' | undefined> {
  let handle
  try {
    handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW)
  } catch (err) {
    if (isMissing(err)) return undefined
    if ((err as NodeJS.ErrnoException).code === 'ELOOP') return 'link'
    throw err
  }
  try {
    // Read from the handle, not the path: a rename in between cannot mix two versions.
    const info = await handle.stat({ bigint: true })
    if (!info.isFile()) return undefined
    const size = Number(info.size)
    const etag = size <= CONTENT_ETAG_LIMIT ? createHash('md5').update(await handle.readFile()).digest('hex') : statEtag(info)
    return { key, size, lastModified: info.mtime, etag }
  } finally {
    await handle.close()
  }
}

function statEtag(info: BigIntStats): string {
  return `s-${info.ino.toString(16)}-${info.size.toString(16)}-${info.mtimeNs.toString(16)}`
}


async function isDirectory(path: string): Promise<boolean> {
  return stat(path).then((info) => info.isDirectory(), () => false)
}

function isMissing(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code
  // ENOTDIR: a parent of the path is a file, so the key cannot exist either.
  return code === 'ENOENT' || code === 'ENOTDIR'
}

const UNAVAILABLE = new Set(['EIO', 'ENOSPC', 'EDQUOT', 'ETIMEDOUT', 'ESTALE', 'EAGAIN', 'EBUSY', 'EMFILE', 'ENFILE', 'ENOMEM', 'EINTR', 'ECONNRESET', 'EHOSTDOWN'])
const DENIED = new Set(['EACCES', 'EPERM', 'EROFS'])

function fsError(err: unknown, op: string, key: string, path: string): Error {
  if (err instanceof TidemarkError || err instanceof TypeError || err instanceof RangeError) return err
  const errno = (err as NodeJS.ErrnoException).code ?? 'unknown'
  let code: ErrorCode = 'TIDEMARK_DFS_REQUEST_FAILED'
  if (op === 'get' && isMissing(err)) code = 'TIDEMARK_DFS_NOT_FOUND'
  else if (DENIED.has(errno)) code = 'TIDEMARK_DFS_ACCESS_DENIED'
  else if (UNAVAILABLE.has(errno)) code = 'TIDEMARK_DFS_UNAVAILABLE'
  const why = code === 'TIDEMARK_DFS_NOT_FOUND' ? 'does not exist' : `failed (${errno})`
  return new TidemarkError(code, `${op} of '${key}' ${why} at ${path}`, { cause: err, details: { key, path } })
}
