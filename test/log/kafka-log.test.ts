import { Kafka, logLevel } from 'kafkajs'
import { describe, expect, it, type TestContext } from 'vitest'
import { KAFKA_LOG_DEFAULTS, openKafkaLog, type KafkaLog, type KafkaLogOptions } from '../../connectors/kafka/index.js'
import { RecordEffectRule, type RecordMeta } from '../../connectors/kafka/record-effect.js'
import { NO_REVISION, type LogEntry, type RevisionedLog } from '../../src/log/index.js'
import { kafkaService, serviceKinds } from '../helpers/services.js'
import { randomName } from '../helpers/tmp.js'
import { revisionedLogSuite } from '../../src/testing/index.js'

// librdkafka's mock answers a fetch that waits at the tail only when its
// wait is over, so a short wait keeps reads quick there.
const FAST = { fetchWaitMs: 5 } satisfies Partial<KafkaLogOptions>

async function openLog(context: TestContext, topic: string, extra: Partial<KafkaLogOptions> = {}): Promise<KafkaLog> {
  const log = await openKafkaLog({ brokers: kafkaService().brokers, topic, ...FAST, ...extra })
  context.onTestFinished(() => log.close())
  return log
}

// Concurrently: each test's first read waits for a group join.
revisionedLogSuite({
  test: it.concurrent,
  describe,
  name: 'Kafka log',
  async create() {
    const topic = randomName('log')
    // A duplicate window shorter than the suite's truncation distance.
    const options = { brokers: kafkaService().brokers, topic, ...FAST, dedupeWindow: 2 }
    return { log: await openKafkaLog(options), reopen: () => openKafkaLog(options) }
  },
  supports: { truncate: serviceKinds().kafka !== 'mock' },
})

async function readAll(log: RevisionedLog, from = 0n): Promise<LogEntry[]> {
  const out: LogEntry[] = []
  for await (const e of log.read(from)) out.push(e)
  return out
}

const meta = (offset: number, writer?: string, seq?: number, basis?: number): RecordMeta => ({
  offset: BigInt(offset),
  writer,
  seq: seq === undefined ? undefined : BigInt(seq),
  basis: basis === undefined ? undefined : BigInt(basis),
})

describe('the Kafka verdict rule (record-effect.ts)', () => {
  it('a conditional record takes effect only if nothing took effect between its basis and itself', () => {
    const rule = new RecordEffectRule(-1n, 100)
    expect(rule.takesEffect(meta(0, 'a', 1, -1))).toBe(true)
    expect(rule.takesEffect(meta(1, 'b', 1, -1))).toBe(false) // based before 0
    expect(rule.takesEffect(meta(2, 'b', 2, 0))).toBe(true) // 1 lost, so nothing lies between 0 and 2
    expect(rule.takesEffect(meta(3, 'a', 2, 0))).toBe(false)
    expect(rule.takesEffect(meta(4))).toBe(true) // a plain record
    expect(rule.takesEffect(meta(5, 'a', 3, 9))).toBe(false) // a basis after itself
    expect(rule.lastEffective).toBe(4n)
  })

  it('skips a copy of a (writer, seq) pair within the window, and only there', () => {
    const rule = new RecordEffectRule(-1n, 3)
    expect(rule.takesEffect(meta(0, 'w', 1))).toBe(true)
    expect(rule.takesEffect(meta(1, 'w', 2))).toBe(true)
    expect(rule.takesEffect(meta(2, 'w', 1))).toBe(false)
    expect(rule.takesEffect(meta(3, 'x', 1))).toBe(true)
    expect(rule.takesEffect(meta(4, 'w', 1))).toBe(false) // the copy at 2 is within 3 offsets
    expect(rule.takesEffect(meta(8, 'w', 1))).toBe(true) // nothing of (w, 1) in 5..7
  })

  it('a reader that starts mid-log after an effective record reaches the verdicts of one that read everything', () => {
    // Random histories of conditional, unconditional and duplicated records.
    let seed = 42
    const random = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return seed % n
    }
    for (let round = 0; round < 200; round++) {
      const window = 1 + random(6)
      const records: RecordMeta[] = []
      const seqs = new Map<string, number>()
      for (let offset = 0; offset < 60; offset++) {
        const kind = random(4)
        if (kind === 0 && records.length > 0) {
          const copy = records[records.length - 1 - random(Math.min(records.length, window + 2))]!
          records.push({ ...copy, offset: BigInt(offset) })
          continue
        }
        const writer = `w${random(3)}`
        const seq = (seqs.get(writer) ?? 0) + 1
        seqs.set(writer, seq)
        records.push(meta(offset, writer, seq, kind === 1 ? undefined : offset - 1 - random(3)))
      }
      const full = new RecordEffectRule(-1n, window)
      const verdicts = records.map((r) => full.takesEffect(r))
      for (let start = 1; start < records.length; start++) {
        if (!verdicts[start - 1]) continue
        const late = new RecordEffectRule(BigInt(start - 1), window)
        for (const r of records.slice(Math.max(0, start - window), start)) late.remember(r)
        expect(records.slice(start).map((r) => late.takesEffect(r)), `round ${round} from ${start}`).toEqual(verdicts.slice(start))
      }
    }
  })
})

// Concurrent: the first read of each log waits about 3 s for its consumer group.
describe.concurrent('Kafka log', () => {
  it('skips a duplicate that a producer retry wrote, for readers starting anywhere', async (context) => {
    const { expect } = context
    const topic = randomName('log')
    const log = await openLog(context, topic, { dedupeWindow: 10 })
    const a = await log.append(Buffer.from('once'))
    await log.append(Buffer.from('other'))
    // What a retried produce leaves behind: the same record, headers and all, again.
    const kafka = new Kafka({ brokers: kafkaService().brokers, logLevel: logLevel.NOTHING })
    const producer = kafka.producer()
    await producer.connect()
    const headers = { 'tidemark.writer': log.writerId, 'tidemark.seq': '1' }
    await producer.send({ topic, acks: -1, messages: [{ partition: 0, value: 'once', headers }] })
    await producer.send({ topic, acks: -1, messages: [{ partition: 0, value: 'plain record of another producer' }] })
    await producer.disconnect()
    const expected = ['once', 'other', 'plain record of another producer']
    expect((await readAll(log)).map((e) => Buffer.from(e.data).toString())).toEqual(expected)
    // A fresh reader that starts after `a` reads the window before it first.
    const fresh = await openLog(context, topic, { dedupeWindow: 10 })
    expect((await readAll(fresh, a + 1n)).map((e) => Buffer.from(e.data).toString())).toEqual(expected.slice(1))
    // Outside the window a copy counts again: the rule is the same for every reader.
    const narrow = await openLog(context, topic, { dedupeWindow: 1 })
    expect((await readAll(narrow)).map((e) => Buffer.from(e.data).toString())).toEqual(['once', 'other', 'once', 'plain record of another producer'])
  })

  it('a writer that starts later judges conditional records as the first one did', async (context) => {
    const { expect } = context
    const topic = randomName('log')
    const [x, y] = [await openLog(context, topic), await openLog(context, topic)]
    let last = NO_REVISION
    for (let i = 0; i < 20; i++) {
      // Both write on the same basis; exactly one takes effect each round.
      const results = await Promise.all([x.appendConditionally(Buffer.from(`x${i}`), last), y.appendConditionally(Buffer.from(`y${i}`), last)])
      const won = results.filter((r) => r !== undefined)
      expect(won).toHaveLength(1)
      last = won[0]!
    }
    expect(await x.tail()).toBe(40n)
    const all = await readAll(x)
    expect(all).toHaveLength(20)
    const z = await openLog(context, topic)
    const middle = all[9]!.revision
    expect(await readAll(z, middle + 1n)).toEqual(all.slice(10))
    expect(await z.appendConditionally(Buffer.from('stale'), middle)).toBeUndefined()
    expect(await z.appendConditionally(Buffer.from('fresh'), last)).toBe(40n)
  })

  it('reports an unreachable cluster as TIDEMARK_LOG_UNAVAILABLE', async ({ expect }) => {
    await expect(
      openKafkaLog({ brokers: ['127.0.0.1:9'], topic: 'nowhere', kafka: { retry: { retries: 0 }, connectionTimeout: 200 } }),
    ).rejects.toMatchObject({ code: 'TIDEMARK_LOG_UNAVAILABLE', details: { topic: 'nowhere' } })
  })

  it('validates its options once, with frozen defaults', async ({ expect }) => {
    expect(Object.isFrozen(KAFKA_LOG_DEFAULTS)).toBe(true)
    const brokers = kafkaService().brokers
    await expect(openKafkaLog({ brokers: [], topic: 't' })).rejects.toThrow(/brokers must be a non-empty array/)
    await expect(openKafkaLog({ brokers, topic: 'a topic' })).rejects.toThrow(/topic must be a Kafka topic name/)
    await expect(openKafkaLog({ brokers, topic: 't', dedupeWindow: 0 })).rejects.toThrow(/dedupeWindow \(0\)/)
    await expect(openKafkaLog({ brokers, topic: randomName('log'), partition: 99, ...FAST })).rejects.toThrow(/partition \(99\) does not exist/)
  })
})
