// What only a process shows: a dump into a pipe whose reader goes away, and
// a dump stopped by a signal. Each runs the bin with TMPDIR pointed at a
// fresh directory, which must be empty again when the process has ended.
import { spawn, type ChildProcessByStdio } from 'node:child_process'
import { once } from 'node:events'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { tempDir } from '../helpers/tmp.js'
import { largeFixture } from './helpers.js'

const MAIN = join(import.meta.dirname, '../../src/cli/main.ts')

interface Dump {
  child: ChildProcessByStdio<null, Readable, Readable>
  stderr: () => string
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

/** `tidemark state dump` of `source` as a child process whose temporary directories go to `tmp`. */
function dump(tmp: string, ...args: string[]): Dump {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, 'state', 'dump', ...args], { env: { ...process.env, TMPDIR: tmp }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (t: string) => (stderr += t))
  const exit = once(child, 'exit').then(([code, signal]) => ({ code: code as number | null, signal: signal as NodeJS.Signals | null }))
  return { child, stderr: () => stderr, exit }
}

/** The command's temporary directories in `tmp` (tsx keeps its cache there too). */
function leftIn(tmp: string): string[] {
  return readdirSync(tmp).filter((name) => name.startsWith('tidemark-'))
}

/**
 * Resolves with the first complete line of the child's stdout and pauses the
 * stream (open: a for-await loop would destroy it on return).
 */
function firstLine(stdout: Readable): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = ''
    const onData = (chunk: Buffer): void => {
      text += chunk.toString('utf8')
      const end = text.indexOf('\n')
      if (end < 0) return
      stdout.pause()
      stdout.off('data', onData)
      stdout.off('end', onEnd)
      resolve(text.slice(0, end))
    }
    const onEnd = (): void => reject(new Error(`stdout ended before a first line: ${JSON.stringify(text)}`))
    stdout.on('data', onData)
    stdout.once('end', onEnd)
  })
}

describe('state dump in a pipeline', () => {
  // Both sources: a store directory is read from a copy (tidemark-read-*), a
  // snapshot is restored (tidemark-state-*).
  for (const source of ['store directory', 'snapshot'] as const) {
    it(`a reader that goes away after one line (| head -1) ends the dump of a ${source} quietly with exit 0, leaving no temporary directory`, async () => {
      const { store, url } = await largeFixture()
      const tmp = tempDir()
      const run = dump(tmp, ...(source === 'snapshot' ? [url, '--job', 'j', '--partition', '0'] : [store]))
      expect(JSON.parse(await firstLine(run.child.stdout))).toMatchObject({ state: 'counts' })
      // Closes the pipe's read end, as head does when it has its line.
      run.child.stdout.destroy()
      expect(await run.exit).toEqual({ code: 0, signal: null })
      expect(run.stderr()).not.toMatch(/EPIPE|Error|tidemark:/)
      expect(leftIn(tmp)).toEqual([])
    })

    // Ctrl-C for one, a service manager's stop for the other.
    const signal = source === 'snapshot' ? 'SIGTERM' : 'SIGINT'
    it(`${signal} during the dump of a ${source} removes its temporary directory and ends the process by the signal`, async () => {
      const { store, url } = await largeFixture()
      const tmp = tempDir()
      const run = dump(tmp, ...(source === 'snapshot' ? [url, '--job', 'j', '--partition', '0'] : [store]))
      // A first line: the copy or restore is in the temporary directory and
      // open. The paused stdout then holds the dump in the middle, on a full pipe.
      await firstLine(run.child.stdout)
      expect(leftIn(tmp)).toHaveLength(1)
      run.child.kill(signal)
      expect(await run.exit).toEqual({ code: null, signal })
      expect(leftIn(tmp)).toEqual([])
    })
  }
})
