// Child processes for multi-process tests: TypeScript scripts run with
// `node --import tsx`, talked to through stdin and stdout lines.
import { spawn, type ChildProcess } from 'node:child_process'
import { join } from 'node:path'
import { onTestFinished } from 'vitest'

const ROOT = join(import.meta.dirname, '..', '..')

export interface Child {
  readonly proc: ChildProcess
  /** Every stdout line so far. */
  readonly lines: string[]
  /** The first line from `from` on (an index into `lines`) that matches; rejects if the child exits first. */
  waitFor(match: (line: string) => boolean, from?: number): Promise<string>
  send(line: string): void
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  stderr(): string
}

/**
 * Starts `script` (relative to the repository root). It is killed when the
 * current test finishes, or, outside a test (in a hook), by the cleanup that
 * `register` receives.
 */
export function spawnScript(script: string, args: readonly string[] = [], register: (cleanup: () => void) => void = onTestFinished): Child {
  const proc = spawn(process.execPath, ['--import', 'tsx', join(ROOT, script), ...args], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  const lines: string[] = []
  let partial = ''
  let stderr = ''
  const listeners = new Set<() => void>()
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    proc.on('exit', (code, signal) => {
      resolve({ code, signal })
      for (const l of listeners) l()
    })
  })
  proc.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    const parts = (partial + chunk).split('\n')
    partial = parts.pop()!
    lines.push(...parts)
    for (const l of listeners) l()
  })
  proc.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  let done = false
  exited.then(() => (done = true))
  register(() => {
    if (!done) proc.kill('SIGKILL')
  })
  return {
    proc,
    lines,
    exited,
    stderr: () => stderr,
    send(line) {
      proc.stdin!.write(`${line}\n`)
    },
    waitFor(match, from = 0) {
      return new Promise((resolve, reject) => {
        const check = (): void => {
          for (let i = from; i < lines.length; i++) {
            if (match(lines[i]!)) {
              listeners.delete(check)
              resolve(lines[i]!)
              return
            }
          }
          if (done) {
            listeners.delete(check)
            reject(new Error(`${script} exited before printing the expected line; stdout:\n${lines.join('\n')}\nstderr:\n${stderr}`))
          }
        }
        listeners.add(check)
        check()
      })
    },
  }
}
