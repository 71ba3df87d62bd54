/**
 * StateSynchronizer throughput: updates per second of a shared counter with
 * updateState() (conditional) and updateStateUnconditionally(), by 1 and 4
 * writers, on the file log and on the Kafka log, next to the raw append rate
 * of the same log in the same run (what the synchronizer adds on top).
 *
 *   npm run bench -- sync [--updates 2000] [--only file|kafka] [--kafka HOST:PORT,...]
 *
 * Without --kafka (or TIDEMARK_KAFKA_BROKERS) it starts librdkafka's mock
 * cluster with scripts/services/kafka-mock.sh and stops it at the end. Each
 * writer is a client with its own log handle in this process; the 4 writers
 * race for the same counter. Consumer-group joins (about 3 s each on Kafka)
 * happen before the clock starts.
 *
 * With the file log it first measures the log's appends alone, in --rounds
 * interleaved rounds of: the raw baseline (one writer: write + fdatasync of
 * the same bytes as each record, at the end of a file, --appends times), the
 * file log with 1 writer, with 4 writers in this process (4 handles, as 4
 * synchronizer clients have), with 4 writers on one handle, and with 4 writer
 * processes, taking turns through the lock file (the default) and relaying
 * their appends to the lock's holder (`relay: true`). appendRatio1 = log 1
 * writer / raw (per round), groupRatio4 = 4 writers / 1 writer (per round),
 * groupRatio4Processes and groupRatio4ProcessesRelay likewise; medians with
 * min and max.
 */
import { execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { open as openFile } from 'node:fs/promises'
import { createInterface } from 'node:readline'
import { RECORD_HEADER_BYTES } from '../src/log/record.js'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { openKafkaLog } from '../connectors/kafka/index.js'
import { openFileLog, type FileLogOptions, type RevisionedLog } from '../src/log/index.js'
import { createStateSynchronizer, type StateSynchronizer } from '../src/synchronizer/index.js'
import { encodeUpdates } from '../src/synchronizer/entry.js'
import { saveFigures } from './_figures.js'
import { benchDir, emit, loadAvg, median, pairedRatio, prefixed, round } from './_util.js'

interface Counter {
  count: number
}
interface Add {
  add: number
}

type LogKind = 'file' | 'kafka'

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: { updates: { type: 'string', default: '2000' }, only: { type: 'string' }, kafka: { type: 'string' }, appends: { type: 'string', default: '2000' }, rounds: { type: 'string', default: '3' } },
    strict: true,
  })
  const updates = Number(values.updates)
  if (!Number.isSafeInteger(updates) || updates < 4) throw new RangeError(`--updates must be an integer >= 4, got ${values.updates}`)
  if (values.only !== undefined && values.only !== 'file' && values.only !== 'kafka') throw new RangeError(`--only must be file or kafka, got ${values.only}`)
  const kinds: LogKind[] = values.only === undefined ? ['file', 'kafka'] : [values.only as LogKind]
  const appends = Number(values.appends)
  const rounds = Number(values.rounds)
  if (!Number.isSafeInteger(appends) || appends < 4) throw new RangeError(`--appends must be an integer >= 4, got ${values.appends}`)
  if (!Number.isSafeInteger(rounds) || rounds < 1) throw new RangeError(`--rounds must be a positive integer, got ${values.rounds}`)
  const loadAtStart = loadAvg()

  const dir = benchDir('sync')
  let mock: { dir: string } | undefined
  try {
    let brokers = (values.kafka ?? process.env.TIDEMARK_KAFKA_BROKERS)?.split(',')
    if (kinds.includes('kafka') && brokers === undefined) {
      mock = { dir: join(dir.path, 'kafka-mock') }
      const ready = execFileSync('bash', [join(import.meta.dirname, '../scripts/services/kafka-mock.sh'), 'start', mock.dir], { encoding: 'utf8' })
      brokers = /brokers=(\S+)/.exec(ready)![1]!.split(',')
    }
    let n = 0
    const open = async (kind: LogKind, name: string): Promise<() => Promise<RevisionedLog>> => {
      if (kind === 'file') {
        const path = join(dir.path, `${name}-${n++}`)
        return () => openFileLog(path)
      }
      const topic = `bench-sync-${name}-${process.pid}-${n++}`
      // librdkafka's mock answers a waiting fetch only when its wait is over.
      return () => openKafkaLog({ brokers: brokers!, topic, fetchWaitMs: mock === undefined ? 200 : 5 })
    }
    if (kinds.includes('file')) await fileAppends(dir.path, appends, rounds, loadAtStart)
    for (const kind of kinds) {
      // One unreported pass first, so that the first figure is not the one
      // that pays for the JIT and the first connections.
      await rawAppends(kind, await open(kind, 'warm'), 500, false)
      await synchronized(kind, await open(kind, 'warm'), 'conditional', 4, 400, false)
      await rawAppends(kind, await open(kind, 'raw'), updates)
      for (const mode of ['conditional', 'unconditional'] as const) {
        for (const writers of [1, 4]) await synchronized(kind, await open(kind, mode), mode, writers, updates)
      }
    }
  } finally {
    if (mock !== undefined) execFileSync('bash', [join(import.meta.dirname, '../scripts/services/kafka-mock.sh'), 'stop', mock.dir])
    dir.cleanup()
  }
}

/** The log alone: one writer appending entries of the size an update entry has. */
async function rawAppends(kind: LogKind, open: () => Promise<RevisionedLog>, count: number, report = true): Promise<void> {
  const log = await open()
  const entry = encodeUpdates([Buffer.from(JSON.stringify({ add: 1 }))])
  try {
    const start = performance.now()
    for (let i = 0; i < count; i++) await log.append(entry)
    const seconds = (performance.now() - start) / 1000
    if (report) emit({ bench: 'sync', log: kind, mode: 'raw-append', writers: 1, operations: count, seconds: round(seconds), perSecond: Math.round(count / seconds), entryBytes: entry.byteLength })
  } finally {
    await log.close()
  }
}

async function synchronized(kind: LogKind, open: () => Promise<RevisionedLog>, mode: 'conditional' | 'unconditional', writers: number, count: number, report = true): Promise<void> {
  const logs = await Promise.all(Array.from({ length: writers }, open))
  try {
    const clients: StateSynchronizer<Counter, Add>[] = logs.map((log) => createStateSynchronizer<Counter, Add>({ log, apply: (s, u) => ({ count: s.count + u.add }) }))
    // Warm-up outside the clock: create the state, start every reader.
    for (const c of clients) await c.initialize({ count: 0 })
    await Promise.all(clients.map((c) => c.updateState((_, u) => u.push({ add: 0 }))))
    let attempts = 0
    const start = performance.now()
    await Promise.all(
      clients.map(async (c, w) => {
        const mine = Math.floor(count / writers) + (w < count % writers ? 1 : 0)
        for (let i = 0; i < mine; i++) {
          if (mode === 'conditional') {
            await c.updateState((_, u) => {
              attempts++
              u.push({ add: 1 })
            })
          } else {
            await c.updateStateUnconditionally({ add: 1 })
          }
        }
      }),
    )
    const seconds = (performance.now() - start) / 1000
    // Every client must agree on the total, or the figure means nothing.
    await Promise.all(clients.map((c) => c.fetchUpdates()))
    const counts = new Set(clients.map((c) => c.getState().count))
    if (counts.size !== 1 || !counts.has(count)) throw new Error(`${kind} ${mode} ${writers} writers: clients ended at ${[...counts].join(', ')}, not ${count}`)
    if (!report) return
    emit({
      bench: 'sync',
      log: kind,
      mode,
      writers,
      operations: count,
      seconds: round(seconds),
      perSecond: Math.round(count / seconds),
      ...(mode === 'conditional' ? { attemptsPerUpdate: round(attempts / count, 2) } : {}),
    })
  } finally {
    await Promise.all(logs.map((l) => l.close()))
  }
}

/**
 * The file log's appends against raw write + fdatasync: appendRatio1 and
 * groupRatio4 (see the header). Each writer awaits each append, as a
 * synchronizer client does; 4 writers append --appends entries in all.
 */
async function fileAppends(root: string, appends: number, rounds: number, loadAtStart: number[]): Promise<void> {
  const entry = encodeUpdates([Buffer.from(JSON.stringify({ add: 1 }))])
  let n = 0
  const fresh = (): string => join(root, `append-${n++}`)
  const perSecond = (seconds: number): number => appends / seconds

  const raw = async (): Promise<number> => {
    const file = await openFile(fresh(), 'w')
    const record = Buffer.alloc(RECORD_HEADER_BYTES + entry.byteLength, 1)
    try {
      let pos = 0
      const t0 = performance.now()
      for (let i = 0; i < appends; i++) {
        await file.write(record, 0, record.byteLength, pos)
        pos += record.byteLength
        await file.datasync()
      }
      return perSecond((performance.now() - t0) / 1000)
    } finally {
      await file.close()
    }
  }
  const handles = async (count: number, writers: number): Promise<number> => {
    const path = fresh()
    const logs = await Promise.all(Array.from({ length: count }, () => openFileLog(path)))
    try {
      await Promise.all(logs.map((l) => l.append(entry)))
      const t0 = performance.now()
      await Promise.all(Array.from({ length: writers }, async (_, w) => {
        const log = logs[w % count]!
        for (let i = w; i < appends; i += writers) await log.append(entry)
      }))
      return perSecond((performance.now() - t0) / 1000)
    } finally {
      await Promise.all(logs.map((l) => l.close()))
    }
  }
  const processes = async (writers: number, options: FileLogOptions = {}): Promise<number> => {
    const path = fresh()
    const children = Array.from({ length: writers }, (_, w) => {
      const mine = Math.floor(appends / writers) + (w < appends % writers ? 1 : 0)
      const proc = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '_append-writer.ts'), path, String(mine), String(entry.byteLength), JSON.stringify(options)], { stdio: ['pipe', 'pipe', 'inherit'] })
      const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]()
      // Listened for now: a child may exit before the parent gets to wait for it.
      const exited = once(proc, 'exit')
      return { proc, exited, next: async (want: string) => {
        const line = await lines.next()
        if (line.value !== want) throw new Error(`append writer ${w}: expected "${want}", got ${String(line.value)}`)
      } }
    })
    try {
      await Promise.all(children.map((c) => c.next('ready')))
      const t0 = performance.now()
      for (const c of children) c.proc.stdin.end('go\n')
      await Promise.all(children.map((c) => c.next('done')))
      const seconds = (performance.now() - t0) / 1000
      await Promise.all(children.map((c) => c.exited))
      return perSecond(seconds)
    } finally {
      for (const c of children) if (c.proc.exitCode === null) c.proc.kill()
    }
  }

  // Warm-up, unreported: the JIT and the first files.
  await raw()
  await handles(1, 1)
  const sides = { raw: [] as number[], one: [] as number[], fourHandles: [] as number[], fourShared: [] as number[], fourProcesses: [] as number[], fourProcessesRelay: [] as number[] }
  const ratios = { append1: [] as number[], group4: [] as number[], group4Shared: [] as number[], group4Processes: [] as number[], group4ProcessesRelay: [] as number[] }
  for (let r = 0; r < rounds; r++) {
    // The order alternates, so that neither side always runs first.
    const order = r % 2 === 0 ? (['raw', 'one', 'fourHandles', 'fourShared', 'fourProcesses', 'fourProcessesRelay'] as const) : (['fourProcessesRelay', 'fourProcesses', 'fourShared', 'fourHandles', 'one', 'raw'] as const)
    const got: Partial<Record<keyof typeof sides, number>> = {}
    for (const side of order) {
      got[side] = side === 'raw' ? await raw()
        : side === 'one' ? await handles(1, 1)
        : side === 'fourHandles' ? await handles(4, 4)
        : side === 'fourShared' ? await handles(1, 4)
        : side === 'fourProcesses' ? await processes(4)
        : await processes(4, { relay: true })
      sides[side].push(got[side])
    }
    ratios.append1.push(got.one! / got.raw!)
    ratios.group4.push(got.fourHandles! / got.one!)
    ratios.group4Shared.push(got.fourShared! / got.one!)
    ratios.group4Processes.push(got.fourProcesses! / got.one!)
    ratios.group4ProcessesRelay.push(got.fourProcessesRelay! / got.one!)
  }
  const result = {
    bench: 'sync',
    log: 'file',
    mode: 'append',
    baseline: 'write + fdatasync of the same bytes as each record, at the end of a file, one writer',
    loadAvg: loadAtStart,
    appends,
    recordBytes: RECORD_HEADER_BYTES + entry.byteLength,
    rawPerSecond: Math.round(median(sides.raw)),
    perSecond1: Math.round(median(sides.one)),
    perSecond4: Math.round(median(sides.fourHandles)),
    perSecond4Shared: Math.round(median(sides.fourShared)),
    perSecond4Processes: Math.round(median(sides.fourProcesses)),
    perSecond4ProcessesRelay: Math.round(median(sides.fourProcessesRelay)),
    ...prefixed('appendRatio1', pairedRatio(ratios.append1)),
    ...prefixed('groupRatio4', pairedRatio(ratios.group4)),
    ...prefixed('groupRatio4Shared', pairedRatio(ratios.group4Shared)),
    ...prefixed('groupRatio4Processes', pairedRatio(ratios.group4Processes)),
    ...prefixed('groupRatio4ProcessesRelay', pairedRatio(ratios.group4ProcessesRelay)),
  }
  emit(result)
  // The row of docs/benchmarks.md (npm run readme:bench): the append figures, which its targets are about.
  saveFigures('sync', process.argv.slice(3), result)
}
