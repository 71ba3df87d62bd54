/**
 * What `state transform` and `state bootstrap` print: their progress on
 * stderr (the restore's bytes, the replay's events, the entries written at
 * most once a second), and the result as one JSON line on stdout.
 */
import type { TransformProgress, TransformResult } from '../transform/index.js'
import { json, positionsText, writeLine, type CliIO } from './context.js'
import { progressReporter, type ProgressReporter } from './progress.js'

/** Minimum time between two lines about the entries written. */
const WRITE_LINE_MS = 1000

export interface TransformReporter {
  onProgress(progress: TransformProgress): void
  stop(): void
}

export async function transformReporter(io: CliIO): Promise<TransformReporter> {
  const restore = await progressReporter(io, 'restore', 'bytes')
  const replay = await progressReporter(io, 'replay', 'events')
  const used = new Set<ProgressReporter>()
  let lastWrite = -Infinity
  let pending: string | undefined
  const flush = (): void => {
    if (pending !== undefined) io.stderr.write(pending)
    pending = undefined
  }
  return {
    onProgress(p) {
      switch (p.phase) {
        case 'claimed':
          io.stderr.write(`claimed ${p.job}/${p.partition} (epoch ${p.epoch})\n`)
          return
        case 'restore':
          used.add(restore)
          restore.update(p.bytesDownloaded, p.bytesTotal)
          return
        case 'replay':
          used.add(replay)
          replay.update(p.done, p.total)
          return
        case 'transform': {
          pending = `transform: ${p.read} read, ${p.written} written\n`
          const now = performance.now()
          if (now - lastWrite >= WRITE_LINE_MS) {
            lastWrite = now
            flush()
          }
          return
        }
        case 'snapshot':
          for (const r of used) r.stop()
          used.clear()
          flush()
          io.stderr.write(`snapshot ${p.id} committed\n`)
      }
    },
    stop() {
      for (const r of used) r.stop()
      flush()
    },
  }
}

/** The result: a line for people on stderr, the JSON line on stdout. */
export async function printResult(io: CliIO, result: TransformResult): Promise<void> {
  io.stderr.write(`${result.job}/${result.partition}: snapshot ${result.snapshot.id} (epoch ${result.snapshot.epoch}) at ${positionsText(result.positions)}; ${result.read} read, ${result.written} written\n`)
  await writeLine(io, json(result, 'line'))
}
