// Both stages on the embedded file log: no Kafka, no S3. Stage 1 reads lines
// from <dir>/lines and writes its changes to the file log <dir>/topics/<counts
// topic> through a file-log sink; stage 2 reads that log with dedupe.
import { join } from 'node:path'
import { FsSnapshotStore, PartitionProcessor, fileLogSink, openFileLog, outboxRecordCodec, type OutboxRecord } from 'tidemark'
import { counts, countLine, lineAt, sumChange, type CountChange } from './words.js'

export interface EmbeddedArgs {
  stage: 'count' | 'sum'
  dir: string
  job: string
  countsTopic: string
  produce: number
  idleExit: boolean
}

export async function runEmbedded(a: EmbeddedArgs): Promise<void> {
  const snapshots = new FsSnapshotStore({ root: join(a.dir, 'snapshots') })
  const sink = fileLogSink({ dir: join(a.dir, 'topics') })
  let processor: PartitionProcessor<{ line: string }> | PartitionProcessor<OutboxRecord>
  const lines = await openFileLog(join(a.dir, 'lines'))
  if (a.produce > 0) {
    const tail = await lines.tail()
    // Appends made together commit as one group (one write, one flush).
    for (let i = 0; i < a.produce; i += 500) {
      const batch = []
      for (let j = i; j < Math.min(a.produce, i + 500); j++) batch.push(lines.append(Buffer.from(JSON.stringify({ line: lineAt(Number(tail) + j) }))))
      await Promise.all(batch)
    }
    console.log(`produced ${a.produce} lines to ${join(a.dir, 'lines')}`)
  }
  const common = { snapshots: { store: snapshots, schedule: { intervalMs: 30_000, everyEvents: 50_000 }, onClose: true }, ownership: { takeover: 'force' as const } }
  let source = lines
  if (a.stage === 'count') {
    processor = new PartitionProcessor<{ line: string }>({
      ...common, job: a.job, log: lines, topic: 'lines', partition: 0, path: join(a.dir, 'state', `${a.job}-0`), states: [counts],
      handler: (tx, { line }, ctx) => countLine(tx, line, ctx, a.countsTopic),
      outputs: { sink },
    })
  } else {
    await lines.close()
    source = await openFileLog(join(a.dir, 'topics', a.countsTopic))
    processor = new PartitionProcessor<OutboxRecord>({
      ...common, job: `${a.job}-sum`, log: source, topic: a.countsTopic, partition: 0, path: join(a.dir, 'state', `${a.job}-sum-0`), states: [counts],
      codec: outboxRecordCodec(), dedupe: 'tidemark-ids',
      handler: (tx, record) => { if (record.value !== null) sumChange(tx, JSON.parse(record.value.toString('utf8')) as CountChange) },
    })
  }
  const p = processor as PartitionProcessor<unknown>
  p.on('outputs', (e) => { if (e.type === 'delivery-failed' || e.type === 'outbox-full') console.error(`outputs: ${e.type}`) })
  // The handlers go in before the start is announced: a supervisor that sends
  // SIGTERM as soon as it reads that line must reach them, not the default
  // action (which kills the process without a hand-off snapshot).
  const ac = new AbortController()
  const stop = (why: string): void => {
    console.log(`${why}: stopping`)
    ac.abort()
  }
  process.once('SIGTERM', () => stop('SIGTERM'))
  process.once('SIGINT', () => stop('SIGINT'))
  let applied = 0
  p.on('commit', (c) => { applied += c.events })
  const started = await p.start()
  console.log(`stage ${a.stage}: ${started.source} state at offset ${started.offset ?? 'none'}`)
  if (a.idleExit) {
    await p.catchUp()
    await p.flushOutputs()
    const totals: string[] = []
    for await (const [word, n] of p.store.transaction().value(counts).entries()) totals.push(`${word}=${n}`)
    console.log(`stage ${a.stage}: ${totals.join(' ')}`)
  } else {
    await p.run(ac.signal)
  }
  await p.close()
  await sink.close()
  await source.close()
  console.log(`closed: ${applied} events applied by this process`)
}
