// Both stages on a Kafka consumer group: stage 1 (count) consumes lines and
// emits every change of a word's count to the counts topic through its
// outbox; stage 2 (sum) consumes that topic with dedupe: 'tidemark-ids'.
import { Kafka, Partitioners, logLevel } from 'kafkajs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { openSnapshotStore } from 'tidemark'
import { StatefulConsumer, kafkaSink } from 'tidemark/kafka'
import { counts, countLine, lineAt, sumChange, type CountChange } from './words.js'

export interface KafkaArgs {
  stage: 'count' | 'sum'
  brokers: string[]
  topic: string
  countsTopic: string
  job: string
  state: string | undefined
  /** Shared by every member of the group: a hand-off snapshot is where the next owner finds it. */
  store: string
  produce: number
  idleExit: boolean
  /** Print the lines applied per partition this often (ms), when any were; 0: never. */
  progressMs: number
}

export async function runKafka(a: KafkaArgs): Promise<void> {
  if (a.produce > 0) {
    const kafka = new Kafka({ brokers: a.brokers, clientId: 'wordcount-producer', logLevel: logLevel.NOTHING })
    const producer = kafka.producer({ allowAutoTopicCreation: true, createPartitioner: Partitioners.DefaultPartitioner })
    await producer.connect()
    for (let i = 0; i < a.produce; i += 500) {
      const messages = []
      for (let j = i; j < Math.min(a.produce, i + 500); j++) messages.push({ key: String(j), value: JSON.stringify({ line: lineAt(j) }) })
      await producer.send({ topic: a.topic, messages })
    }
    await producer.disconnect()
    console.log(`produced ${a.produce} lines to ${a.topic}`)
  }

  // One producer for every partition of this process.
  const sink = kafkaSink({ brokers: a.brokers })
  const job = a.stage === 'count' ? a.job : `${a.job}-sum`
  const snapshots = {
    store: await openSnapshotStore(a.store),
    schedule: { intervalMs: 30_000, everyEvents: 50_000 },
  }
  const common = {
    job, brokers: a.brokers, stateDir: a.state ?? join(tmpdir(), `wordcount-state-${process.pid}`), states: [counts], snapshots,
    consumer: { sessionTimeout: 10_000, heartbeatInterval: 1000, maxWaitTimeInMs: 200 },
  }
  const consumer = a.stage === 'count'
    ? new StatefulConsumer<{ line: string }>({
      ...common, topics: [a.topic], onDecodeError: 'skip', outputs: { sink },
      handler: (tx, record, ctx) => { if (record.value !== null) countLine(tx, record.value.line, ctx, a.countsTopic) },
    })
    : new StatefulConsumer<CountChange>({
      ...common, topics: [a.countsTopic], dedupe: 'tidemark-ids',
      handler: (tx, record) => { if (record.value !== null) sumChange(tx, record.value) },
    })
  const c = consumer as StatefulConsumer<unknown>
  const unit = a.stage === 'count' ? 'lines' : 'changes'
  // Printed at each assignment, when the member id is known: start() can
  // resolve before the first join of a member that joins a busy group.
  c.on('assignment', ({ partitions }) => {
    const list = partitions.map((p) => `${p.topic}/${p.partition}`).join(', ') || 'none'
    console.log(`member ${c.memberId} of group tidemark-${job} (pid ${process.pid}): partitions ${list}`)
  })
  c.on('partition-started', (s) => console.log(`partition ${s.topic}/${s.partition}: ${s.source} state at offset ${s.position ?? 'none'}, fetching from ${s.fetchFrom}`))
  c.on('partition-closed', (x) => console.log(`partition ${x.topic}/${x.partition}: ${x.reason}, ${x.counts.applied} ${unit} applied here${x.handoff === undefined ? '' : `, hand-off snapshot ${x.handoff.id}`}`))
  c.on('partition-failed', (f) => console.error(`partition ${f.topic}/${f.partition} stopped: ${String(f.error)}`))
  c.on('outputs', ({ topic, partition, event }) => { if (event.type === 'outbox-full' || event.type === 'delivery-failed') console.error(`partition ${topic}/${partition}: ${event.type}`) })

  // Now and then, what each partition applied since the last look: a member
  // at work says so, not only at a rebalance or a close.
  const seen = new Map<string, number>()
  const progress = a.progressMs > 0 ? setInterval(() => {
    const moved: string[] = []
    for (const p of c.partitions()) {
      const key = `${p.topic}/${p.partition}`
      const delta = p.counts.applied - (seen.get(key) ?? 0)
      seen.set(key, p.counts.applied)
      if (delta > 0) moved.push(`${key} +${delta} (at offset ${p.position})`)
    }
    if (moved.length > 0) console.log(`applied: ${moved.join(', ')}`)
  }, a.progressMs) : undefined
  progress?.unref()

  let closing: Promise<void> | undefined
  const close = (why: string): Promise<void> => {
    closing ??= (async () => {
      clearInterval(progress)
      console.log(`${why}: handing off`)
      const { partitions } = await c.close()
      await sink.close()
      // Offsets count from 0 in a fresh topic: a partition at offset N holds
      // N + 1 records, each applied once, whoever applied them (also a
      // member that was SIGKILLed, whose own counts died with it).
      const held = partitions.filter((p) => p.position !== undefined).sort((x, y) => x.topic.localeCompare(y.topic) || x.partition - y.partition)
      const total = held.reduce((sum, p) => sum + p.position! + 1n, 0n)
      if (held.length > 0) console.log(`positions: ${held.map((p) => `${p.topic}/${p.partition} ${p.position}`).join(', ')}: these partitions hold ${total} ${unit}`)
      console.log(`closed: ${partitions.length} partitions handed off, ${c.counts().applied} ${unit} applied by this process`)
    })()
    return closing
  }
  process.once('SIGTERM', () => void close('SIGTERM').then(() => process.exit(0)))
  process.once('SIGINT', () => void close('SIGINT').then(() => process.exit(0)))

  await c.start()
  if (a.idleExit) {
    const source = a.stage === 'count' ? a.topic : a.countsTopic
    const admin = new Kafka({ brokers: a.brokers, clientId: 'wordcount-admin', logLevel: logLevel.NOTHING }).admin()
    await admin.connect()
    const ends = new Map((await admin.fetchTopicOffsets(source)).map((o) => [o.partition, BigInt(o.high)]))
    await admin.disconnect()
    await new Promise<void>((resolve) => {
      const check = (): void => {
        const parts = c.partitions()
        if (parts.length > 0 && parts.every((p) => p.state === 'running' && (p.position ?? -1n) + 1n >= (ends.get(p.partition) ?? 0n))) {
          c.off('commit', check)
          c.off('partition-started', check)
          resolve()
        }
      }
      c.on('commit', check)
      c.on('partition-started', check)
      check()
    })
    await c.flushOutputs()
    for (const p of c.partitions()) {
      const tx = c.store(p.topic, p.partition)!.transaction()
      const top: string[] = []
      for await (const [word, n] of tx.value(counts).entries()) top.push(`${word}=${n}`)
      tx.abort()
      console.log(`partition ${p.topic}/${p.partition}: ${top.join(' ')}`)
    }
    await close('caught up')
  }
}
