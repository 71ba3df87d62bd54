/**
 * Exactly-once outputs (docs/outputs.md), ratios from interleaved (raw,
 * ours) pairs with the median per-pair ratio and its min/max:
 *
 * - eoRatio, the target: events/s of the word count emitting one record per
 *   event through the outbox to Kafka (kafkaSink, delivery running beside
 *   the job), the clock stopped once every record is delivered, ÷ what a
 *   user without the outbox runs: the same job, the same records, sent with
 *   a plain kafkajs producer after each commit of a batch (at-least-once:
 *   a crash sends them again). Both send to a fresh topic per round, with
 *   kafkaSink's producer settings, one produce request per committed batch
 *   (the outbox job's maxBatchRecords is --batch). The outbox's records
 *   also carry their tidemark-id header, which the direct job has no use for:
 *   its encoding by kafkajs is part of what exactly-once costs here.
 *   eoIdRatio, for information: the same against the direct job sending
 *   each record with that header too (run right after the direct job in
 *   each round), i.e. the outbox's share of the gap without the header's.
 *   This process loads tidemark/kafka, whose kafkajs header and record
 *   encoders for records with headers (connectors/kafka/kafkajs-fixes.ts)
 *   both header-sending jobs use; the direct job sends no header and runs
 *   kafkajs's own code.
 * - emitRatio: events/s of a PartitionProcessor word count on a file log
 *   that emits one record per event (`outputs` with a fileLogSink, delivery
 *   running in the background as it would), ÷ the same job without
 *   `outputs` and without emitting. Both time catchUp() to the end of the
 *   log in a fresh store; emitDeliveredRatio also waits for the outbox to
 *   drain (flushOutputs()). emitHeldRatio: the same with the sink held
 *   shut while the job runs, i.e. emit and outbox writes without delivery.
 * - deliveryRatio: records/s of the outbox publisher delivering a filled
 *   outbox to Kafka through kafkaSink, ÷ a plain kafkajs producer (the
 *   sink's producer settings) sending the same records (same keys, values
 *   and tidemark-id headers) in sendBatch calls of the same size
 *   (maxBatchRecords), one after the other. The outbox is filled while the
 *   sink is held shut; the clock starts when it opens and stops when
 *   flushOutputs() resolves. Each side gets a fresh topic per round: the
 *   job emits to it (until 2026-12 a wrapper around the sink copied every
 *   record to set its topic, a per-record cost inside the timed delivery
 *   that the plain producer, sending ready messages, did not pay).
 *   deliverySinkShare: the part of the delivery time spent inside the sink's
 *   send (the rest is the outbox scan, decoding and the delete commit).
 *
 * CPU figures (process.cpuUsage: every thread of the process, LevelDB's
 * included, not the Kafka mock's; medians): eoCpuUs and eoRawCpuUs per
 * event from the start of the job until every record is delivered; emitRawCpuUs and emitHeldCpuUs per event while the job
 * runs, emitDeliveryCpuUs per record while the held outbox drains to the
 * file-log sink afterwards. On one core emitting with delivery in the same
 * process can reach at best about
 * emitRawCpuUs / (emitHeldCpuUs + emitDeliveryCpuUs) of the raw rate.
 *
 * Kafka: TIDEMARK_KAFKA_BROKERS, else librdkafka's mock cluster (bench/_kafka.ts).
 * Flags: --events (emit side), --records (delivery side), --rounds, --keys,
 * --batch (events per commit), --maxBatch (records per send).
 */
import { join } from 'node:path'
import { Partitioners, type Message } from 'kafkajs'
import { fileLogSink, formatRecordId, openFileLog, PartitionProcessor, RECORD_ID_HEADER, valueState, type EncodedRecords, type FileLog, type OutboxRecord, type OutputSink } from '../src/index.js'
import { kafkaSink } from '../connectors/kafka/index.js'
import { upstreamKey } from '../src/outputs/id.js'
import { saveFigures } from './_figures.js'
import { benchDir, emit, interleaved, intFlags, loadAvg, median, pairedRatio, prefixed, round } from './_util.js'
import { benchKafka, benchProducer } from './_kafka.js'

interface Line { word: string }
const counts = valueState<number>('counts')
const JOB = 'bench-outputs'
const SOURCE = 'lines'

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { events: 200_000, records: 50_000, rounds: 6, keys: 1000, batch: 1000, maxBatch: 500 })
  const loadAvgAtStart = loadAvg()
  const began = performance.now()
  const progress = (what: string): void => { process.stderr.write(`[outputs +${((performance.now() - began) / 1000).toFixed(1)}s] ${what}\n`) }
  const dir = benchDir('outputs')
  const kafka = benchKafka(join(dir.path, 'kafka-mock'))
  const { kafka: client, producer: setupProducer } = await benchProducer(kafka.brokers)
  await setupProducer.disconnect()
  try {
    const wordOf = (i: number): string => `w-${(Math.imul(i, 2654435761) >>> 0) % opts.keys}`
    const fill = async (log: FileLog, n: number): Promise<void> => {
      for (let i = 0; i < n; i += 10_000) {
        await Promise.all(Array.from({ length: Math.min(10_000, n - i) }, (_, j) => log.append(Buffer.from(JSON.stringify({ word: wordOf(i + j) })))))
      }
    }
    const source = await openFileLog(join(dir.path, 'source'), { sync: false })
    await fill(source, Math.max(opts.events, opts.records))

    let stores = 0
    const cpuUs = (since: NodeJS.CpuUsage): number => { const c = process.cpuUsage(since); return c.user + c.system }
    const processor = (emitTo: OutputSink | undefined, maxOutboxRecords?: number, topic = 'counts', maxBatchRecords = opts.maxBatch): PartitionProcessor<Line> => new PartitionProcessor<Line>({
      job: JOB, topic: SOURCE, partition: 0, log: source, path: join(dir.path, `store-${stores++}`), states: [counts], batchSize: opts.batch,
      ...(emitTo === undefined ? {} : { outputs: { sink: emitTo, maxBatchRecords, ...(maxOutboxRecords === undefined ? {} : { maxOutboxRecords }) } }),
      handler: emitTo === undefined
        ? (tx, line) => {
            const view = tx.value(counts)
            view.put(line.word, (view.getSync(line.word) ?? 0) + 1)
          }
        : (tx, line, ctx) => {
            const view = tx.value(counts)
            const count = (view.getSync(line.word) ?? 0) + 1
            view.put(line.word, count)
            ctx.emit({ topic, key: line.word, value: String(count) })
          },
    })

    // --- emitRatio: the same word count with and without emitting.
    let emitSinks = 0
    const drainSeconds: number[] = []
    const deliveredPerSec: number[] = []
    const rawCpu: number[] = []
    const processEvents = async (withEmit: boolean): Promise<number> => {
      const sink = withEmit ? fileLogSink({ dir: join(dir.path, `emitted-${emitSinks++}`), fileLog: { sync: false } }) : undefined
      const p = processor(sink)
      await p.start()
      const c0 = process.cpuUsage()
      const t0 = performance.now()
      await p.catchUp({ end: BigInt(opts.events) })
      const seconds = (performance.now() - t0) / 1000
      if (!withEmit) rawCpu.push(cpuUs(c0) / opts.events)
      if (withEmit) {
        await p.flushOutputs()
        const total = (performance.now() - t0) / 1000
        drainSeconds.push(total - seconds)
        deliveredPerSec.push(opts.events / total)
      }
      await p.close()
      await sink?.close()
      return opts.events / seconds
    }
    progress(`emit: ${opts.rounds} pairs of ${opts.events} events`)
    const emitting = await interleaved(opts.rounds, () => processEvents(false), () => processEvents(true), (raw, ours) => ours / raw)
    const emitDelivered = deliveredPerSec.map((d, r) => d / emitting.raw[r]!)
    // The emit and outbox writes alone: the sink is held shut while the job
    // runs (nothing is delivered in the background), opened after the clock.
    const heldCpu: number[] = []
    const drainCpu: number[] = []
    const processHeld = async (): Promise<number> => {
      let open!: () => void
      const opened = new Promise<void>((resolve) => { open = resolve })
      const sink = fileLogSink({ dir: join(dir.path, `emitted-${emitSinks++}`), fileLog: { sync: false } })
      const held: OutputSink = {
        name: sink.name,
        send: async (records) => { await opened; await sink.send(records) },
        // The publisher's call (fileLogSink takes the binary form): held the same way.
        sendEncoded: async (records) => { await opened; await sink.sendEncoded!(records) },
        close: () => sink.close(),
      }
      const p = processor(held, opts.events + 1)
      await p.start()
      const c0 = process.cpuUsage()
      const t0 = performance.now()
      await p.catchUp({ end: BigInt(opts.events) })
      const seconds = (performance.now() - t0) / 1000
      heldCpu.push(cpuUs(c0) / opts.events)
      const c1 = process.cpuUsage()
      open()
      await p.flushOutputs()
      drainCpu.push(cpuUs(c1) / opts.events)
      await p.close()
      await held.close()
      return opts.events / seconds
    }
    progress(`emit, sink held: ${opts.rounds} pairs of ${opts.events} events`)
    const emittingHeld = await interleaved(opts.rounds, () => processEvents(false), processHeld, (raw, ours) => ours / raw)

    // Created on first use (the mock refuses admin createTopics; it makes 4 partitions).
    const freshTopic = (side: string, r: number): string => {
      const topic = `bench-outputs-${side}-${r}-${process.pid}-${Date.now().toString(36)}`
      return topic
    }

    // --- eoRatio: the outbox job against what a user would run without it.
    // The direct job counts the same words and, after each commit of a
    // batch (the processor's 'commit' event), sends that batch's records
    // with a plain kafkajs producer: at-least-once, duplicates after every
    // crash. Sends are chained (one in flight, in order per key) while the
    // job goes on; the clock stops once every record is acknowledged.
    const directCpu: number[] = []
    const directIdCpu: number[] = []
    const outboxCpu: number[] = []
    // For information: the direct job also sending each record's id as the
    // outbox does (the tidemark-id header, the same text), to show what of
    // the gap is kafkajs encoding that header and what is the outbox.
    const idPrefix = upstreamKey(JOB, SOURCE, 0)
    // kafkaSink's producer settings (acks -1 below, no compression, kafkajs
    // has no linger): both jobs differ only in what Tidemark adds.
    const direct = client.producer({ allowAutoTopicCreation: true, idempotent: false, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner })
    await direct.connect()
    const directJob = async (r: number, withIds = false): Promise<number> => {
      const topic = freshTopic(withIds ? 'direct-ids' : 'direct', r)
      let pending: Message[] = []
      const p = new PartitionProcessor<Line>({
        job: JOB, topic: SOURCE, partition: 0, log: source, path: join(dir.path, `store-${stores++}`), states: [counts], batchSize: opts.batch,
        handler: (tx, line, ctx) => {
          const view = tx.value(counts)
          const count = (view.getSync(line.word) ?? 0) + 1
          view.put(line.word, count)
          pending.push(withIds
            ? { key: line.word, value: String(count), headers: { [RECORD_ID_HEADER]: Buffer.from(`${idPrefix}:${ctx.offset}:0`) } }
            : { key: line.word, value: String(count) })
        },
      })
      let sent: Promise<unknown> = Promise.resolve()
      let records = 0
      p.on('commit', () => {
        const messages = pending
        pending = []
        records += messages.length
        sent = sent.then(() => direct.send({ topic, acks: -1, messages }))
      })
      await p.start()
      const c0 = process.cpuUsage()
      const t0 = performance.now()
      await p.catchUp({ end: BigInt(opts.events) })
      await sent
      const seconds = (performance.now() - t0) / 1000
      ;(withIds ? directIdCpu : directCpu).push(cpuUs(c0) / opts.events)
      await p.close()
      if (records !== opts.events) throw new Error(`the direct job sent ${records} records for ${opts.events} events`)
      return opts.events / seconds
    }
    const eoSink = kafkaSink({ brokers: kafka.brokers })
    const outboxJob = async (r: number): Promise<number> => {
      // One send per committed batch, as the direct job makes: one produce
      // request each (until 2026-12 the outbox sent maxBatch records per
      // send, two requests per batch against the direct job's one).
      const p = processor(eoSink, undefined, freshTopic('outbox-job', r), opts.batch)
      await p.start()
      const c0 = process.cpuUsage()
      const t0 = performance.now()
      await p.catchUp({ end: BigInt(opts.events) })
      await p.flushOutputs()
      const seconds = (performance.now() - t0) / 1000
      outboxCpu.push(cpuUs(c0) / opts.events)
      await p.close()
      return opts.events / seconds
    }
    progress(`exactly-once: ${opts.rounds} pairs of ${opts.events} events, each record delivered to Kafka`)
    const directIdPerSec: number[] = []
    const bothDirect = async (r: number): Promise<number> => {
      const plain = await directJob(r)
      directIdPerSec.push(await directJob(r, true))
      return plain
    }
    const eo = await interleaved(opts.rounds, bothDirect, outboxJob, (raw, ours) => ours / raw)
    const eoId = pairedRatio(eo.measured.map((ours, r) => ours / directIdPerSec[r]!))
    await direct.disconnect()
    await eoSink.close()

    // --- deliveryRatio: outbox → kafkaSink vs a plain producer, the same records.
    // The records the outbox holds after `records` events: the same bytes, ids included.
    const plainMessages = (): Message[] => {
      const seen = new Map<string, number>()
      return Array.from({ length: opts.records }, (_, i) => {
        const word = wordOf(i)
        const count = (seen.get(word) ?? 0) + 1
        seen.set(word, count)
        const id = formatRecordId({ job: JOB, topic: SOURCE, partition: 0, offset: BigInt(i), index: 0 })
        return { key: Buffer.from(word), value: Buffer.from(String(count)), headers: { [RECORD_ID_HEADER]: Buffer.from(id) } }
      })
    }
    const messages = plainMessages()
    // kafkaSink's producer: not idempotent, one request in flight, the default partitioner.
    const plain = client.producer({ allowAutoTopicCreation: true, idempotent: false, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner })
    await plain.connect()
    const sink = kafkaSink({ brokers: kafka.brokers })
    const rawSend = async (r: number): Promise<number> => {
      const topic = freshTopic('raw', r)
      const t0 = performance.now()
      for (let i = 0; i < messages.length; i += opts.maxBatch) {
        await plain.sendBatch({ acks: -1, topicMessages: [{ topic, messages: messages.slice(i, i + opts.maxBatch) }] })
      }
      return opts.records / ((performance.now() - t0) / 1000)
    }
    const sinkShares: number[] = []
    const outboxSend = async (r: number): Promise<number> => {
      const topic = freshTopic('outbox', r)
      let inSink = 0
      // Held shut while the outbox fills, then opened: only delivery is timed.
      let open!: () => void
      const opened = new Promise<void>((resolve) => { open = resolve })
      const held: OutputSink = {
        name: sink.name,
        send: async (records: readonly OutboxRecord[]) => { await opened; const t = performance.now(); await sink.send(records); inSink += performance.now() - t },
        // The publisher's call (kafkaSink takes the binary form): held and timed the same way.
        sendEncoded: async (records: EncodedRecords) => { await opened; const t = performance.now(); await sink.sendEncoded!(records); inSink += performance.now() - t },
        close: async () => undefined,
      }
      const p = processor(held, opts.records + 1, topic)
      await p.start()
      await p.catchUp({ end: BigInt(opts.records) })
      const t0 = performance.now()
      open()
      await p.flushOutputs()
      const seconds = (performance.now() - t0) / 1000
      sinkShares.push(inSink / 1000 / seconds)
      await p.close()
      return opts.records / seconds
    }
    // One warm-up send each (connections, metadata) before the timed rounds.
    await rawSend(-1)
    progress(`delivery: ${opts.rounds} pairs of ${opts.records} records`)
    const delivery = await interleaved(opts.rounds, rawSend, outboxSend, (raw, ours) => ours / raw)
    await plain.disconnect()
    await sink.close()

    const result = {
      bench: 'outputs',
      ...prefixed('eoRatio', eo),
      eoPerSec: Math.round(median(eo.measured)),
      eoRaw: `the same word count without outputs, sending each committed batch's records (${opts.batch}) to Kafka with a plain kafkajs producer (kafkaSink's settings) after its commit (at-least-once), one send in flight; the outbox job sends one batch per send too`,
      eoRawPerSec: Math.round(median(eo.raw)),
      eoCpuUs: round(median(outboxCpu)), eoRawCpuUs: round(median(directCpu)),
      ...prefixed('eoIdRatio', eoId),
      eoIdRaw: 'the direct job sending each record with its tidemark-id header, as the outbox does (for information: the rest of eoRatio\'s gap is the outbox)',
      eoIdRawPerSec: Math.round(median(directIdPerSec)), eoIdRawCpuUs: round(median(directIdCpu)),
      emitRatio: emitting.ratio, emitRatioMin: emitting.ratioMin, emitRatioMax: emitting.ratioMax, emitRatios: emitting.ratios,
      emitPerSec: Math.round(median(emitting.measured)),
      emitRaw: 'the same PartitionProcessor word count without outputs and without emit',
      emitRawPerSec: Math.round(median(emitting.raw)),
      emitSink: 'fileLogSink (sync: false), delivering in the background',
      ...prefixed('emitDeliveredRatio', pairedRatio(emitDelivered)),
      emitDrainMs: Math.round(median(drainSeconds) * 1000),
      ...prefixed('emitHeldRatio', emittingHeld), emitHeldPerSec: Math.round(median(emittingHeld.measured)),
      deliveryRatio: delivery.ratio, deliveryRatioMin: delivery.ratioMin, deliveryRatioMax: delivery.ratioMax, deliveryRatios: delivery.ratios,
      deliveredPerSec: Math.round(median(delivery.measured)),
      deliverySinkShare: round(median(sinkShares)),
      deliveryRaw: `a plain kafkajs producer (idempotent: false, maxInFlightRequests: 1, acks: -1), the same records in sendBatch calls of ${opts.maxBatch}, one after the other`,
      deliveryRawPerSec: Math.round(median(delivery.raw)),
      rounds: opts.rounds, events: opts.events, records: opts.records, keys: opts.keys, batch: opts.batch, maxBatchRecords: opts.maxBatch,
      emitRawCpuUs: round(median(rawCpu)), emitHeldCpuUs: round(median(heldCpu)), emitDeliveryCpuUs: round(median(drainCpu)),
      kafka: kafka.kind, loadAvgAtStart, loadAvgAtEnd: loadAvg(), node: process.version,
    }
    emit(result)
    saveFigures('outputs', args, result)
  } finally {
    kafka.stop()
    dir.cleanup()
  }
}

