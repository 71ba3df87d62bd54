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
 */
import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { openKafkaLog } from '../connectors/kafka/index.js'
import { openFileLog, type RevisionedLog } from '../src/log/index.js'
import { createStateSynchronizer, type StateSynchronizer } from '../src/sync/index.js'
import { encodeUpdates } from '../src/sync/entry.js'
import { benchDir, emit, round } from './_util.js'

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
    options: { updates: { type: 'string', default: '2000' }, only: { type: 'string' }, kafka: { type: 'string' } },
    strict: true,
  })
  const updates = Number(values.updates)
  if (!Number.isSafeInteger(updates) || updates < 4) throw new RangeError(`--updates must be an integer >= 4, got ${values.updates}`)
  if (values.only !== undefined && values.only !== 'file' && values.only !== 'kafka') throw new RangeError(`--only must be file or kafka, got ${values.only}`)
  const kinds: LogKind[] = values.only === undefined ? ['file', 'kafka'] : [values.only as LogKind]

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
