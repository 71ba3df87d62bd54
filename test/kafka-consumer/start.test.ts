import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer, type PartitionStarted, type StatefulConsumerOptions } from '../../connectors/kafka/index.js'
import { isTidemarkError } from '../../src/errors.js'
import { acquireClaim } from '../../src/ownership/claim.js'
import { tempDir } from '../helpers/tmp.js'
import { committedThrough, consumerOptions, fold, groupFixture, produceWords, readState, type Produced, type WordEvent } from './fixture.js'

function consumer(options: StatefulConsumerOptions<WordEvent>): StatefulConsumer<WordEvent> {
  const c = new StatefulConsumer<WordEvent>(options)
  onTestFinished(async () => {
    await c.close()
  })
  return c
}

function started(c: StatefulConsumer<WordEvent>, partition: number): Promise<PartitionStarted> {
  return new Promise((resolve) => c.on('partition-started', (s) => {
    if (s.partition === partition) resolve(s)
  }))
}

describe('StatefulConsumer: where a partition starts', () => {
  it("a store behind the log's start fails with TIDEMARK_POSITION_TRUNCATED; onTruncated: 'reset-to-earliest' rebuilds it from the log's first record", async () => {
    const { brokers, producer, topic, job } = await groupFixture('kc-trunc')
    const stateDir = tempDir()
    const first = await produceWords(producer, topic, [0], 5)
    const a = consumer(consumerOptions({ brokers, job, topics: [topic], stateDir }))
    const aDone = committedThrough([a], first)
    await a.start()
    await aDone
    await a.close()

    // librdkafka's mock keeps about 5 MB per partition and drops its oldest
    // record sets beyond that, as retention would.
    const pad = 'x'.repeat(100_000)
    const big: Produced[] = []
    for (let i = 0; i < 70; i++) {
      const value = { word: 'big', n: 1, pad } as WordEvent
      const [meta] = await producer.send({ topic, acks: -1, messages: [{ key: 'big', value: JSON.stringify(value), partition: 0 }] })
      big.push({ topic, partition: 0, offset: BigInt(meta!.baseOffset!), value })
    }

    const b = consumer(consumerOptions({ brokers, job, topics: [topic], stateDir }))
    const truncated = new Promise<{ position: bigint | undefined; logStart: bigint }>((resolve) => b.on('truncated', resolve))
    const failed = new Promise<unknown>((resolve) => b.on('partition-failed', (f) => resolve(f.error)))
    await b.start()
    const error = await failed
    expect(isTidemarkError(error, 'TIDEMARK_POSITION_TRUNCATED')).toBe(true)
    const { position, logStart } = await truncated
    expect(position).toBe(4n)
    expect(logStart).toBeGreaterThan(5n)
    expect((error as { details: unknown }).details).toEqual({ topic, partition: 0, position: 4n, logStart })
    await b.close()

    const c = consumer(consumerOptions({ brokers, job, topics: [topic], stateDir }, { onTruncated: 'reset-to-earliest' }))
    const reset = started(c, 0)
    const kept = big.filter((r) => r.offset >= logStart)
    const done = committedThrough([c], kept)
    await c.start()
    expect(await reset).toMatchObject({ source: 'reset', fetchFrom: logStart, position: undefined })
    await done
    expect(await readState(c.store(topic, 0)!)).toEqual(fold(kept))
  })

  it("startFrom: 'latest' starts a partition without state at the end of the log (the default, 'earliest', at its start: see single-member.test.ts)", async () => {
    const { brokers, producer, topic, job } = await groupFixture('kc-latest')
    await produceWords(producer, topic, [0, 1, 2, 3], 20)
    const c = consumer(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir() }, { startFrom: 'latest' }))
    const s = started(c, 2)
    await c.start()
    expect(await s).toMatchObject({ source: 'empty', fetchFrom: 20n, position: undefined })
    const later = await produceWords(producer, topic, [2], 5, 100, 9)
    await committedThrough([c], later)
    expect(await readState(c.store(topic, 2)!)).toEqual(fold(later))
  })

  // A process killed while it prefetched leaves <stateDir>/<topic>-<partition>.prefetch
  // behind (up to a whole snapshot); the next owner of that partition in that
  // directory removes it, and nothing else.
  it("removes a killed process's prefetch directory of a partition it starts, and nothing else", async () => {
    const { brokers, producer, topic, job } = await groupFixture('kc-prefetch-left')
    await produceWords(producer, topic, [0, 1, 2, 3], 8)
    const stateDir = tempDir()
    const left = join(stateDir, `${topic}-1.prefetch`)
    mkdirSync(left)
    writeFileSync(join(left, '000005.ldb'), Buffer.alloc(4096, 1))
    const unrelated = join(stateDir, `${topic}-1.prefetch-not-ours`)
    writeFileSync(unrelated, 'keep')
    const c = consumer(consumerOptions({ brokers, job, topics: [topic], stateDir }))
    const s = started(c, 1)
    await c.start()
    await s
    expect(existsSync(left)).toBe(false)
    expect(readFileSync(unrelated, 'utf8')).toBe('keep')
  })
})

describe('StatefulConsumer: ownership', () => {
  it('a partition whose claim a newer owner took stops with TIDEMARK_OWNERSHIP_LOST within a batch, and hands nothing off', async () => {
    const { brokers, producer, topic, job, snapshotRoot } = await groupFixture('kc-owner')
    const first = await produceWords(producer, topic, [0, 1, 2, 3], 10)
    const c = consumer(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir(), snapshotRoot }))
    const done = committedThrough([c], first)
    await c.start()
    await done
    // Another process takes partition 0 by force (an operator, or a member of a newer generation).
    const store = c.options.snapshots!.store
    const claim = await acquireClaim({ store, job, partition: `${topic}-0`, leaseMs: null, takeover: 'force' })
    expect(claim.epoch).toBeGreaterThan(0)
    const failed = new Promise<unknown>((resolve) => c.on('partition-failed', (f) => {
      if (f.partition === 0) resolve(f.error)
    }))
    // It keeps producing until the partition notices (a claim is looked at once a second).
    const ticker = setInterval(() => void produceWords(producer, topic, [0], 1, 1, 4).catch(() => undefined), 100)
    onTestFinished(() => clearInterval(ticker))
    const error = await failed
    clearInterval(ticker)
    expect(isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST')).toBe(true)
    expect(c.partitions().find((p) => p.partition === 0)?.state).toBe('failed')
    const { partitions } = await c.close()
    const p0 = partitions.find((p) => p.partition === 0)!
    expect(p0.reason).toBe('failed')
    expect(p0.handoff).toBeUndefined()
    expect(partitions.filter((p) => p.partition !== 0).every((p) => p.handoff !== undefined)).toBe(true)
  })
})
