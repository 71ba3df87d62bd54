/**
 * Progress on stderr: a bar (cli-progress) when stderr is a terminal, plain
 * lines otherwise (a log file or a CI job gets one line a second, not a
 * screen of carriage returns).
 */
import type { CliIO } from './context.js'

export interface ProgressReporter {
  update(done: number, total: number): void
  /** A line of its own (a skipped snapshot), above the bar on a terminal. */
  note(text: string): void
  /** Ends the bar; the last update is printed as a line when not on a terminal. */
  stop(): void
}

/** Minimum time between two plain progress lines. */
const LINE_INTERVAL_MS = 1000

export async function progressReporter(io: CliIO, label: string, unit: 'bytes' | 'events' | 'files' | 'values'): Promise<ProgressReporter> {
  if (io.stderr.isTTY === true) return barReporter(io, label, unit)
  let last = -Infinity
  let printed: string | undefined
  let pending: string | undefined
  const line = (done: number, total: number) => `${label}: ${done}/${total} ${unit}\n`
  return {
    update(done, total) {
      const text = line(done, total)
      const now = performance.now()
      if (text === printed) return
      if (now - last < LINE_INTERVAL_MS && done < total) {
        pending = text
        return
      }
      last = now
      pending = undefined
      printed = text
      io.stderr.write(text)
    },
    note(text) {
      io.stderr.write(`${text}\n`)
    },
    stop() {
      if (pending !== undefined) io.stderr.write(pending)
      pending = undefined
    },
  }
}

async function barReporter(io: CliIO, label: string, unit: string): Promise<ProgressReporter> {
  // Loaded only for a terminal: scripts and pipes never pay for it.
  const { SingleBar, Presets } = await import('cli-progress')
  const bar = new SingleBar({
    format: `${label} [{bar}] {percentage}% | {value}/{total} ${unit} | eta {eta_formatted}`,
    stream: io.stderr as NodeJS.WritableStream,
    hideCursor: true,
    clearOnComplete: false,
  }, Presets.shades_classic)
  let started = false
  return {
    update(done, total) {
      if (!started) {
        bar.start(total, done)
        started = true
      } else {
        bar.setTotal(total)
        bar.update(done)
      }
    },
    note(text) {
      if (started) bar.stop()
      io.stderr.write(`${text}\n`)
      started = false
    },
    stop() {
      if (started) bar.stop()
      started = false
    },
  }
}
