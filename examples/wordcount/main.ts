// Word count on a Kafka consumer group: every process started with the same
// --job joins one group and counts the words of the partitions it is assigned;
// partitions move between processes with their state (restored from the
// hand-off snapshot a leaving process takes on SIGTERM).
//
//   npx tsx examples/wordcount/main.ts --brokers 127.0.0.1:9092 --produce 10000
//   npx tsx examples/wordcount/main.ts --brokers 127.0.0.1:9092 --store s3://bucket/wc?endpoint=http://127.0.0.1:9000&region=us-east-1
//
// Stop a process with SIGTERM (or Ctrl-C): it finishes its batches, snapshots
// its partitions, leaves the group and prints its totals.
import { Kafka, Partitioners, logLevel } from 'kafkajs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { openSnapshotStore } from '../../src/dfs/open.js'
import { valueState } from '../../src/store/state.js'

const USAGE = `usage: npx tsx examples/wordcount/main.ts --brokers host:port[,host:port] [options]
  --topic NAME      the topic of lines (default wordcount-lines)
  --job NAME        the job and its consumer group (default wordcount)
  --state DIR       local partition stores (default <tmp>/wordcount-state-<pid>)
  --store URL       snapshot store, file:// or s3:// (default file://<tmp>/wordcount-snapshots)
  --produce N       first produce N lines of words to the topic
  --idle-exit       close and exit once every assigned partition is caught up (for scripts)`

const WORDS = ['tide', 'mark', 'state', 'log', 'kafka', 'snapshot', 'partition', 'offset', 'group', 'owner']

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      brokers: { type: 'string' },
      topic: { type: 'string', default: 'wordcount-lines' },
      job: { type: 'string', default: 'wordcount' },
      state: { type: 'string' },
      store: { type: 'string' },
      produce: { type: 'string' },
      'idle-exit': { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  })
  if (values.help) {
    console.log(USAGE)
    return
  }
  if (values.brokers === undefined) throw new UsageError('--brokers is required')
  const brokers = values.brokers.split(',')
  const produce = values.produce === undefined ? 0 : Number(values.produce)
  if (!Number.isSafeInteger(produce) || produce < 0) throw new UsageError(`--produce must be a non-negative integer, got ${JSON.stringify(values.produce)}`)

  if (produce > 0) {
    const kafka = new Kafka({ brokers, clientId: 'wordcount-producer', logLevel: logLevel.NOTHING })
    const producer = kafka.producer({ allowAutoTopicCreation: true, createPartitioner: Partitioners.DefaultPartitioner })
    await producer.connect()
    for (let i = 0; i < produce; i += 500) {
      const messages = []
      for (let j = i; j < Math.min(produce, i + 500); j++) {
        messages.push({ key: String(j), value: JSON.stringify({ line: `${WORDS[j % WORDS.length]} ${WORDS[(j * 7) % WORDS.length]} ${WORDS[(j * 3) % WORDS.length]}` }) })
      }
      await producer.send({ topic: values.topic, messages })
    }
    await producer.disconnect()
    console.log(`produced ${produce} lines to ${values.topic}`)
  }

  const counts = valueState<number>('counts')
  const consumer = new StatefulConsumer<{ line: string }>({
    job: values.job,
    brokers,
    topics: [values.topic],
    stateDir: values.state ?? join(tmpdir(), `wordcount-state-${process.pid}`),
    states: [counts],
    handler: (tx, record) => {
      if (record.value === null) return
      const view = tx.value(counts)
      for (const word of record.value.line.split(/\s+/).filter(Boolean)) view.put(word, (view.getSync(word) ?? 0) + 1)
    },
    snapshots: {
      store: await openSnapshotStore(values.store ?? `file://${join(tmpdir(), 'wordcount-snapshots')}`),
      schedule: { intervalMs: 30_000, everyEvents: 50_000 },
    },
    onDecodeError: 'skip',
    consumer: { sessionTimeout: 10_000, heartbeatInterval: 1000, maxWaitTimeInMs: 200 },
  })
  consumer.on('partition-started', (s) => console.log(`partition ${s.topic}/${s.partition}: ${s.source} state at offset ${s.position ?? 'none'}, fetching from ${s.fetchFrom}`))
  consumer.on('partition-closed', (c) => console.log(`partition ${c.topic}/${c.partition}: ${c.reason}, ${c.counts.applied} lines applied here${c.handoff === undefined ? '' : `, hand-off snapshot ${c.handoff.id}`}`))
  consumer.on('partition-failed', (f) => console.error(`partition ${f.topic}/${f.partition} stopped: ${String(f.error)}`))

  let closing: Promise<void> | undefined
  const close = (why: string): Promise<void> => {
    closing ??= (async () => {
      console.log(`${why}: handing off`)
      const { partitions } = await consumer.close()
      console.log(`closed: ${partitions.length} partitions handed off, ${consumer.counts().applied} lines applied by this process`)
    })()
    return closing
  }
  process.once('SIGTERM', () => void close('SIGTERM').then(() => process.exit(0)))
  process.once('SIGINT', () => void close('SIGINT').then(() => process.exit(0)))

  await consumer.start()
  console.log(`member ${consumer.memberId} of group tidemark-${values.job}`)
  if (values['idle-exit']) {
    // Caught up: every assigned partition's position has reached the log's end.
    const admin = new Kafka({ brokers, clientId: 'wordcount-admin', logLevel: logLevel.NOTHING }).admin()
    await admin.connect()
    const ends = new Map((await admin.fetchTopicOffsets(values.topic)).map((o) => [o.partition, BigInt(o.high)]))
    await admin.disconnect()
    await new Promise<void>((resolve) => {
      const check = (): void => {
        const parts = consumer.partitions()
        if (parts.length > 0 && parts.every((p) => p.state === 'running' && (p.position ?? -1n) + 1n >= (ends.get(p.partition) ?? 0n))) {
          consumer.off('commit', check)
          consumer.off('partition-started', check)
          resolve()
        }
      }
      consumer.on('commit', check)
      consumer.on('partition-started', check)
      check()
    })
    for (const p of consumer.partitions()) {
      const tx = consumer.store(p.topic, p.partition)!.transaction()
      const top: string[] = []
      for await (const [word, n] of tx.value(counts).entries()) top.push(`${word}=${n}`)
      tx.abort()
      console.log(`partition ${p.topic}/${p.partition}: ${top.join(' ')}`)
    }
    await close('caught up')
  }
}

class UsageError extends Error {}

main().catch((err: unknown) => {
  if (err instanceof UsageError || (err as { code?: string })?.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    process.stderr.write(`wordcount: ${(err as Error).message}\n${USAGE}\n`)
    process.exit(2)
  }
  process.stderr.write(`wordcount: ${(err as Error)?.stack ?? String(err)}\n`)
  process.exit(1)
})
