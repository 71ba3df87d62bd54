import { createHash, randomBytes } from 'node:crypto'
import { access, link, open, readdir, readFile, unlink, writeFile } from 'node:fs/promises'
import { hostname } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { TidemarkError } from '../errors.js'

/**
 * A mutex between processes on one host, kept as a file.
 *
 * Why a file and not flock(2): Node has no flock, and a native addon for one
 * call is not worth it. Each LockFile writes its holder identity once to a
 * private file `<lock>.<host>.<pid>.<nonce>` and takes the lock by link(2)ing that
 * file to the lock name: link fails with EEXIST when the name is taken, is
 * atomic on local file systems and on NFS, and never shows a half-written
 * lock (open with 'wx' followed by a write would leave an empty lock behind a
 * crash between the two calls). Taking and releasing are one system call
 * each, which matters because every group of appends takes the lock.
 *
 * A lock whose holder died (same host, its pid gone) is broken. Breaking goes
 * through a second lock, so that two processes that find the same dead holder
 * cannot both delete the lock, the second one deleting the fresh lock the
 * first one took meanwhile. Holders on other hosts are never broken: their
 * liveness cannot be checked here, and waiting ends with TIDEMARK_LOG_LOCKED.
 *
 * A holder may keep the lock across many operations (the file log keeps it
 * while appends keep coming, so that they cost no lock-file work). Waiting is
 * therefore announced: a process that finds the lock taken creates
 * `<lock>.want` (create-only, so an existing one is not written again), the
 * holder looks for it with wanted() after each operation and releases, and
 * whoever takes the lock next, or gives up waiting, removes it (other waiters
 * create it again at their next attempt). One left by a waiter that died only
 * costs the next holder one needless release.
 */

interface Holder {
  pid: number
  host: string
  nonce: string
}

const host = hostname()
/** Private files carry the host in their name, so only this host's dead ones are removed on a shared mount. */
const hostTag = createHash('sha256').update(host).digest('hex').slice(0, 8)

export class LockFile {
  readonly path: string
  readonly #me: Holder = { pid: process.pid, host, nonce: randomBytes(8).toString('hex') }
  readonly #private: string
  readonly #want: string
  #ready = false

  constructor(path: string) {
    this.path = path
    this.#want = `${path}.want`
    this.#private = `${path}.${hostTag}.${process.pid}.${this.#me.nonce}`
  }

  /** Waits up to `timeoutMs` for the lock; `what` names the protected thing in the error. */
  async acquire(timeoutMs: number, what: string): Promise<void> {
    const deadline = Date.now() + timeoutMs
    let delay = 0.25
    let announced = false
    for (;;) {
      if (await this.tryAcquire()) {
        if (announced) await unlink(this.#want).catch(() => {})
        return
      }
      // Again at each attempt: a waiter that took the lock or gave up removed it.
      await announce(this.#want)
      announced = true
      const holder = await readHolder(this.path)
      if (holder !== undefined && isDead(holder)) {
        await breakLock(this.path, holder)
        continue
      }
      if (Date.now() >= deadline) {
        await unlink(this.#want).catch(() => {})
        const who = holder === undefined ? 'an unknown process' : `pid ${holder.pid} on ${holder.host}`
        throw new TidemarkError('TIDEMARK_LOG_LOCKED', `${what} is locked by ${who} (${this.path}); waited ${timeoutMs} ms`, {
          details: { path: this.path, holder },
        })
      }
      // The holder releases after the operation in progress (one group of
      // appends, at most a few MiB) once it sees the want file, usually
      // within a millisecond or two, so a short jittered backoff wastes
      // little and needs no watcher (fs.watch is unreliable on network file
      // systems).
      await new Promise((resolve) => setTimeout(resolve, delay * (0.5 + Math.random())))
      delay = Math.min(delay * 2, 4)
    }
  }

  /** One attempt, without waiting. */
  async tryAcquire(): Promise<boolean> {
    if (!this.#ready) {
      await removeDeadPrivates(this.path)
      await writeFile(this.#private, JSON.stringify(this.#me))
      this.#ready = true
    }
    try {
      await link(this.#private, this.path)
      return true
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code === 'EEXIST') return false
      if (code === 'ENOENT') {
        // Our private file was removed from outside; write it again.
        this.#ready = false
        return this.tryAcquire()
      }
      throw err
    }
  }

  /** Only this holder can remove its lock while it lives, so no check is needed first. */
  async release(): Promise<void> {
    await unlink(this.path)
  }

  /** Whether another process (or LockFile) is waiting for the lock: one stat, no write. */
  async wanted(): Promise<boolean> {
    return access(this.#want).then(() => true, () => false)
  }

  /** Removes the private file; the lock must not be held. */
  async dispose(): Promise<void> {
    if (this.#ready) await unlink(this.#private).catch(() => {})
    this.#ready = false
  }
}

/** Creates the want file unless it exists; failing to announce only makes the wait longer. */
async function announce(path: string): Promise<void> {
  try {
    const handle = await open(path, 'wx')
    await handle.close()
  } catch {
    // EEXIST: announced already, by us or another waiter.
  }
}

async function readHolder(path: string): Promise<Holder | undefined> {
  try {
    const value = JSON.parse(await readFile(path, 'utf8')) as Partial<Holder>
    if (typeof value.pid === 'number' && typeof value.host === 'string' && typeof value.nonce === 'string') return value as Holder
  } catch {
    // Released between our link attempt and this read, or not a lock we wrote.
  }
  return undefined
}

function isDead(holder: Holder): boolean {
  if (holder.host !== host) return false
  try {
    process.kill(holder.pid, 0)
    return false
  } catch (err) {
    // EPERM: the pid exists but belongs to another user, so it is alive.
    return (err as NodeJS.ErrnoException).code === 'ESRCH'
  }
}

async function breakLock(path: string, dead: Holder): Promise<void> {
  const breaker = new LockFile(`${path}.break`)
  try {
    if (!(await breaker.tryAcquire())) {
      // A breaker that died inside its few milliseconds of work leaves its
      // lock behind; remove it so that the next attempt can proceed.
      const other = await readHolder(breaker.path)
      if (other !== undefined && isDead(other)) await unlink(breaker.path).catch(() => {})
      return
    }
    try {
      // Only the exact dead holder is removed: if the lock changed hands
      // since we looked, it belongs to a live process now.
      const current = await readHolder(path)
      if (current !== undefined && current.nonce === dead.nonce) await unlink(path).catch(() => {})
    } finally {
      await breaker.release().catch(() => {})
    }
  } finally {
    await breaker.dispose()
  }
}

/** Private files of processes that died stay behind; the next LockFile on the same lock removes them. */
async function removeDeadPrivates(path: string): Promise<void> {
  const prefix = `${basename(path)}.`
  const names = await readdir(dirname(path)).catch(() => [] as string[])
  for (const name of names) {
    const m = /^([0-9a-f]{8})\.(\d+)\.[0-9a-f]{16}$/.exec(name.startsWith(prefix) ? name.slice(prefix.length) : '')
    if (m === null || m[1] !== hostTag) continue
    const pid = Number(m[2])
    if (pid !== process.pid && isDead({ pid, host, nonce: '' })) await unlink(join(dirname(path), name)).catch(() => {})
  }
}
