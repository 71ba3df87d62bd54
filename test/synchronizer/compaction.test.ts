import { readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { openKafkaLog } from '../../connectors/kafka/index.js'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { openFileLog, type LogEntry, type RevisionedLog } from '../../src/log/index.js'
import { createStateSynchronizer, type CompactPointStore, type StateSynchronizer } from '../../src/synchronizer/index.js'
import { kafkaService, serviceKinds } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'

type Tally = Record<string, number>
type Vote = { name: string }
const applyVote = (state: Tally, vote: Vote): Tally => ({ ...state, [vote.name]: (state[vote.name] ?? 0) + 1 })

const PREFIX = 'tally/'

/** Counts the entries read through `log`: one wrapped method on the real object. */
function countReads(log: RevisionedLog): { entries: number } {
  const counter = { entries: 0 }
  const read = log.read.bind(log)
  log.read = (from, options) => {
    const inner = read(from, options)
    return (async function* (): AsyncGenerator<LogEntry> {
      for await (const e of inner) {
        counter.entries++
        yield e
      }
    })()
  }
  return counter
}

/** A synchronizer on `log`; the log is closed when the test finishes. */
function client(log: RevisionedLog, store: CompactPointStore): StateSynchronizer<Tally, Vote> {
  onTestFinished(() => log.close())
  return createStateSynchronizer<Tally, Vote>({ log, apply: applyVote, compactPoints: { store, prefix: PREFIX } })
}

async function vote(sync: StateSynchronizer<Tally, Vote>, times: number, name = 'x'): Promise<void> {
  for (let i = 0; i < times; i++) await sync.updateState((_, u) => u.push({ name: `${name}${i % 7}` }))
}

function compactPoints(root: string): string[] {
  try {
    return readdirSync(join(root, PREFIX)).filter((n) => n.endsWith('.compact')).sort()
  } catch {
    return []
  }
}

describe('compaction', () => {
  it('a new client starts from the newest compact point and reads only the entries after it', async () => {
    const dir = tempDir()
    const root = tempDir()
    const store = new FsSnapshotStore({ root })
    const a = client(await openFileLog(dir), store)
    await a.initialize({})
    await vote(a, 100)
    const old = client(await openFileLog(dir), store)
    await old.fetchUpdates()
    await a.compact((state) => state)
    expect(a.bytesWrittenSinceCompaction()).toBe(0)
    await vote(a, 5, 'y')
    const fresh = await openFileLog(dir)
    const reads = countReads(fresh)
    const c = client(fresh, store)
    await c.fetchUpdates()
    expect(reads.entries).toBe(5)
    expect(c.getState()).toEqual(a.getState())
    expect(c.getRevision()).toBe(a.getRevision())
    await old.fetchUpdates()
    expect(old.getState()).toEqual(a.getState())
  })

  it('truncates one compaction behind, deletes older compact points, and a client left behind recovers', async () => {
    const dir = tempDir()
    const root = tempDir()
    const store = new FsSnapshotStore({ root })
    const options = { segmentBytes: 4096 }
    const log = await openFileLog(dir, options)
    const a = client(log, store)
    await a.initialize({})
    const straggler = client(await openFileLog(dir, options), store)
    await straggler.fetchUpdates()
    await vote(a, 200)
    await a.compact((s) => s)
    const first = a.getRevision()
    // Nothing to truncate behind the first compact point.
    expect(await log.oldest()).toBe(0n)
    const middle = client(await openFileLog(dir, options), store)
    await middle.fetchUpdates() // starts from the first compact point
    await vote(a, 200)
    await a.compact((s) => s)
    const second = a.getRevision()
    const oldest = await log.oldest()
    expect(oldest > 0n && oldest <= first + 1n).toBe(true)
    // A client that started from the first point still finds the entries after it.
    await middle.fetchUpdates()
    expect(middle.getState()).toEqual(a.getState())
    await vote(a, 200)
    await a.compact((s) => s)
    expect(await log.oldest() > first).toBe(true)
    expect(await log.oldest() <= second + 1n).toBe(true)
    expect(compactPoints(root).map((k) => BigInt(k.slice(0, 20)))).toEqual([second, a.getRevision()])
    // The straggler's revision was truncated away: it continues from the newest point.
    await straggler.fetchUpdates()
    expect(straggler.getState()).toEqual(a.getState())
    // A compaction with nothing new since the last point writes no new one.
    await a.compact((s) => s)
    expect(compactPoints(root)).toHaveLength(2)
  })

  it('skips a compact point that does not verify, and says so when none is usable', async () => {
    const dir = tempDir()
    const root = tempDir()
    const store = new FsSnapshotStore({ root })
    const a = client(await openFileLog(dir), store)
    await a.initialize({})
    await vote(a, 10)
    await a.compact((s) => s)
    await vote(a, 10)
    await a.compact((s) => s)
    const [older, newer] = compactPoints(root)
    writeFileSync(join(root, PREFIX, newer!), 'garbage')
    const b = client(await openFileLog(dir), store)
    await b.fetchUpdates()
    expect(b.getState()).toEqual(a.getState())
    writeFileSync(join(root, PREFIX, older!), 'garbage too')
    const c = client(await openFileLog(dir), store)
    await expect(c.fetchUpdates()).rejects.toMatchObject({ code: 'TIDEMARK_SYNC_COMPACT_POINT_CORRUPT' })
    await expect(c.fetchUpdates()).rejects.toThrow(/its state fails its checksum|not a compact point/)
  })

  it('works on the Kafka log, where the mock cannot delete records', async () => {
    const root = tempDir()
    const store = new FsSnapshotStore({ root })
    const options = { brokers: kafkaService().brokers, topic: randomName('compact'), fetchWaitMs: 5 }
    const log = await openKafkaLog(options)
    const fresh = await openKafkaLog(options)
    try {
      const a = client(log, store)
      await a.initialize({})
      await vote(a, 30)
      await a.compact((s) => s)
      await vote(a, 30)
      // The second compaction asks to truncate behind the first point.
      await a.compact((s) => s)
      await vote(a, 3, 'z')
      if (serviceKinds().kafka === 'mock') expect(await log.oldest()).toBe(0n)
      const reads = countReads(fresh)
      const c = client(fresh, store)
      await c.fetchUpdates()
      expect(reads.entries).toBe(3)
      expect(c.getState()).toEqual(a.getState())
    } finally {
      await Promise.all([log.close(), fresh.close()])
    }
  })

  it('the file-system snapshot store is a CompactPointStore as it is', () => {
    const store: CompactPointStore = new FsSnapshotStore({ root: tempDir() })
    expect(typeof store.list).toBe('function')
  })
})
