// Word count in two stages, each started with one command:
//
//   stage 1 (count): counts the words of each line per partition and emits
//     every change of a count ({ word, delta: 1, count }) to the counts topic
//     through its outbox: written in the batch that changes the count,
//     delivered after it, with a deterministic id;
//   stage 2 (sum): sums the deltas per word, with dedupe: 'tidemark-ids', so
//     a change delivered twice (a crash between commit and delivery) counts once.
//
// On Kafka + a file or S3 snapshot store, every process with the same --job
// and --stage joins one consumer group; all of them take the same --store,
// where a partition's next owner finds its hand-off snapshot (a fresh store
// for a fresh topic: snapshots of an earlier run would say its partitions
// are further on than they are):
//   node --import tsx examples/wordcount/main.ts --brokers 127.0.0.1:9092 --store file:///tmp/wc/snapshots --produce 10000
//   node --import tsx examples/wordcount/main.ts --brokers 127.0.0.1:9092 --store file:///tmp/wc/snapshots --stage sum
//   ... --store 's3://bucket/wc?endpoint=http://127.0.0.1:9000&region=us-east-1'
// On the embedded file log, no services at all:
//   node --import tsx examples/wordcount/main.ts --embedded /tmp/wc --produce 10000
//   node --import tsx examples/wordcount/main.ts --embedded /tmp/wc --stage sum
//
// Stop a process with SIGTERM (kill PID; each member prints its pid) or
// Ctrl-C: it finishes its batches, snapshots its partitions, (on Kafka) leaves
// the group and prints its totals. Not through npx: npx does not pass a kill
// on to the process it starts, which then goes on without a hand-off. In a
// launcher script, `exec node --import tsx ...` makes the member the process
// that is signalled.
//
// Run from the repository's root: its tsconfig.json maps 'tidemark' to the
// source. Copied into an app, the same files import the installed package.
import { parseArgs } from 'node:util'
import { runEmbedded } from './embedded.js'
import { runKafka } from './kafka.js'

const USAGE = `usage: node --import tsx examples/wordcount/main.ts (--brokers host:port[,host:port] --store URL | --embedded DIR) [options]
  --stage count|sum  count: lines -> counts topic (default); sum: counts topic -> totals, with dedupe
  --topic NAME       the topic of lines (default wordcount-lines)
  --counts-topic N   the topic of count changes between the stages (default wordcount-counts)
  --job NAME         the job; stage sum runs as <job>-sum (default wordcount)
  --state DIR        local partition stores (default <tmp>/wordcount-state-<pid>)
  --store URL        with --brokers: the snapshot store every member shares, file:// or s3:// (required)
  --embedded DIR     run on the embedded file log in DIR (lines, topics, state, snapshots): no Kafka, no S3
  --produce N        first produce N lines of words
  --idle-exit        close and exit once caught up, printing the totals (for scripts)
  --progress-ms N    with --brokers: print the lines applied per partition every N ms when any were (default 5000; 0: never)`

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      brokers: { type: 'string' },
      embedded: { type: 'string' },
      stage: { type: 'string', default: 'count' },
      topic: { type: 'string', default: 'wordcount-lines' },
      'counts-topic': { type: 'string', default: 'wordcount-counts' },
      job: { type: 'string', default: 'wordcount' },
      state: { type: 'string' },
      store: { type: 'string' },
      produce: { type: 'string' },
      'idle-exit': { type: 'boolean', default: false },
      'progress-ms': { type: 'string', default: '5000' },
      help: { type: 'boolean', default: false },
    },
  })
  if (values.help) {
    console.log(USAGE)
    return
  }
  const stage = values.stage
  if (stage !== 'count' && stage !== 'sum') throw new UsageError(`--stage must be count or sum, got ${JSON.stringify(stage)}`)
  const produce = values.produce === undefined ? 0 : Number(values.produce)
  if (!Number.isSafeInteger(produce) || produce < 0) throw new UsageError(`--produce must be a non-negative integer, got ${JSON.stringify(values.produce)}`)
  const progressMs = Number(values['progress-ms'])
  if (!Number.isSafeInteger(progressMs) || progressMs < 0 || progressMs > 2 ** 31 - 1) throw new UsageError(`--progress-ms must be an integer from 0 to ${2 ** 31 - 1}, got ${JSON.stringify(values['progress-ms'])}`)
  if ((values.brokers === undefined) === (values.embedded === undefined)) throw new UsageError('give one of --brokers and --embedded')
  if (values.embedded !== undefined) {
    await runEmbedded({ stage, dir: values.embedded, job: values.job, countsTopic: values['counts-topic'], produce, idleExit: values['idle-exit'] })
    return
  }
  // No default: a fixed one would hand a fresh topic the snapshots of the runs before.
  if (values.store === undefined) throw new UsageError('--store is required with --brokers: the snapshot store (file:// or s3://) every member of the group shares; a fresh one for a fresh topic')
  await runKafka({
    stage, brokers: values.brokers!.split(','), topic: values.topic, countsTopic: values['counts-topic'], job: values.job,
    state: values.state, store: values.store, produce, idleExit: values['idle-exit'], progressMs,
  })
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
