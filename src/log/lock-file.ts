import { createHash, randomBytes } from 'node:crypto'
import { watch, type FSWatcher } from 'node:fs'
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
 * holder looks for it with wanted() after each operation, and a holder that
 * saw it removes it as it releases. A waiter watches the lock it found
 * before it announces, so an announcement removed by a holder that was about
 * to release is not lost: that release wakes the waiter. A waiter that gives
 * up removes it too. One left behind (by a waiter that took the lock itself,
 * or died) only costs the next holder one needless release.
 *
 * A waiter does not poll: it watches the lock file (inotify), whose link
 * count drops when its holder releases, and tries again at once. The watch
 * is backed by a timer (FALLBACK_MS), which also catches a holder that died
 * while we waited, and covers file systems whose changes by other hosts
 * inotify does not see.
 */

/** How long a waiter waits for the release event before it looks at the holder and tries again. */
const FALLBACK_MS = 50
/** Without inotify (no watches left), a waiter polls this often. */
const POLL_MS = 2

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
  /** An announcement was seen since the lock was taken; release() removes it. */
  #sawWant = false
  #held = false

  /** Called when a waiter announces itself while the lock is held (and the directory can be watched). */
  readonly #onWanted: () => void
  /** Watches the directory for announcements while the lock is held, so that wanted() costs nothing. */
  #announcements: FSWatcher | undefined | null

  constructor(path: string, onWanted: () => void = () => {}) {
    this.path = path
    this.#onWanted = onWanted
    this.#want = `${path}.want`
    this.#private = `${path}.${hostTag}.${process.pid}.${this.#me.nonce}`
  }

  /** This LockFile's identity in the lock it holds (the append relay's socket is named after it). */
  get nonce(): string {
    return this.#me.nonce
  }

  /**
   * The nonce of the live holder of the lock on this host, if another
   * LockFile holds it: whom an appender may relay its appends to instead of
   * waiting. Undefined for no lock, our own, one on another host, or a dead
   * holder (the wait breaks that one).
   */
  async liveHolderHere(): Promise<{ pid: number; nonce: string } | undefined> {
    const holder = await readHolder(this.path)
    if (holder === undefined || holder.host !== host || holder.nonce === this.#me.nonce || isDead(holder)) return undefined
    return { pid: holder.pid, nonce: holder.nonce }
  }

  /** Waits up to `timeoutMs` for the lock; `what` names the protected thing in the error. */
  async acquire(timeoutMs: number, what: string): Promise<void> {
    const deadline = Date.now() + timeoutMs
    // Whether the holder was checked for death since the last wake by the
    // timer: not at the first failure, which is nearly always a live holder
    // about to release (a dead one costs one FALLBACK_MS).
    let checked = true
    for (;;) {
      if (await this.tryAcquire()) {
        this.#taken()
        return
      }
      // Before announcing: a release from now on wakes us (see the class comment).
      const release = watchRelease(this.path)
      // Released between our attempt and the watch: try again at once.
      if (release === undefined) continue
      try {
        await announce(this.#want)
        if (!checked) {
          checked = true
          const holder = await readHolder(this.path)
          if (holder !== undefined && isDead(holder)) {
            await breakLock(this.path, holder)
            continue
          }
        }
        const remaining = deadline - Date.now()
        if (remaining <= 0) {
          // Not left for the holder to release for nobody. Another waiter's
          // announcement may go with it: that waiter announces again when its
          // timer wakes it.
          await unlink(this.#want).catch(() => {})
          const holder = await readHolder(this.path)
          const who = holder === undefined ? 'an unknown process' : `pid ${holder.pid} on ${holder.host}`
          throw new TidemarkError('TIDEMARK_LOG_LOCKED', `${what} is locked by ${who} (${this.path}); waited ${timeoutMs} ms`, {
            details: { path: this.path, holder },
          })
        }
        if (!(await release.wait(Math.min(remaining, FALLBACK_MS)))) checked = false
      } finally {
        release.close()
      }
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

  /**
   * Only this holder can remove its lock while it lives, so no check is
   * needed first. An announcement seen is removed with it: its waiters are
   * woken by the release itself. (Both at once, as the hand-over is what
   * other processes wait for; an announcement made in between and removed
   * with it costs its waiter at most one FALLBACK_MS.)
   */
  async release(): Promise<void> {
    this.#held = false
    const removeWant = this.#sawWant ? unlink(this.#want).catch(() => {}) : undefined
    this.#sawWant = false
    await Promise.all([removeWant, unlink(this.path)])
  }

  /**
   * Whether another process (or LockFile) is waiting for the lock: nothing
   * to do when the directory is watched, one stat otherwise.
   */
  async wanted(): Promise<boolean> {
    if (this.#announcements) return this.#sawWant
    this.#sawWant = await access(this.#want).then(() => true, () => false)
    return this.#sawWant
  }

  /** What wanted() would say now, as far as is known without looking (false without a watch). */
  get wantedNow(): boolean {
    return this.#announcements ? this.#sawWant : false
  }

  /**
   * The lock was just taken: an announcement made before is looked for once
   * (it is not made again while it exists), later ones arrive as events.
   */
  #taken(): void {
    this.#held = true
    this.#sawWant = false
    if (this.#announcements === undefined) {
      try {
        this.#announcements = watch(dirname(this.path), { persistent: false }, (_event, name) => {
          // Its removal is reported too, and spurious wakes only cost a release.
          if (name === basename(this.#want) && this.#held) {
            this.#sawWant = true
            this.#onWanted()
          }
        })
        this.#announcements.on('error', () => {
          this.#announcements?.close()
          this.#announcements = null
        })
      } catch {
        // Without a watch, wanted() looks at the file each time.
        this.#announcements = null
      }
    }
    if (this.#announcements) {
      void access(this.#want).then(() => {
        if (this.#held && !this.#sawWant) {
          this.#sawWant = true
          this.#onWanted()
        }
      }, () => {})
    }
  }

  /** Removes the private file; the lock must not be held. */
  async dispose(): Promise<void> {
    this.#announcements?.close()
    this.#announcements = undefined
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

/**
 * Watches the lock at `path` for its release (its link count drops, or it is
 * replaced); undefined when there is no lock there any more. Spurious wakes
 * only cost an attempt.
 */
function watchRelease(path: string): { wait(ms: number): Promise<boolean>; close(): void } | undefined {
  let fired = false
  let wake: (() => void) | undefined
  const fire = (): void => {
    fired = true
    wake?.()
  }
  let watcher: FSWatcher | undefined
  try {
    watcher = watch(path, { persistent: true }, fire)
    watcher.on('error', fire)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    // No watch (out of inotify watches, or none on this file system): poll.
  }
  const every = watcher === undefined ? POLL_MS : Infinity
  return {
    wait: (ms) => new Promise((resolve) => {
      if (fired) return resolve(true)
      const timer = setTimeout(() => resolve(false), Math.min(ms, every))
      wake = () => {
        clearTimeout(timer)
        resolve(true)
      }
    }),
    close: () => watcher?.close(),
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
