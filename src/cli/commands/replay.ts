/**
 * `tidemark replay`: runs a replay job from the command line, with progress
 * on stderr (one line at most every second when stderr is no terminal, one
 * line rewritten in place when it is) and the result on stdout. Exit codes
 * as every tidemark command: 0 done, 1 failed (a TidemarkError, printed as
 * `tidemark: CODE: message`), 2 a usage mistake (printed with the usage).
 * Killed or interrupted, the same command line resumes the replay. A
 * SIGINT or SIGTERM once the result is printed changes nothing (exit 0).
 */
import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'
import { openLogForReading } from '../../log/existing.js'
import { isTidemarkError, TidemarkError } from '../../errors.js'
import { openSnapshotStore } from '../../snapshot-store/open.js'
import type { SnapshotStore } from '../../snapshot-store/snapshot-store.js'
import { logKinds } from '../../log/kinds.js'
import type { RevisionedLog } from '../../log/revisioned-log.js'
import { fileLogSink } from '../../outputs/file-log-sink.js'
import { sinkKinds } from '../../outputs/sink-kinds.js'
import type { OutputSink } from '../../outputs/types.js'
import type { Codec } from '../../store/codec.js'
import type { StateDefinition } from '../../store/state.js'
import type { Registry } from '../../util/index.js'
import type { ReplayHandler, ReplayProgress, ReplayStart } from '../../replay/options.js'
import { replayJob, type ReplayResult } from '../../replay/replay-job.js'
import { SNAPSHOT_ID, SnapshotLayout } from '../../snapshot/layout.js'
import { storeUrlOf, type Command } from '../context.js'

export const REPLAY_USAGE = `usage:
  tidemark replay --job NEW_JOB --handler MODULE --path DIR --snapshots URL
                  (--log DIR | --brokers HOST:PORT[,...]) --topic T --partition P --to OFFSET
                  [--from OFFSET] [--start empty | --start-snapshot ID --start-job JOB | --start-offset N [--start-job JOB]]
                  [--start-snapshots URL] [--output DIR | --output-brokers HOST:PORT[,...]]
                  [--batch-size N] [--checkpoint-ms MS] [--json]

  Runs the handler of MODULE over offsets [from, to] of the source partition, from
  empty state (default), a snapshot of another job, or the state as of an offset,
  into the new job NEW_JOB: its snapshots go to URL under NEW_JOB, its outputs to
  --output. Killed or interrupted, the same command resumes where it stopped.

  --handler MODULE      a JavaScript module exporting { states, handler } (named or
                        as its default export) and optionally codec; handler(tx, event, ctx)
                        may call ctx.emit({ topic, key, value }) when --output is given
  --path DIR            the replay's local partition store
  --snapshots URL       the replay's snapshot store (a directory, relative paths from the working
                        directory, file:///abs/path or s3://bucket/prefix?endpoint=...)
  --log / --brokers     the source: an embedded file log (a directory, relative paths from the
                        working directory, or a file:/// URL), or Kafka (--topic's partition --partition)
  --start-snapshot ID   start from this snapshot of --start-job (in --start-snapshots, default --snapshots)
  --start-offset N      start from the state as of offset N (--start-job's newest snapshot at or
                        before N, else empty, then the events up to N without their outputs)
  --output DIR          deliver emitted records to file logs DIR/<topic> (a path or a file:/// URL)
  --output-no-fsync     do not fsync the --output file logs per delivery (faster; a machine
                        crash may lose records the replay had already delivered)
  --output-brokers      deliver emitted records to Kafka
  --batch-size N        events per commit (default 10000)
  --checkpoint-ms MS    snapshot the progress this often (default 60000; 0: only at the end)
  --json                print the result as JSON`

const OPTIONS = {
  job: { type: 'string' }, handler: { type: 'string' }, path: { type: 'string' }, snapshots: { type: 'string' },
  log: { type: 'string' }, brokers: { type: 'string' }, topic: { type: 'string' }, partition: { type: 'string' },
  from: { type: 'string' }, to: { type: 'string' },
  start: { type: 'string' }, 'start-snapshot': { type: 'string' }, 'start-offset': { type: 'string' }, 'start-job': { type: 'string' }, 'start-snapshots': { type: 'string' },
  output: { type: 'string' }, 'output-brokers': { type: 'string' }, 'output-no-fsync': { type: 'boolean' },
  'batch-size': { type: 'string' }, 'checkpoint-ms': { type: 'string' },
  json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
} as const

export interface ReplayCommandIO {
  stdout: { write(text: string): unknown }
  stderr: { write(text: string): unknown; isTTY?: boolean }
  /** Whether stderr is a terminal (progress rewritten in place); else stderr.isTTY decides. */
  isTTY?: boolean
}

/** A mistake in the command line: exit 2 with the usage. */
class UsageError extends Error {}

/** Runs `tidemark replay` with the arguments after `replay`; returns the exit code and never throws. */
export async function runReplayCommand(argv: string[], io: ReplayCommandIO): Promise<number> {
  const closers: Array<() => Promise<unknown>> = []
  const controller = new AbortController()
  const interrupt = (): void => controller.abort(new Error('interrupted'))
  try {
    const parsed = parseCommandLine(argv)
    if (parsed === 'help') {
      io.stdout.write(`${REPLAY_USAGE}\n`)
      return 0
    }
    const operator = await loadOperator(parsed.handler)
    const snapshots = await openStore(parsed.snapshots, '--snapshots')
    closers.push(() => snapshots.close())
    let startStore: SnapshotStore | undefined
    if (parsed.startSnapshots !== undefined) {
      const opened = await openStore(parsed.startSnapshots, '--start-snapshots')
      closers.push(() => opened.close())
      startStore = opened
    }
    const log = await openSource(parsed)
    closers.push(() => log.close())
    const output = await openOutput(parsed)
    if (output !== undefined) closers.push(() => output.close())

    const start: ReplayStart = parsed.start.kind === 'empty'
      ? 'empty'
      : parsed.start.kind === 'snapshot'
        ? { snapshot: parsed.start.snapshot, job: parsed.start.job, ...(startStore === undefined ? {} : { store: startStore }) }
        : { offset: parsed.start.offset, ...(parsed.start.job === undefined ? {} : { job: parsed.start.job }), ...(startStore === undefined ? {} : { store: startStore }) }
    const progress = progressPrinter(io)
    process.once('SIGINT', interrupt)
    process.once('SIGTERM', interrupt)
    let result: ReplayResult
    try {
      result = await replayJob({
        job: parsed.job,
        source: { log, topic: parsed.topic, partition: parsed.partition, to: parsed.to, ...(parsed.from === undefined ? {} : { from: parsed.from }), ...(operator.codec === undefined ? {} : { codec: operator.codec }) },
        start,
        handler: operator.handler,
        states: operator.states,
        ...(output === undefined ? {} : { output }),
        path: parsed.path,
        snapshots,
        fingerprint: operator.fingerprint,
        ...(parsed.batchSize === undefined ? {} : { batchSize: parsed.batchSize }),
        ...(parsed.checkpointMs === undefined ? {} : { checkpoints: { intervalMs: parsed.checkpointMs } }),
        onProgress: progress.report,
        signal: controller.signal,
      })
    } finally {
      progress.end()
    }
    io.stdout.write(parsed.json ? `${JSON.stringify(result, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n` : describeResult(result))
    return 0
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(argv.length === 0 ? `${REPLAY_USAGE}\n` : `tidemark replay: ${err.message}\n${REPLAY_USAGE}\n`)
      return 2
    }
    if (controller.signal.aborted) {
      io.stderr.write('tidemark replay: interrupted; the same command resumes the replay\n')
      return 1
    }
    io.stderr.write(`tidemark replay: ${isTidemarkError(err) ? `${err.code}: ${err.message}` : err instanceof Error ? err.message : String(err)}\n`)
    return 1
  } finally {
    for (const close of closers.reverse()) await close().catch(() => undefined)
    // Removed a turn of the event loop later: a signal that finds no
    // listener ends the process by the signal, without its exit code, and
    // the bin exits within this turn (process.exit, src/cli/main.ts), so
    // its listeners last until the end. Unref'd: it keeps no process alive.
    setImmediate(() => {
      process.off('SIGINT', interrupt)
      process.off('SIGTERM', interrupt)
    }).unref()
  }
}

interface CommandLine {
  job: string
  handler: string
  path: string
  snapshots: string
  startSnapshots: string | undefined
  source: { kind: 'file'; dir: string } | { kind: 'kafka'; brokers: string[] }
  topic: string
  partition: number
  from: bigint | undefined
  to: bigint
  start: { kind: 'empty' } | { kind: 'snapshot'; snapshot: string; job: string } | { kind: 'offset'; offset: bigint; job: string | undefined }
  output: { kind: 'file'; dir: string; fsync: boolean } | { kind: 'kafka'; brokers: string[] } | undefined
  batchSize: number | undefined
  checkpointMs: number | undefined
  json: boolean
}

function parseCommandLine(argv: string[]): CommandLine | 'help' {
  let parsed
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, strict: true, options: OPTIONS })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS_')) throw new UsageError((err as Error).message, { cause: err })
    throw err
  }
  const v = parsed.values
  if (v.help === true) return 'help'
  if (parsed.positionals.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(parsed.positionals[0])}`)
  if ((v.log === undefined) === (v.brokers === undefined)) throw new UsageError('give the source as either --log DIR or --brokers HOST:PORT')
  if (v.output !== undefined && v['output-brokers'] !== undefined) throw new UsageError('give the output as either --output DIR or --output-brokers HOST:PORT, not both')
  const starts = [v.start !== undefined, v['start-snapshot'] !== undefined, v['start-offset'] !== undefined].filter(Boolean).length
  if (starts > 1) throw new UsageError('give at most one of --start empty, --start-snapshot and --start-offset')
  if (v.start !== undefined && v.start !== 'empty') throw new UsageError(`--start takes only 'empty' (use --start-snapshot or --start-offset), got ${JSON.stringify(v.start)}`)
  let start: CommandLine['start'] = { kind: 'empty' }
  if (v['start-snapshot'] !== undefined) start = { kind: 'snapshot', snapshot: snapshotIdArg(v['start-snapshot'], '--start-snapshot'), job: jobArg(need(v['start-job'], '--start-job (the job whose snapshot --start-snapshot names)'), '--start-job') }
  else if (v['start-offset'] !== undefined) start = { kind: 'offset', offset: offsetArg(v['start-offset'], '--start-offset'), job: v['start-job'] === undefined ? undefined : jobArg(v['start-job'], '--start-job') }
  else if (v['start-job'] !== undefined) throw new UsageError('--start-job goes with --start-snapshot or --start-offset')
  if (v['output-no-fsync'] === true && v.output === undefined) throw new UsageError('--output-no-fsync goes with --output')
  if (v['start-snapshots'] !== undefined && start.kind === 'empty') throw new UsageError('--start-snapshots goes with --start-snapshot or --start-offset')
  const to = offsetArg(need(v.to, '--to'), '--to')
  const from = v.from === undefined ? undefined : offsetArg(v.from, '--from')
  if (from !== undefined && from > to) throw new UsageError(`--from (${from}) must not be after --to (${to})`)
  if (start.kind === 'offset' && start.offset >= to) throw new UsageError(`--start-offset (${start.offset}) must be before --to (${to})`)
  if (start.kind === 'offset' && from !== undefined && from !== start.offset + 1n) throw new UsageError(`--from must be --start-offset + 1 (${start.offset + 1n}), or left out`)
  return {
    job: jobArg(need(v.job, '--job'), '--job'),
    handler: need(v.handler, '--handler'),
    path: resolve(need(v.path, '--path')),
    snapshots: storeUrlOf(need(v.snapshots, '--snapshots')),
    startSnapshots: v['start-snapshots'] === undefined ? undefined : storeUrlOf(need(v['start-snapshots'], '--start-snapshots')),
    source: v.log !== undefined ? { kind: 'file', dir: fileUrl(v.log, '--log') } : { kind: 'kafka', brokers: brokerList(v.brokers!, '--brokers') },
    topic: need(v.topic, '--topic'),
    partition: intArg(need(v.partition, '--partition'), '--partition', 0),
    from,
    to,
    start,
    output: v.output !== undefined ? { kind: 'file', dir: fileUrl(v.output, '--output'), fsync: v['output-no-fsync'] !== true } : v['output-brokers'] !== undefined ? { kind: 'kafka', brokers: brokerList(v['output-brokers'], '--output-brokers') } : undefined,
    batchSize: v['batch-size'] === undefined ? undefined : intArg(v['batch-size'], '--batch-size', 1),
    checkpointMs: v['checkpoint-ms'] === undefined ? undefined : intArg(v['checkpoint-ms'], '--checkpoint-ms', 0),
    json: v.json === true,
  }
}

interface Operator {
  states: readonly StateDefinition[]
  handler: ReplayHandler<unknown>
  codec: Codec<unknown> | undefined
  /** sha256 of the module's file: a resume with an edited handler is refused (TIDEMARK_REPLAY_JOB_EXISTS). */
  fingerprint: string
}

async function loadOperator(path: string): Promise<Operator> {
  const file = resolve(path)
  let bytes: Buffer
  try {
    bytes = await readFile(file)
  } catch (err) {
    throw new UsageError(`--handler ${path}: ${(err as Error).message}`, { cause: err })
  }
  const mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>
  const exported = (mod.handler === undefined && mod.default !== null && typeof mod.default === 'object' ? mod.default : mod) as Record<string, unknown>
  if (typeof exported.handler !== 'function') throw new UsageError(`--handler ${path} must export handler(tx, event, ctx) (named, or in its default export)`)
  if (!Array.isArray(exported.states)) throw new UsageError(`--handler ${path} must export states: the state definitions its handler uses`)
  if (exported.codec !== undefined && (exported.codec === null || typeof (exported.codec as Codec<unknown>).decode !== 'function')) throw new UsageError(`--handler ${path}: codec must be a Codec with decode(bytes)`)
  return {
    states: exported.states as StateDefinition[],
    handler: exported.handler as ReplayHandler<unknown>,
    codec: exported.codec as Codec<unknown> | undefined,
    fingerprint: `sha256:${createHash('sha256').update(bytes).digest('hex')}`,
  }
}

async function openStore(url: string, name: string): Promise<SnapshotStore> {
  try {
    return await openSnapshotStore(url, { mustExist: true })
  } catch (err) {
    // Only the URL itself is refused with these: a command-line mistake.
    if (err instanceof TypeError || err instanceof RangeError) throw new UsageError(`${name}: ${err.message}`, { cause: err })
    throw err
  }
}

async function openSource(c: CommandLine): Promise<RevisionedLog> {
  // As `tidemark log` reads one: a missing log is TIDEMARK_LOG_NOT_FOUND, not an empty or unavailable one.
  if (c.source.kind === 'file') return openLogForReading(c.source.dir)
  const openLog = await kafka(logKinds)
  if (openLog === undefined) throw new Error('--brokers needs the Kafka log of tidemark/kafka, which this build lacks')
  return openLog({ brokers: c.source.brokers, topic: c.topic, partition: c.partition })
}

async function openOutput(c: CommandLine): Promise<OutputSink | undefined> {
  if (c.output === undefined) return undefined
  if (c.output.kind === 'file') return fileLogSink({ dir: c.output.dir, fileLog: { sync: c.output.fsync } })
  const sink = await kafka(sinkKinds)
  if (sink === undefined) throw new Error('--output-brokers needs kafkaSink from tidemark/kafka, which this build lacks')
  return sink({ brokers: c.output.brokers })
}

/**
 * Kafka is loaded only for a command line that names brokers: the Kafka
 * connector registers its log and sink kinds when its entry point is
 * imported, and is imported here, by its package name, if nothing did yet.
 */
async function kafka<T>(registry: Registry<T>): Promise<T | undefined> {
  try {
    return await registry.load('kafka', 'tidemark/kafka')
  } catch (err) {
    // kafkajs is an optional peer dependency: tidemark/kafka says so
    // (connectors/kafka/kafkajs.ts); this names the options that need it.
    if (!isTidemarkError(err, 'TIDEMARK_KAFKA_CLIENT_MISSING')) throw err
    throw new TidemarkError('TIDEMARK_KAFKA_CLIENT_MISSING', 'Kafka sources and outputs (--brokers, --output-brokers) need kafkajs, an optional peer dependency of tidemark that is not installed: npm install kafkajs', { cause: err, details: { package: 'kafkajs' } })
  }
}

function progressPrinter(io: ReplayCommandIO): { report: (p: ReplayProgress) => void; end: () => void } {
  const tty = io.isTTY ?? io.stderr.isTTY === true
  let last = -Infinity
  let open = false
  const line = (text: string, overwrite: boolean): void => {
    if (tty && overwrite) {
      io.stderr.write(`\r\x1b[2K${text}`)
      open = true
      return
    }
    io.stderr.write(`${open ? '\n' : ''}${text}\n`)
    open = false
  }
  return {
    report(p) {
      switch (p.phase) {
        case 'prepare':
          line(`replay: ${p.message}`, false)
          return
        case 'restore':
        case 'warm-up':
        case 'replay': {
          const { done, total, unit, etaMs, final } = p.progress
          // A restore that downloads nothing (the local store was used) is no news.
          if (total === 0 && done === 0) return
          const now = performance.now()
          // Plain lines at most once a second (a log file is no screen); the last one always.
          if (!tty && !final && now - last < 1000) return
          last = now
          const pct = total > 0 ? ` (${Math.floor((100 * done) / total)}%)` : ''
          const eta = final || etaMs === undefined ? '' : `, eta ${Math.ceil(etaMs / 1000)} s`
          line(`replay: ${p.phase} ${done}/${total} ${unit}${pct}${eta}`, !final)
          return
        }
        case 'commit':
          return
        case 'deliver':
          line('replay: delivering the outputs', false)
          return
        case 'snapshot':
          if (p.final) line(`replay: final snapshot ${p.id}`, false)
          return
      }
    },
    end() {
      if (open) io.stderr.write('\n')
      open = false
    },
  }
}

function describeResult(r: ReplayResult): string {
  return [
    `job        ${r.job} (${r.source === 'new' ? 'new' : `resumed from its ${r.source === 'local' ? 'local store' : 'snapshot'}`})`,
    `source     ${r.topic}/${r.partition} offsets ${r.from}..${r.to}${r.startSnapshot === undefined ? '' : `, started from snapshot ${r.startSnapshot.id} of job ${r.startSnapshot.job}`}`,
    `events     ${r.events} applied by this run${r.warmedUp > 0 ? `, ${r.warmedUp} before the range (outputs discarded)` : ''}`,
    `snapshot   ${r.snapshot.id}`,
    `digest     ${r.digest}`,
  ].join('\n') + '\n'
}

function need(value: string | undefined, name: string): string {
  if (value === undefined) throw new UsageError(`missing ${name}`)
  if (value === '') throw new UsageError(`${name} must not be empty`)
  return value
}

function intArg(value: string, name: string, min: number): number {
  const n = Number(value)
  if (value.trim() === '' || !Number.isSafeInteger(n) || n < min) throw new UsageError(`${name} must be an integer of at least ${min}, got ${JSON.stringify(value)}`)
  return n
}

function offsetArg(value: string, name: string): bigint {
  if (!/^\d{1,19}$/.test(value)) throw new UsageError(`${name} must be an offset (a non-negative integer), got ${JSON.stringify(value)}`)
  return BigInt(value)
}

/** A job name as the snapshot layout takes it (one key segment). */
function jobArg(value: string, name: string): string {
  try {
    return new SnapshotLayout(value, 0).job
  } catch (err) {
    throw new UsageError(`${name}: ${(err as Error).message}`, { cause: err })
  }
}

function snapshotIdArg(value: string, name: string): string {
  if (!SNAPSHOT_ID.test(value)) throw new UsageError(`${name} must be a snapshot id like 0000000001-000000000042, got ${JSON.stringify(value)}`)
  return value
}

/** A directory: a path (relative to the working directory) or a file:/// URL. */
function fileUrl(value: string, name: string): string {
  if (value === '') throw new UsageError(`${name} must not be empty`)
  // A scheme (two or more letters and a colon): a URL, which must be a file: one.
  if (!/^[a-z][a-z0-9+.-]+:/i.test(value)) return resolve(value)
  if (!value.startsWith('file://')) throw new UsageError(`${name} must be a directory or a file:///absolute/path URL, got ${JSON.stringify(value)}`)
  try {
    return fileURLToPath(value)
  } catch (err) {
    throw new UsageError(`${name}: ${(err as Error).message}`, { cause: err })
  }
}

function brokerList(value: string, name: string): string[] {
  const list = value.split(',').map((b) => b.trim()).filter((b) => b !== '')
  if (list.length === 0 || list.some((b) => !/^[^:\s]+:\d+$/.test(b))) throw new UsageError(`${name} must be HOST:PORT[,HOST:PORT...], got ${JSON.stringify(value)}`)
  return list
}

/**
 * `tidemark replay`: its module parses its own options and reports its own
 * usage mistakes (exit 2) and failures (exit 1). The command registry loads
 * this module only when the command runs, so the other commands never load
 * the replay and outputs code.
 */
export const replay: Command = {
  name: 'replay',
  usage: REPLAY_USAGE,
  run: (argv, io) => runReplayCommand(argv, io),
}
