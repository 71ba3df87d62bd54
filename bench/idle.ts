/**
 * Idle CPU of one process serving 32 partitions (8 topics of 4) through a
 * StatefulConsumer (tidemark/kafka) that has caught up and has nothing to do,
 * next to a plain kafkajs consumer of the same 32 partitions in the same run.
 *
 *   npm run bench -- idle [--seconds 10] [--rounds 3] [--records 100] [--max-wait-ms N] [--settle-seconds 1]
 *
 * Each round starts a plain kafkajs consumer (a new group, eachBatch doing
 * nothing), waits until it has fetched every record, and measures this
 * process's CPU time (process.cpuUsage(), user + system, every thread) over
 * two windows: the first --settle-seconds after catching up
 * (settlingCpuPercent) and the --seconds after those (idleCpuPercent, the
 * figure of a service that has nothing to do); then the same for a
 * StatefulConsumer with a file-system snapshot store and the default
 * options. The settle window is reported on its own because it still holds
 * the end of the catch-up (the last commits, the group's offset commit).
 * Rounds
 * alternate (raw, ours, raw, ours...), so noise lands on both sides; the
 * figures are the medians, in percent of one core.
 *
 * Both sides run with kafkajs's request queue fixed
 * (connectors/kafka/kafkajs-fixes.ts, a process-wide patch that loading
 * tidemark/kafka applies): kafkajs 2.2.4 alone keeps a 1 ms timer loop per
 * connection, 5-7 % of a core here whatever the fetch wait.
 *
 * Kafka: TIDEMARK_KAFKA_BROKERS, or librdkafka's mock started here.
 */
import { loadavg } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Kafka, logLevel } from 'kafkajs'
import { StatefulConsumer } from '../connectors/kafka/index.js'
import { FsSnapshotStore, valueState } from '../src/index.js'
import { benchKafka, benchProducer, countingSockets, median } from './_kafka.js'
import { saveFigures } from './_figures.js'
import { benchDir, emit, intFlags, round } from './_util.js'

const TOPICS = 8
const PARTITIONS = [0, 1, 2, 3]
const counts = valueState<number>('counts')

/** Percent of one core this process used over `seconds`. */
async function cpuPercent(seconds: number): Promise<number> {
  const before = process.cpuUsage()
  const t0 = performance.now()
  await sleep(seconds * 1000)
  const used = process.cpuUsage(before)
  return ((used.user + used.system) / 1000 / (performance.now() - t0)) * 100
}

/** Resolves when `check` holds, looking every 100 ms (the consumers report progress by events this bench does not need to tie together). */
async function until(what: string, check: () => boolean, timeoutMs = 120_000): Promise<void> {
  const deadline = performance.now() + timeoutMs
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(100)
  }
}

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { seconds: 10, rounds: 3, records: 100, 'max-wait-ms': 0, 'settle-seconds': 1 })
  // 0: each side's default fetch wait (kafkajs 5000 ms, StatefulConsumer 500 ms); else this one on both sides.
  const maxWait = opts['max-wait-ms'] === 0 ? {} : { maxWaitTimeInMs: opts['max-wait-ms'] }
  const loadAvgAtStart = loadavg().map((l) => round(l, 2))
  const dir = benchDir('idle')
  const kafka = benchKafka(join(dir.path, 'kafka-mock'))
  const { producer } = await benchProducer(kafka.brokers)
  const stamp = `${process.pid}-${Date.now().toString(36)}`
  try {
    const topics = Array.from({ length: TOPICS }, (_, i) => `bench-idle-${stamp}-${i}`)
    for (const topic of topics) {
      for (const partition of PARTITIONS) {
        await producer.send({ topic, acks: -1, messages: Array.from({ length: opts.records }, (_, i) => ({ key: `k${i % 10}`, value: JSON.stringify({ n: i }), partition })) })
      }
    }
    const total = TOPICS * PARTITIONS.length * opts.records
    const raw: number[] = []
    const ours: number[] = []
    // The settle windows: the first seconds after catching up, measured on their own (see the header).
    const rawSettling: number[] = []
    const oursSettling: number[] = []
    let rawSockets = 0
    let oursSockets = 0
    for (let r = 0; r < opts.rounds; r++) {
      {
        const sockets = countingSockets()
        const consumer = new Kafka({ brokers: kafka.brokers, clientId: 'bench-raw', logLevel: logLevel.NOTHING, socketFactory: sockets.socketFactory })
          .consumer({ groupId: `bench-idle-raw-${stamp}-${r}`, ...maxWait })
        let seen = 0
        await consumer.connect()
        await consumer.subscribe({ topics, fromBeginning: true })
        await consumer.run({ eachBatch: async ({ batch }) => { seen += batch.messages.length } })
        await until('the plain consumer to fetch every record', () => seen >= total)
        rawSettling.push(await cpuPercent(opts['settle-seconds']))
        raw.push(await cpuPercent(opts.seconds))
        rawSockets = Math.max(rawSockets, sockets.opened())
        await consumer.disconnect()
      }
      {
        const sockets = countingSockets()
        const consumer = new StatefulConsumer<{ n: number }>({
          job: `bench-idle-${stamp}-${r}`, brokers: kafka.brokers, topics, stateDir: join(dir.path, `state-${r}`), states: [counts],
          handler: (tx, record) => { const view = tx.value(counts); view.put(record.key ?? '', (view.getSync(record.key ?? '') ?? 0) + 1) },
          snapshots: { store: new FsSnapshotStore({ root: join(dir.path, `snapshots-${r}`) }) },
          consumer: maxWait,
          kafka: { socketFactory: sockets.socketFactory },
        })
        await consumer.start()
        await until('the StatefulConsumer to apply every record', () => consumer.counts().applied >= total)
        if (consumer.partitions().length !== TOPICS * PARTITIONS.length) throw new Error(`expected ${TOPICS * PARTITIONS.length} partitions, got ${consumer.partitions().length}`)
        oursSettling.push(await cpuPercent(opts['settle-seconds']))
        ours.push(await cpuPercent(opts.seconds))
        oursSockets = Math.max(oursSockets, sockets.opened())
        await consumer.close()
      }
    }
    const result = {
      bench: 'idle',
      idleCpuPercent: round(median(ours), 2),
      idleCpuPercentMin: round(Math.min(...ours), 2),
      idleCpuPercentMax: round(Math.max(...ours), 2),
      rawIdleCpuPercent: round(median(raw), 2),
      rawIdleCpuPercentMin: round(Math.min(...raw), 2),
      rawIdleCpuPercentMax: round(Math.max(...raw), 2),
      settlingCpuPercent: round(median(oursSettling), 2),
      rawSettlingCpuPercent: round(median(rawSettling), 2),
      partitions: TOPICS * PARTITIONS.length,
      kafkaConnections: oursSockets,
      rawKafkaConnections: rawSockets,
      seconds: opts.seconds,
      settleSeconds: opts['settle-seconds'],
      maxWaitTimeInMs: opts['max-wait-ms'] === 0 ? 'defaults' : opts['max-wait-ms'],
      rounds: opts.rounds,
      kafka: kafka.kind,
      loadAvgAtStart,
      node: process.version,
      all: { ours: ours.map((x) => round(x, 2)), raw: raw.map((x) => round(x, 2)), oursSettling: oursSettling.map((x) => round(x, 2)), rawSettling: rawSettling.map((x) => round(x, 2)) },
    }
    emit(result)
    saveFigures('idle', args, result)
  } finally {
    await producer.disconnect().catch(() => undefined)
    kafka.stop()
    dir.cleanup()
  }
}
