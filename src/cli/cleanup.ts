/**
 * What a command leaves behind if it is stopped: nothing. A temporary
 * directory (a restored copy of a state, as large as the state) is removed
 * when its command ends, by any path: success, an error, a closed stdout
 * (finally blocks), or SIGINT, SIGTERM and SIGHUP, which would otherwise end
 * the process without running them. On such a signal the registered
 * cleanups run synchronously and the signal is raised again with its default
 * action, so the shell still sees the command killed by it (exit 130 for
 * Ctrl-C). The handlers are installed only while something is registered:
 * `tidemark replay` keeps its own handling (an interrupted replay resumes).
 */
import { randomBytes } from 'node:crypto'
import { mkdir, rm } from 'node:fs/promises'
import { rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const

const cleanups = new Set<() => void>()

function onSignal(signal: NodeJS.Signals): void {
  for (const cleanup of cleanups) {
    try {
      cleanup()
    } catch {
      // The next cleanup still runs: the process is going away.
    }
  }
  cleanups.clear()
  for (const s of SIGNALS) process.off(s, onSignal)
  process.kill(process.pid, signal)
}

/**
 * Runs `cleanup` (synchronous: the process ends right after it) if the
 * process gets SIGINT, SIGTERM or SIGHUP before the returned function is
 * called.
 */
export function onInterrupt(cleanup: () => void): () => void {
  if (cleanups.size === 0) for (const s of SIGNALS) process.on(s, onSignal)
  cleanups.add(cleanup)
  return () => {
    if (!cleanups.delete(cleanup) || cleanups.size > 0) return
    for (const s of SIGNALS) process.off(s, onSignal)
  }
}

/** Removes a directory tree now; retried, since a store being written may still add a file while it goes. */
export function removeNow(dir: string): void {
  rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 10 })
}

/**
 * A fresh directory under os.tmpdir() for the duration of fn, removed
 * afterwards however fn ends. Its name is chosen and registered before the
 * directory is made (not mkdtemp), so that a signal arriving while it is
 * being made still removes it.
 */
export async function withTempDir<T>(prefix: string, fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = join(tmpdir(), `${prefix}${randomBytes(6).toString('hex')}`)
  const release = onInterrupt(() => removeNow(dir))
  try {
    // Not recursive: an existing directory of that name is not ours to use or remove.
    await mkdir(dir, { mode: 0o700 })
  } catch (err) {
    release()
    throw err
  }
  try {
    return await fn(dir)
  } finally {
    await rm(dir, { recursive: true, force: true, maxRetries: 5 })
    release()
  }
}
