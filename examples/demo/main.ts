/**
 * `npm start`: the Tidemark demo, on embedded defaults (file log, file-system
 * snapshots, no services). With `--kafka host:port --s3 s3://bucket?endpoint=…`
 * the same runs against Kafka and MinIO from docker-compose.yml.
 *
 * A worker process keeps a running total per key over a generated event
 * stream and snapshots incrementally; the demo kills it with SIGKILL at a
 * random moment, starts a new owner in a fresh directory (as after a
 * partition rebalance) that takes over the partition's claim by force (the
 * demo saw the first owner die) and restores the newest snapshot and replays the log,
 * and checks the final state against a recomputation that shares no code
 * with the processor.
 *
 * Ctrl-C (SIGINT) or SIGTERM stops it where it is: the running worker is
 * killed, the working directory removed (unless --keep), and the demo says
 * it was interrupted and exits with 128 + the signal's number (130 for Ctrl-C).
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { constants, tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { parseArgs } from 'node:util'
import { PartitionStore } from '../../src/index.js'
import { demoEvent, KEYS } from './events.js'
import { JOB, TOPIC, totals } from './job.js'
import { ensureBucket, openSource, type DemoTarget } from './source.js'

const USAGE = `usage: npm start -- [--events N] [--keep] [--kafka BROKERS] [--s3 URL]
  --events N       events to generate, at least 10000 (default 200000)
  --keep           keep the working directory (printed at the start; else removed at the end or on Ctrl-C)
  --kafka BROKERS  Kafka bootstrap brokers (host:port,...) instead of the embedded file log
  --s3 URL         an s3:// snapshot store URL instead of the file-system store
  -h, --help       this text`

/** A bad command line: one line on stderr and exit 2, not a stack trace. */
class UsageError extends Error {}

interface DemoOptions { events: number; keep: boolean; kafka?: string; s3?: string }

function parseOptions(argv: string[]): DemoOptions | 'help' {
  let values
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        events: { type: 'string', default: '200000' },
        kafka: { type: 'string' },
        s3: { type: 'string' },
        keep: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h' },
      },
    }))
  } catch (err) {
    // Unknown options, missing values, stray arguments: parseArgs's own wording names them.
    throw new UsageError((err as Error).message, { cause: err })
  }
  if (values.help === true) return 'help'
  const events = Number(values.events)
  if (values.events.trim() === '' || !Number.isSafeInteger(events) || events < 10_000) {
    throw new UsageError(`--events must be an integer of at least 10000, got ${JSON.stringify(values.events)}`)
  }
  if (values.kafka !== undefined && values.kafka.trim() === '') throw new UsageError('--kafka must name at least one broker (host:port)')
  if (values.s3 !== undefined && !(URL.canParse(values.s3) && new URL(values.s3).protocol === 's3:')) {
    throw new UsageError(`--s3 must be an s3:// URL, got ${JSON.stringify(values.s3)}`)
  }
  return {
    events,
    keep: values.keep,
    ...(values.kafka === undefined ? {} : { kafka: values.kafka }),
    ...(values.s3 === undefined ? {} : { s3: values.s3 }),
  }
}

// process.exit is safe here: nothing is open yet, and writes to a pipe, a
// file or a terminal on Linux are synchronous, so the line is not lost.
let options: DemoOptions | 'help'
try {
  options = parseOptions(process.argv.slice(2))
} catch (err) {
  if (!(err instanceof UsageError)) throw err
  process.stderr.write(`demo: ${err.message} (--help for the options)\n`)
  process.exit(2)
}
if (options === 'help') {
  process.stdout.write(`${USAGE}\n`)
  process.exit(0)
}
const total = options.events
const dir = mkdtempSync(join(tmpdir(), 'tidemark-demo-'))
const target: DemoTarget = {
  dir,
  topic: `tidemark-demo-${randomBytes(4).toString('hex')}`,
  snapshotEvery: Math.max(2000, Math.floor(total / 10)),
  ...(options.kafka === undefined ? {} : { kafka: options.kafka }),
  ...(options.s3 === undefined ? {} : { s3: options.s3.includes('?') ? options.s3.replace('?', `/${randomBytes(4).toString('hex')}?`) : `${options.s3}/${randomBytes(4).toString('hex')}` }),
}

/** Ctrl-C or SIGTERM: the demo stops at its next step and cleans up (the `finally` below). */
class Interrupted extends Error {
  constructor(readonly signal: NodeJS.Signals) {
    super(`interrupted by ${signal}`)
  }
}
const interruption = new AbortController()
// once: a second Ctrl-C ends the process at once, as without a handler.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => interruption.abort(new Interrupted(signal)))
const checkInterrupted = (): void => interruption.signal.throwIfAborted()

/** A line the worker printed, and when the supervisor read it (ms, performance.now()). */
type Line = Record<string, unknown> & { type: string; readAt: number }

/** Runs an owner; SIGKILLs it once it has committed past killAfter (if given). */
async function runOwner(name: string, storePath: string, takeover: 'if-expired' | 'force', killAfter?: number): Promise<{ lines: Line[]; killed: boolean }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'worker.ts'), JSON.stringify(target), storePath, takeover], { stdio: ['ignore', 'pipe', 'inherit'] })
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
  // The directory goes only once the worker is gone: it writes there.
  const stop = (): void => { child.kill('SIGKILL') }
  interruption.signal.addEventListener('abort', stop, { once: true })
  const lines: Line[] = []
  for await (const text of createInterface({ input: child.stdout })) {
    const line = { ...(JSON.parse(text) as Record<string, unknown>), readAt: performance.now() } as Line
    lines.push(line)
    if (line.type === 'started') console.log(`${name}: started (${String(line.source)} state), processing the log`)
    // The kill waits for a first snapshot, so that the next owner has one to restore.
    if (killAfter !== undefined && line.type === 'commit' && (line.offset as number) >= killAfter && lines.some((l) => l.type === 'snapshot')) {
      child.kill('SIGKILL')
      break
    }
  }
  const { code, signal } = await exit
  interruption.signal.removeEventListener('abort', stop)
  checkInterrupted()
  // A Ctrl-C in a terminal reaches the worker too (one process group), maybe before this process.
  if (signal === 'SIGINT' || signal === 'SIGTERM') throw new Interrupted(signal)
  if (signal !== 'SIGKILL' && code !== 0) throw new Error(`worker exited with code ${code}, signal ${signal}`)
  return { lines, killed: signal === 'SIGKILL' }
}

const of = (lines: Line[], type: string): Line[] => lines.filter((l) => l.type === type)
const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(2)} MB`
const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`

let interrupted: Interrupted | undefined
try {
  const t0 = performance.now()
  console.log(`working directory: ${dir}${options.keep ? ' (kept: --keep)' : ''}`)
  console.log(`generating ${total} events (offsets 0 to ${total - 1}) into the ${target.kafka === undefined ? 'embedded file log' : `Kafka topic ${target.topic}`}: sales of keys user-00000 to user-${String(KEYS - 1).padStart(5, '0')}, to be summed per key`)
  await ensureBucket(target)
  checkInterrupted()
  const log = await openSource(target)
  try {
    for (let i = 0; i < total; i += 5000) {
      checkInterrupted()
      await Promise.all(Array.from({ length: Math.min(5000, total - i) }, (_, j) => log.append(Buffer.from(JSON.stringify(demoEvent(i + j))))))
    }
  } finally {
    await log.close()
  }

  const killAt = Math.floor(total * (0.3 + Math.random() * 0.5))
  const first = await runOwner('owner 1', join(dir, 'owner-1'), 'if-expired', killAt)
  const lastCommit = of(first.lines, 'commit').at(-1)?.offset as number
  const firstSnapshots = of(first.lines, 'snapshot')
  const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`
  const ranMs = of(first.lines, 'commit').at(-1)!.readAt - of(first.lines, 'started')[0]!.readAt
  console.log(`owner 1: processed and committed offsets 0 to ${lastCommit} (${lastCommit + 1} events) in ${seconds(ranMs)}, then was killed with SIGKILL (at a random offset, once its first snapshot had finished)`)
  console.log(`owner 1: ${plural(firstSnapshots.length, 'snapshot')} finished in that time, at ${firstSnapshots.length === 1 ? 'offset' : 'offsets'} ${firstSnapshots.map((s) => s.offset).join(', ')} `
    + `(a snapshot starts when ${target.snapshotEvery} events were committed since the previous one started and none is running; processing does not wait for it)`)

  // Owner 1's claim on the partition is still live (its lease runs on after
  // the SIGKILL); this supervisor saw it die, so owner 2 takes over by force.
  const second = await runOwner('owner 2', join(dir, 'owner-2'), 'force')
  const started = of(second.lines, 'started')[0]!
  console.log(`owner 2: took over the partition's claim by force from the killed owner 1, whose lease had not run out (claim epoch ${of(first.lines, 'started')[0]?.epoch} -> ${started.epoch}: owner 1 can no longer write snapshots)`)
  const caughtUp = of(second.lines, 'caught-up')[0]!
  const restoredOffset = (started.offset as number | null | undefined) ?? -1
  console.log(started.source === 'snapshot'
    ? `owner 2: restored snapshot ${started.snapshot} (the state as of offset ${restoredOffset}) into a fresh directory in ${Math.round(started.restoreMs as number)} ms, ${mb(started.bytesDownloaded as number)} downloaded`
    : `owner 2: started from ${String(started.source)} state`)
  for (const reason of started.skipped as string[]) console.log(`  skipped a snapshot: ${reason}`)
  // Owner 1's work after its last snapshot was lost with its store: done again.
  const again = Math.max(0, lastCommit - restoredOffset)
  const processed = caughtUp.events as number
  console.log(`owner 2: processed offsets ${restoredOffset + 1} to ${caughtUp.offset} (${processed} events): ${again} that owner 1 had processed after the snapshot (its store was lost with it), then ${processed - again} new ones`)

  checkInterrupted()
  // The recomputation: a plain fold of the event stream, no Tidemark code.
  const expected = new Map<string, number>()
  for (let i = 0; i < total; i++) {
    const { key, amount } = demoEvent(i)
    expected.set(key, (expected.get(key) ?? 0) + amount)
  }
  const store = await PartitionStore.open({ path: join(dir, 'owner-2'), states: [totals] })
  const actual = new Map<string, number>()
  for await (const [key, value] of store.transaction().value(totals).entries()) actual.set(key, value)
  const position = store.position(TOPIC, 0)
  await store.close()

  let mismatch: string | undefined
  if (position === undefined) mismatch = 'the store has no position'
  for (const [key, want] of expected) {
    if (mismatch) break
    if (actual.get(key) !== want) mismatch = `key ${key}: the state has ${actual.get(key)}, the recomputation ${want}`
  }
  if (!mismatch && actual.size !== expected.size) mismatch = `the state has ${actual.size} keys, the recomputation ${expected.size}`

  const secondSnapshots = of(second.lines, 'snapshot')
  const snapshots = [...firstSnapshots, ...secondSnapshots]
  const full = snapshots.filter((s) => s.full)
  const incremental = snapshots.filter((s) => !s.full)
  const sum = (xs: Line[]): number => xs.reduce((n, s) => n + (s.bytesUploaded as number), 0)
  const kinds = [
    ...(full.length > 0 ? [`${full.length} full, ${mb(sum(full))} uploaded (every table file)`] : []),
    ...(incremental.length > 0 ? [`${incremental.length} incremental, ${mb(sum(incremental))} uploaded (only the table files the snapshot before did not have)`] : []),
  ]
  console.log(`snapshots: ${snapshots.length} in all (${firstSnapshots.length} by owner 1, ${secondSnapshots.length} by owner 2): ${kinds.join('; ')}`)
  // A small, hot state is rewritten by LevelDB's compactions between two
  // snapshots, so the compaction policy often takes a full one: say why.
  const why: Record<string, string> = {
    first: 'the first of the partition',
    'nothing-shared': 'compactions had rewritten every file of the snapshots before',
    amplification: 'the old objects an incremental one would keep outweighed the state',
    'chain-length': 'an incremental one would build on too many snapshots',
  }
  const reasons = [...new Set(full.map((s) => why[s.fullReason as string] ?? String(s.fullReason)))].join('; ')
  if (full.length > 0) console.log(`  full because: ${reasons} (docs/snapshots.md, "compact points")`)
  console.log(`check: owner 2's state, ${actual.size} keys (those of the ${KEYS} that the events touched), against a sum per key of the ${total} events computed without Tidemark: ${mismatch === undefined ? 'equal' : 'different'}`)
  console.log(`time: ${((performance.now() - t0) / 1000).toFixed(1)} s in all`)
  if (options.keep) {
    // Quoted: an s3:// URL's & would end the command in a shell.
    const url = target.s3 === undefined ? `file://${join(dir, 'snapshots')}` : `'${target.s3}'`
    console.log(`kept ${dir}: job ${JOB}, topic ${TOPIC}, partition 0. Look at it with the tidemark command (in this repository: npx tsx src/cli/main.ts):`)
    console.log(`  tidemark jobs ${url}`)
    console.log(`  tidemark snapshots list ${url} --job ${JOB} --partition 0`)
    console.log(`  tidemark state dump ${join(dir, 'owner-2')} --state ${totals.name} | head`)
    if (target.kafka === undefined) console.log(`  tidemark log tail ${join(dir, 'log')} -n 3`)
  }
  if (mismatch) {
    console.log(`MISMATCH: ${mismatch}`)
    process.exitCode = 1
  } else {
    console.log('verified')
  }
} catch (err) {
  if (!(err instanceof Interrupted)) throw err
  interrupted = err
} finally {
  if (!options.keep) rmSync(dir, { recursive: true, force: true })
}
if (interrupted !== undefined) {
  process.stderr.write(`demo: interrupted by ${interrupted.signal}; ${options.keep ? `kept ${dir} (--keep)` : `removed ${dir}`}\n`)
  process.exitCode = 128 + constants.signals[interrupted.signal]
}
