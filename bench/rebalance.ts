/**
 * Rebalance hand-off of StatefulConsumer (tidemark/kafka) on the Kafka mock,
 * with radosgw as the snapshot store and --size-mb MiB (default 100) of state
 * in each of the topic's 4 partitions.
 *
 *   npm run bench -- rebalance [--size-mb 100] [--rounds 3] [--value-bytes 4000] [--burst 2000] [--batch 1000] [--max-wait-ms N]
 *
 * A member X holds the 4 partitions; a member Y with an empty state
 * directory joins and the group moves 2 of them to it. Per moved partition,
 * handoffMs runs from the revocation (X's GROUP_JOIN, the first moment
 * kafkajs tells the old owner) to the first commit by Y of a record that X
 * had not committed. Before each hand-off X has applied a burst of --burst
 * records (100 bytes each) per partition since the partition's previous snapshot; a trickle of
 * records to every partition goes on all along, so there is always a record
 * to process. Y then leaves (close(): its hand-off snapshots take the
 * partitions back to X) and the next round begins.
 *
 * Raw sides, each interleaved with the round it is paired with:
 * - plainRestoreMs: restoreSnapshot() of exactly the snapshots Y restored,
 *   all moved partitions at once as Y restores them, into fresh directories
 *   (a round's pair ratio is handoffMs / plainRestoreMs of that partition);
 * - rawRebalanceMs: the same join with plain kafkajs consumers (no state), from
 *   the old member's GROUP_JOIN to the new member's first batch of a moved
 *   partition: what the group protocol and the fetch cost by themselves;
 * - rawColdStartMs: a plain kafkajs consumer in a new group, start to first
 *   record, next to coldStartMs: a StatefulConsumer with an empty state
 *   directory, start to its first commit (join, claims, restore of every
 *   partition's snapshot, fetch).
 * The same rounds run without a hand-off snapshot (noHandoff: the new owner
 * restores the partition's previous snapshot and replays the rest).
 *
 * Diagnosis: REBALANCE_TRACE=1 prints each moved partition's steps (old
 * owner's close, new owner's start) in ms after its revocation on stderr;
 * REBALANCE_ONLY=handoff (or noHandoff) runs that mode alone, without the
 * cold starts, and prints its pairs without saving a result.
 *
 * Kafka: TIDEMARK_KAFKA_BROKERS, or librdkafka's mock started here. S3:
 * TIDEMARK_S3_ENDPOINT (see bench/snapshot.ts), or a radosgw started here.
 */
import { EventEmitter } from 'node:events'
import { rm } from 'node:fs/promises'
import { loadavg } from 'node:os'
import { join } from 'node:path'
import { Kafka, logLevel, type Consumer } from 'kafkajs'
import { StatefulConsumer, type PartitionClosed, type PartitionStarted } from '../connectors/kafka/index.js'
import { PartitionStore, rawCodec, restoreSnapshot, valueState, type SnapshotStore } from '../src/index.js'
import { benchKafka, benchProducer, countingSockets, median } from './_kafka.js'
import { saveFigures } from './_figures.js'
import { benchDir, emit, intFlags, rng, round } from './_util.js'
import { benchS3, valueSource } from './snapshot.js'

const MiB = 1024 * 1024
const PARTITIONS = [0, 1, 2, 3]
const TRICKLE_MS = 200
const kv = valueState('kv', { codec: rawCodec() })
const GROUP_TIMING = { sessionTimeout: 10_000, rebalanceTimeout: 10_000, heartbeatInterval: 1000 }

interface Member {
  name: string
  consumer: StatefulConsumer<Uint8Array>
  /** When each partition was revoked here (the assignment event that took it away). */
  revokedAt: Map<number, number>
  started: Map<number, PartitionStarted & { at: number }>
  closed: Map<number, PartitionClosed & { at: number }>
  /** Every commit since the member started: when, and the offset committed. */
  commits: Map<number, Array<{ at: number; offset: bigint }>>
  failures: unknown[]
  sockets(): number
}

interface Pair {
  mode: 'handoff' | 'noHandoff'
  round: number
  partition: number
  handoffMs: number
  plainRestoreMs: number
  ratio: number
  replayedEvents: number
  /** Y's join call to X's revocation. */
  rejoinMs: number
  /** X's hand-off (snapshot) after the revocation, as its partition-closed event says. */
  oldOwnerMs: number
  /** Revocation to Y's partition-started (claim wait + restore + open). */
  newOwnerStartedMs: number
  /** Y's partition-started to its first commit of a new record (seek, fetch, replay, apply). */
  toFirstNewMs: number
  restoreSource: string
  bytesDownloaded: number
  handoffSnapshotBytes: number | undefined
}

export async function run(args: string[]): Promise<void> {
  const opts = intFlags(args, { 'size-mb': 100, rounds: 3, 'value-bytes': 4000, burst: 2000, batch: 1000, 'max-wait-ms': 0 })
  // 0: the StatefulConsumer's default fetch wait; else this one (the fetch-wait trade-off against `npm run bench -- idle --max-wait-ms N`).
  const fetchWait = opts['max-wait-ms'] === 0 ? {} : { maxWaitTimeInMs: opts['max-wait-ms'] }
  const loadAvgAtStart = loadavg().map((l) => round(l, 2))
  const began = performance.now()
  // Progress on stderr; stdout carries only the result line.
  const log = (what: string): void => { process.stderr.write(`[rebalance +${((performance.now() - began) / 1000).toFixed(1)}s] ${what}\n`) }
  const dir = benchDir('rebalance')
  const kafka = benchKafka(join(dir.path, 'kafka-mock'))
  const s3 = await benchS3('bench-rebalance')
  const { producer } = await benchProducer(kafka.brokers)
  const changes = new EventEmitter()
  changes.setMaxListeners(0)
  const changed = (): void => { changes.emit('change') }
  const members: Member[] = []
  const rawConsumers: Consumer[] = []
  let trickle: NodeJS.Timeout | undefined
  try {
    const topic = `bench-rebalance-${process.pid}-${Date.now().toString(36)}`
    const groupId = `bench-rebalance-${Date.now().toString(36)}`
    const snapshotStore: SnapshotStore = s3.store('rebalance')
    const value = valueSource(opts['value-bytes'], 7)
    const keyOf = (i: number): string => `k-${i.toString().padStart(9, '0')}`
    const keys = Math.ceil((opts['size-mb'] * MiB) / (opts['value-bytes'] + 11))
    const next = rng(13)
    const produced = new Map<number, bigint>()
    const send = async (partition: number, messages: Array<{ key: string; value: Buffer }>): Promise<void> => {
      const [meta] = await producer.send({ topic, acks: -1, messages: messages.map((m) => ({ ...m, partition })) })
      const last = BigInt(meta!.baseOffset!) + BigInt(messages.length - 1)
      if (last > (produced.get(partition) ?? -1n)) produced.set(partition, last)
    }

    /** Waits for `cond`, looking again at every event of a member (and at least once a second). */
    const until = async (what: string, cond: () => boolean, timeoutMs = 900_000): Promise<void> => {
      const deadline = performance.now() + timeoutMs
      let report = performance.now() + 10_000
      while (!cond()) {
        if (performance.now() > report) {
          report += 10_000
          log(`waiting for ${what}: produced ${PARTITIONS.map((p) => produced.get(p) ?? -1n).join(',')}; ${members.map((m) => `${m.name} at ${PARTITIONS.map((p) => position(m, p)).join(',')} running ${running(m).join(',')}`).join('; ')}`)
        }
        for (const m of members) if (m.failures.length > 0) throw new Error(`${m.name}: a partition failed while waiting for ${what}`, { cause: m.failures[0] })
        const left = deadline - performance.now()
        if (left <= 0) throw new Error(`timed out waiting for ${what}`)
        await new Promise<void>((resolve) => {
          const done = (): void => { clearTimeout(timer); changes.off('change', done); resolve() }
          const timer = setTimeout(done, Math.min(left, 1000))
          changes.on('change', done)
        })
      }
    }

    // REBALANCE_TRACE=1: the steps of each moved partition's close (old
    // owner) and start (new owner), in ms after its revocation, on stderr.
    const trace = process.env.REBALANCE_TRACE === '1'
    const steps: Array<{ member: string; partition: number; what: string; step: string; at: number }> = []
    const traceLogger = (name: string) => ({
      debug: (fields: { partition?: number; step?: string; at?: number }, message: string) => {
        if (fields.step !== undefined && fields.at !== undefined && fields.partition !== undefined) steps.push({ member: name, partition: fields.partition, what: message, step: fields.step, at: fields.at })
      },
      info: () => undefined, warn: () => undefined, error: () => undefined,
    })
    const member = (name: string, handoffSnapshot: boolean, group = groupId): Member => {
      const sockets = countingSockets()
      const consumer = new StatefulConsumer<Uint8Array>({
        job: 'bench', groupId: group, brokers: kafka.brokers, topics: [topic], stateDir: join(dir.path, name), states: [kv], codec: rawCodec(),
        handler: (tx, record) => { if (record.value !== null) tx.value(kv).put(record.key ?? String(record.offset), record.value) },
        batchSize: opts.batch,
        // No scheduled snapshots: the hand-off snapshots (and close()'s) are the only ones, so each round knows what its snapshot holds.
        snapshots: { store: snapshotStore, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
        handoff: { snapshot: handoffSnapshot },
        // The cold hand-off: Y restores the snapshots themselves, as the plain restore it is paired with does (scaleout measures warm-ups).
        warmup: false,
        // Shorter than kafkajs's 30 s / 60 s: librdkafka's mock then completes
        // a rebalance sooner. The fetch wait is the default unless --max-wait-ms.
        consumer: { ...GROUP_TIMING, ...fetchWait },
        kafka: { socketFactory: sockets.socketFactory },
        ...(trace ? { logger: traceLogger(name) } : {}),
      })
      const m: Member = { name, consumer, revokedAt: new Map(), started: new Map(), closed: new Map(), commits: new Map(), failures: [], sockets: sockets.opened }
      consumer.on('assignment', ({ revoked }) => { for (const tp of revoked) m.revokedAt.set(tp.partition, performance.now()); changed() })
      consumer.on('partition-started', (info) => { m.started.set(info.partition, { ...info, at: performance.now() }); changed() })
      consumer.on('partition-closed', (info) => { m.closed.set(info.partition, { ...info, at: performance.now() }); changed() })
      consumer.on('commit', ({ partition, offset }) => {
        let list = m.commits.get(partition)
        if (list === undefined) m.commits.set(partition, list = [])
        list.push({ at: performance.now(), offset })
        changed()
      })
      consumer.on('partition-failed', (failure) => { m.failures.push(failure); changed() })
      members.push(m)
      return m
    }
    const position = (m: Member, partition: number): bigint => m.commits.get(partition)?.at(-1)?.offset ?? m.started.get(partition)?.position ?? -1n
    const running = (m: Member): number[] => m.consumer.partitions().filter((p) => p.state === 'running').map((p) => p.partition)
    const caughtUp = (m: Member, target: Map<number, bigint>): boolean => PARTITIONS.every((p) => position(m, p) >= (target.get(p) ?? -1n))
    const close = async (m: Member): Promise<void> => {
      await m.consumer.close()
      members.splice(members.indexOf(m), 1)
    }

    // 1. The state. Producing and folding --size-mb MiB per partition through
    // the mock would take minutes on this machine and measures nothing this
    // bench is about, so the state is written straight into X's partition
    // stores (distinct keys, incompressible values) at the position of the
    // last of a few records produced first, as if X had folded them; X then
    // starts on those stores and its close() takes the first, full snapshot
    // of every partition.
    const t0 = performance.now()
    await Promise.all(PARTITIONS.map((partition) => send(partition, Array.from({ length: 10 }, (_, i) => ({ key: keyOf(i), value: value(i, 0) })))))
    for (const partition of PARTITIONS) {
      const store = await PartitionStore.open({ path: join(dir.path, 'x', `${topic}-${partition}`), states: [kv] })
      for (let i = 0; i < keys; i += 1000) {
        const tx = store.transaction()
        for (let j = i; j < Math.min(keys, i + 1000); j++) tx.value(kv).put(keyOf(j), value(j + partition * keys, 0))
        await tx.commitWithoutPosition()
      }
      const tx = store.transaction()
      tx.value(kv).put('#loaded', value(0, 0))
      await tx.commit({ topic, partition, offset: produced.get(partition)! })
      await store.close()
    }
    const loadSeconds = (performance.now() - t0) / 1000
    log(`wrote ${keys} keys of ${opts['value-bytes']} bytes into each of ${PARTITIONS.length} partition stores`)
    let x = member('x', true)
    const t1 = performance.now()
    await x.consumer.start()
    await until('the first member to start', () => running(x).length === PARTITIONS.length)
    await close(x)
    const baseSnapshotSeconds = (performance.now() - t1) / 1000
    log('full snapshots taken')

    let version = 1
    // One small record to every partition each TRICKLE_MS, in one request.
    trickle = setInterval(() => {
      const messages = PARTITIONS.map((partition) => ({ partition, key: keyOf(Math.floor(next() * keys)), value: value(partition, version).subarray(0, 100) }))
      producer.send({ topic, acks: -1, messages }).then((metas) => {
        for (const meta of metas) {
          const last = BigInt(meta.baseOffset!)
          if (last > (produced.get(meta.partition) ?? -1n)) produced.set(meta.partition, last)
        }
      }, () => undefined)
    }, TRICKLE_MS)
    trickle.unref()

    // 2. The plain kafkajs group beside it: the floor that the group protocol and a fetch set.
    const rawGroup = `${groupId}-raw`
    const rawMember = async (): Promise<{ consumer: Consumer; firstBatch: Map<number, number>; revokedAt: Map<number, number>; sockets(): number }> => {
      const sockets = countingSockets()
      const consumer = new Kafka({ brokers: kafka.brokers, clientId: 'bench-raw', logLevel: logLevel.NOTHING, socketFactory: sockets.socketFactory }).consumer({ groupId: rawGroup, ...GROUP_TIMING })
      const firstBatch = new Map<number, number>()
      const revokedAt = new Map<number, number>()
      let previous = new Set<number>()
      consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
        const now = new Set(payload.memberAssignment[topic] ?? [])
        for (const p of previous) if (!now.has(p)) revokedAt.set(p, performance.now())
        previous = now
        changed()
      })
      await consumer.connect()
      await consumer.subscribe({ topics: [topic], fromBeginning: false })
      await consumer.run({
        eachBatch: async ({ batch }) => {
          if (batch.messages.length > 0 && !firstBatch.has(batch.partition)) { firstBatch.set(batch.partition, performance.now()); changed() }
        },
      })
      rawConsumers.push(consumer)
      return { consumer, firstBatch, revokedAt, sockets: sockets.opened }
    }
    const rawOld = await rawMember()

    const pairs: Pair[] = []
    const rawRebalanceMs: number[] = []
    const rawRejoinMs: number[] = []
    let yCount = 0
    // REBALANCE_ONLY=handoff (a diagnosis run): that mode alone, no cold start, nothing saved.
    const only = process.env.REBALANCE_ONLY as Pair['mode'] | undefined
    for (const mode of (['noHandoff', 'handoff'] as const).filter((m) => only === undefined || m === only)) {
      x = member('x', mode === 'handoff')
      await x.consumer.start()
      await until('X to hold every partition', () => running(x).length === PARTITIONS.length)
      for (let r = 0; r < opts.rounds; r++) {
        // Raw: a plain member joins the plain group and takes partitions from the old one.
        rawOld.revokedAt.clear()
        const rawJoinAt = performance.now()
        const rawNew = await rawMember()
        await until('the plain hand-off', () => rawOld.revokedAt.size > 0 && [...rawOld.revokedAt.keys()].every((p) => rawNew.firstBatch.has(p)))
        for (const [p, at] of rawOld.revokedAt) rawRebalanceMs.push(rawNew.firstBatch.get(p)! - at)
        rawRejoinMs.push(Math.min(...rawOld.revokedAt.values()) - rawJoinAt)
        await rawNew.consumer.disconnect()
        rawConsumers.splice(rawConsumers.indexOf(rawNew.consumer), 1)
        log(`${mode} round ${r}: plain kafkajs hand-off measured`)

        // Ours: a burst since the last snapshot, then Y joins with an empty state directory.
        version++
        await Promise.all(PARTITIONS.map(async (partition) => {
          for (let i = 0; i < opts.burst; i += 250) {
            const messages = []
            for (let j = i; j < Math.min(opts.burst, i + 250); j++) {
              // Small values: librdkafka's mock keeps only a few MiB per
              // partition, and the round without a hand-off snapshot must
              // replay everything since the previous snapshot from the log.
              const k = Math.floor(next() * keys)
              messages.push({ key: keyOf(k), value: value(k, version).subarray(0, 100) })
            }
            await send(partition, messages)
          }
        }))
        const burstEnd = new Map(produced)
        await until('X to apply the burst', () => caughtUp(x, burstEnd))
        x.revokedAt.clear()
        x.closed.clear()
        const y = member(`y-${yCount++}`, mode === 'handoff')
        const joinAt = performance.now()
        await y.consumer.start()
        log(`${mode} round ${r}: Y joined`)
        await until('a revocation', () => x.revokedAt.size > 0)
        const moved = [...x.revokedAt.keys()].sort()
        const firstNew = (p: number): { at: number; offset: bigint } | undefined => {
          const closed = x.closed.get(p)
          return closed === undefined ? undefined : y.commits.get(p)?.find((c) => c.offset > (closed.position ?? -1n))
        }
        await until('the new owner to process a new record of every moved partition', () => moved.every((p) => firstNew(p) !== undefined))

        log(`${mode} round ${r}: Y processed new records of partitions ${moved.join(', ')}`)
        // Raw: restoreSnapshot() of exactly the snapshots Y restored, all at once as Y did.
        const plainStart = performance.now()
        const plain = await Promise.all(moved.map(async (p) => {
          const started = y.started.get(p)!
          if (started.snapshot === undefined) return NaN
          const target = join(dir.path, `plain-${mode}-${r}-${p}`)
          await restoreSnapshot({ snapshotStore, job: 'bench', partition: `${topic}-${p}`, target, snapshot: started.snapshot, useLocal: false })
          const ms = performance.now() - plainStart
          await rm(target, { recursive: true, force: true })
          return ms
        }))
        if (trace) {
          for (const p of moved) {
            const at = x.revokedAt.get(p)!
            const line = steps.filter((s) => s.partition === p && s.at >= at - 50 && (s.member === x.name || s.member === y.name))
              .map((s) => `${s.member} ${s.what.replace('partition ', '')} ${s.step} ${Math.round(s.at - at)}`)
            const h = x.closed.get(p)?.handoff
            log(`${mode} round ${r} partition ${p}: ${line.join(', ')}; hand-off snapshot stall ${Math.round(h?.stallMs ?? -1)} upload ${Math.round(h?.uploadMs ?? -1)} bytes ${h?.bytesUploaded} gc ${h?.gc !== undefined}; first new commit ${Math.round(firstNew(p)!.at - at)}, plain restore ${Math.round(plain[moved.indexOf(p)]!)}`)
          }
        }
        moved.forEach((p, i) => {
          const revokedAt = x.revokedAt.get(p)!
          const started = y.started.get(p)!
          const closed = x.closed.get(p)!
          const first = firstNew(p)!
          const handoffMs = first.at - revokedAt
          pairs.push({
            mode, round: r, partition: p,
            handoffMs: round(handoffMs, 1),
            plainRestoreMs: round(plain[i]!, 1),
            ratio: round(handoffMs / plain[i]!),
            replayedEvents: Number((closed.position ?? -1n) - (started.position ?? -1n)),
            rejoinMs: round(revokedAt - joinAt, 1),
            oldOwnerMs: round(closed.at - revokedAt, 1),
            newOwnerStartedMs: round(started.at - revokedAt, 1),
            toFirstNewMs: round(first.at - started.at, 1),
            restoreSource: started.source,
            bytesDownloaded: started.bytesDownloaded,
            handoffSnapshotBytes: closed.handoff?.bytesUploaded,
          })
        })

        // Y leaves; its close() hands the partitions back to X.
        await close(y)
        await rm(join(dir.path, y.name), { recursive: true, force: true })
        log(`${mode} round ${r}: Y left`)
        const end = new Map(produced)
        await until('X to hold every partition again', () => running(x).length === PARTITIONS.length && caughtUp(x, end))
      }
      await close(x)
    }
    // 3. Cold starts: a plain kafkajs consumer in a new group, then a
    // StatefulConsumer with an empty state directory, interleaved.
    const cold: Array<{ raw: number; ours: number; oursAll: number; restoreMs: number; sockets: number; rawSockets: number }> = []
    if (only !== undefined) {
      emit({ bench: 'rebalance-diagnosis', only, pairs: pairs.map((p) => ({ ratio: p.ratio, handoffMs: round(p.handoffMs), plainRestoreMs: round(p.plainRestoreMs), oldOwnerMs: round(p.oldOwnerMs), toFirstNewMs: round(p.toFirstNewMs) })) })
      return
    }
    for (let r = 0; r < opts.rounds; r++) {
      const rawSockets = countingSockets()
      const raw = new Kafka({ brokers: kafka.brokers, clientId: 'bench-raw', logLevel: logLevel.NOTHING, socketFactory: rawSockets.socketFactory }).consumer({ groupId: `${groupId}-cold-${r}`, ...GROUP_TIMING })
      let rawFirst: number | undefined
      const rawStart = performance.now()
      await raw.connect()
      await raw.subscribe({ topics: [topic], fromBeginning: true })
      await raw.run({ eachBatch: async ({ batch }) => { if (batch.messages.length > 0 && rawFirst === undefined) { rawFirst = performance.now(); changed() } } })
      rawConsumers.push(raw)
      await until('the plain cold start', () => rawFirst !== undefined)
      await raw.disconnect()
      rawConsumers.splice(rawConsumers.indexOf(raw), 1)

      const z = member(`z-${r}`, true, `${groupId}-cold-ours-${r}`)
      const start = performance.now()
      await z.consumer.start()
      await until('the cold start', () => PARTITIONS.every((p) => (z.commits.get(p)?.length ?? 0) > 0))
      const firsts = PARTITIONS.map((p) => z.commits.get(p)![0]!.at)
      cold.push({
        raw: rawFirst! - rawStart,
        ours: Math.min(...firsts) - start,
        oursAll: Math.max(...firsts) - start,
        restoreMs: Math.max(...PARTITIONS.map((p) => z.started.get(p)!.restoreMs)),
        sockets: z.sockets(),
        rawSockets: rawSockets.opened(),
      })
      log(`cold start ${r} measured`)
      await close(z)
      await rm(join(dir.path, z.name), { recursive: true, force: true })
    }

    const summary = (mode: Pair['mode']) => {
      const ps = pairs.filter((p) => p.mode === mode)
      const ratios = ps.map((p) => p.ratio)
      return {
        handoffMs: round(median(ps.map((p) => p.handoffMs)), 1),
        plainRestoreMs: round(median(ps.map((p) => p.plainRestoreMs)), 1),
        handoffRatio: round(median(ratios)),
        handoffRatioMin: round(Math.min(...ratios)),
        handoffRatioMax: round(Math.max(...ratios)),
        replayedEvents: Math.max(...ps.map((p) => p.replayedEvents)),
        breakdownMs: {
          rejoin: round(median(ps.map((p) => p.rejoinMs)), 1),
          oldOwnerHandoff: round(median(ps.map((p) => p.oldOwnerMs)), 1),
          newOwnerStarted: round(median(ps.map((p) => p.newOwnerStartedMs)), 1),
          toFirstNewRecord: round(median(ps.map((p) => p.toFirstNewMs)), 1),
        },
      }
    }
    const ours = summary('handoff')
    const result = {
      bench: 'rebalance',
      ...ours,
      batchSize: opts.batch,
      coldStartMs: round(median(cold.map((c) => c.ours)), 1),
      coldStartAllPartitionsMs: round(median(cold.map((c) => c.oursAll)), 1),
      coldStartRestoreMs: round(median(cold.map((c) => c.restoreMs)), 1),
      rawColdStartMs: round(median(cold.map((c) => c.raw)), 1),
      rawRebalanceMs: round(median(rawRebalanceMs), 1),
      rawRejoinMs: round(median(rawRejoinMs), 1),
      partitions: PARTITIONS.length,
      handedOffPerRound: pairs.filter((p) => p.mode === 'handoff' && p.round === 0).length,
      kafkaConnections: Math.max(...cold.map((c) => c.sockets)),
      rawKafkaConnections: Math.max(...cold.map((c) => c.rawSockets)),
      noHandoff: summary('noHandoff'),
      sizeMb: opts['size-mb'],
      valueBytes: opts['value-bytes'],
      burst: opts.burst,
      rounds: opts.rounds,
      maxWaitTimeInMs: opts['max-wait-ms'] === 0 ? 'default' : opts['max-wait-ms'],
      loadSeconds: round(loadSeconds, 1),
      baseSnapshotSeconds: round(baseSnapshotSeconds, 1),
      kafka: kafka.kind,
      loadAvgAtStart,
      node: process.version,
      pairs,
      cold: cold.map((c) => ({ raw: round(c.raw, 1), ours: round(c.ours, 1), oursAll: round(c.oursAll, 1), restoreMs: round(c.restoreMs, 1) })),
    }
    emit(result)
    saveFigures('rebalance', args, result)
  } finally {
    if (trickle !== undefined) clearInterval(trickle)
    await Promise.allSettled(members.map((m) => m.consumer.close()))
    await Promise.allSettled(rawConsumers.map((c) => c.disconnect()))
    await producer.disconnect().catch(() => undefined)
    await s3.close()
    kafka.stop()
    dir.cleanup()
  }
}
