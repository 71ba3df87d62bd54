import { randomBytes } from 'node:crypto'
import { link, mkdir, open, readdir, rename, rm, stat, unlink } from 'node:fs/promises'
import { dirname, isAbsolute, join, resolve } from 'node:path'
import type { Readable } from 'node:stream'
import { pathToFileURL } from 'node:url'
import { TidemarkError, type ErrorCode } from '../errors.js'
import {
  AbstractSnapshotStore,
  RESERVED_SEGMENT_PREFIX,
  bodyChunks,
  compareKeys,
  type ObjectInfo,
  type PutResult,
  type SnapshotStoreCapabilities,
} from './snapshot-store.js'

export interface FsSnapshotStoreOptions {
  /** Absolute path of the store's root directory; created on the first put. */
  root: string
}

/**
 * The snapshot store on a local or mounted file system (NFS, JuiceFS). Keys
 * map to paths under the root. Durability follows the usual recipe: write a
 * temporary file in the target directory, fsync it, rename it into place,
 * fsync the directory, so a crash leaves the old object or the new one and at
 * worst a temporary file that list() ignores.
 */
export class FsSnapshotStore extends AbstractSnapshotStore {
  readonly url: string
  readonly root: string
  readonly capabilities: SnapshotStoreCapabilities = Object.freeze({ conditionalPut: true })

  constructor(options: FsSnapshotStoreOptions) {
    super()
    if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object with a root path')
    const { root } = options
    if (typeof root !== 'string' || root === '') throw new TypeError(`root must be a non-empty path string, got ${String(root)}`)
    if (!isAbsolute(root)) throw new RangeError(`root ('${root}') must be an absolute path`)
    this.root = resolve(root)
    this.url = pathToFileURL(this.root).href
  }

  protected async _put(key: string, body: Readable | Uint8Array, options: { contentLength: number | undefined; ifNoneMatch: boolean }): Promise<PutResult> {
    const path = this.#path(key)
    const dir = dirname(path)
    try {
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
    try {
      const file = await open(temp, 'wx', 0o644).catch(fail)
      try {
        for await (const chunk of bodyChunks(key, body, options.contentLength)) {
          await file.write(chunk).catch(fail)
          size += chunk.byteLength
        }
        await file.sync().catch(fail)
      } finally {
        await file.close()
      }
      if (options.ifNoneMatch) {
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
    return { key, size }
  }

  protected async _get(key: string, range: { start: number; end: number | undefined } | undefined): Promise<Readable> {
    const path = this.#path(key)
    let file
    try {
      file = await open(path, 'r')
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
      const info = await stat(path)
      return info.isFile() ? { key, size: info.size, lastModified: info.mtime } : undefined
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
        const info = await this._head(child.key)
        if (info !== undefined) yield info // undefined: deleted since readdir()
      }
    }
  }

  protected async _deleteMany(keys: string[]): Promise<void> {
    const dirs = new Set<string>()
    // Bounded parallelism: garbage collection deletes thousands of objects, and
    // on a network file system each unlink is a round trip.
    for (let i = 0; i < keys.length; i += 32) {
      await Promise.all(keys.slice(i, i + 32).map(async (key) => {
        const path = this.#path(key)
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

  #path(key: string): string {
    return join(this.root, ...key.split('/'))
  }
}

/** mkdir -p, then fsync the parent of every directory it created, so the new entries survive a crash. */
async function mkdirDurably(dir: string): Promise<void> {
  const first = await mkdir(dir, { recursive: true })
  if (first === undefined) return
  for (let created = dir; ; created = dirname(created)) {
    await fsyncDir(dirname(created))
    if (created === first) return
  }
}

async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r')
  try {
    await handle.sync()
  } catch (err) {
    // Some network and FUSE file systems refuse fsync on a directory; their
    // rename and link are durable when they return.
    if ((err as NodeJS.ErrnoException).code !== 'EINVAL' && (err as NodeJS.ErrnoException).code !== 'ENOTSUP') throw err
  } finally {
    await handle.close()
  }
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
