// Clients whose revision a compaction truncated away: every operation that
// reads the log continues from the newest compact point, also when the log is
// truncated again while it catches up, and also while 8 writers race with a
// client that compacts and truncates over and over.
import { describe, expect, it, onTestFinished } from 'vitest'
import { openKafkaLog } from '../../connectors/kafka/index.js'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { TidemarkError, isTidemarkError } from '../../src/errors.js'
import { openFileLog, type LogEntry, type RevisionedLog } from '../../src/log/index.js'
import { createStateSynchronizer, type CompactPointStore, type StateSynchronizer } from '../../src/synchronizer/index.js'
import { listCompactPoints } from '../../src/synchronizer/compact-point.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { applyCounter, type Counter, type CounterUpdate } from './fixtures/counter.js'

type Tally = Record<string, number>
type Vote = { name: string }
const applyVote = (state: Tally, vote: Vote): Tally => ({ ...state, [vote.name]: (state[vote.name] ?? 0) + 1 })

const PREFIX = 'tally/'
/** Small segments, so that truncation (whole segments) happens after a few hundred entries. */
const SEGMENTS = { segmentBytes: 4096, sync: false }

function client(log: RevisionedLog, store: CompactPointStore): StateSynchronizer<Tally, Vote> {
  return createStateSynchronizer<Tally, Vote>({ log, apply: applyVote, compactPoints: { store, prefix: PREFIX } })
}

async function vote(sync: StateSynchronizer<Tally, Vote>, times: number, name = 'x'): Promise<void> {
  for (let i = 0; i < times; i++) await sync.updateState((_, u) => u.push({ name: `${name}${i % 7}` }))
}

/** 150 votes and a compaction, `rounds` times. */
async function compactRounds(sync: StateSynchronizer<Tally, Vote>, rounds: number): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    await vote(sync, 150)
    await sync.compact((s) => s)
  }
}

/**
 * A file log, a store, a client `a` that writes and compacts, and `stale`, a
 * client that read the initial state and then fell behind while `a`
 * compacted three times, so that the log no longer holds its next revision.
 */
async function staleClient(): Promise<{
  dir: string
  store: FsSnapshotStore
  log: RevisionedLog
  a: StateSynchronizer<Tally, Vote>
  stale: StateSynchronizer<Tally, Vote>
  staleLog: RevisionedLog
  open(): Promise<RevisionedLog>
}> {
  const dir = tempDir()
  const store = new FsSnapshotStore({ root: tempDir() })
  const open = async (): Promise<RevisionedLog> => {
    const log = await openFileLog(dir, SEGMENTS)
    onTestFinished(() => log.close())
    return log
  }
  const log = await open()
  const a = client(log, store)
  await a.initialize({})
  const staleLog = await open()
  const stale = client(staleLog, store)
  await stale.fetchUpdates()
  await compactRounds(a, 3)
  expect(await log.oldest()).toBeGreaterThan(stale.getRevision() + 1n)
  return { dir, store, log, a, stale, staleLog, open }
}

function truncatedError(from: bigint, oldest: bigint): TidemarkError {
  return new TidemarkError('TIDEMARK_LOG_TRUNCATED', `revision ${from} was truncated (simulated); it now starts at ${oldest}`, { details: { from, oldest } })
}

describe('a client whose revision was truncated away (file log)', () => {
  it('updateState() continues from the newest compact point and writes on the newest state', async () => {
    const { a, stale, log } = await staleClient()
    const seen: Tally[] = []
    await stale.updateState((state, updates) => {
      seen.push(state)
      updates.push({ name: 'stale' })
    })
    // The first run saw the stale state; the one that was written saw a's.
    expect(seen).toEqual([{}, a.getState()])
    expect(stale.getState()).toEqual({ ...a.getState(), stale: 1 })
    await a.fetchUpdates()
    expect(a.getState()).toEqual(stale.getState())
    expect(stale.getRevision()).toBe((await log.tail()) - 1n)
  })

  it('compact() catches up first and writes the newest state, never its own old one', async () => {
    const { a, stale, store, open } = await staleClient()
    await vote(a, 10, 'y')
    const before = await listCompactPoints(store, PREFIX)
    await stale.compact((s) => s)
    expect(stale.getState()).toEqual(a.getState())
    expect(stale.getRevision()).toBe(a.getRevision())
    // Its point is the newest state; the one before it is a's newest.
    expect((await listCompactPoints(store, PREFIX)).map((p) => p.revision)).toEqual([a.getRevision(), before[0]!.revision])
    // A new client starts from that point and has nothing left to read.
    const fresh = client(await open(), store)
    await fresh.fetchUpdates()
    expect(fresh.getState()).toEqual(a.getState())
    expect(fresh.getRevision()).toBe(a.getRevision())
  })

  it('initialize() is a no-op that brings the state to the newest, also when the log is truncated again while it catches up', async () => {
    const { a, stale, store } = await staleClient()
    const get = store.get.bind(store)
    store.get = async (key) => {
      store.get = get
      const body = await get(key)
      await compactRounds(a, 2)
      return body
    }
    await stale.initialize({ ignored: 1 })
    expect(store.get).toBe(get)
    expect(stale.getState()).toEqual(a.getState())
    expect(stale.getRevision()).toBe(a.getRevision())
  })

  it('initialize() that loses its race to a client that then compacts and truncates continues from the newest compact point', async () => {
    const dir = tempDir()
    const store = new FsSnapshotStore({ root: tempDir() })
    const [la, lb] = [await openFileLog(dir, SEGMENTS), await openFileLog(dir, SEGMENTS)]
    onTestFinished(async () => {
      await Promise.all([la.close(), lb.close()])
    })
    const a = client(la, store)
    const late = client(lb, store)
    // While `late` decides to write its initial state, `a` writes one first
    // and compacts three times: late's conditional append loses, and what
    // it would read next is truncated.
    const append = lb.appendConditionally.bind(lb)
    lb.appendConditionally = async (data, expected) => {
      lb.appendConditionally = append
      await a.initialize({ first: 1 })
      await compactRounds(a, 3)
      expect(await la.oldest()).toBeGreaterThan(1n)
      return append(data, expected)
    }
    await late.initialize({ second: 2 })
    expect(late.getState()).toEqual(a.getState())
    expect(late.getState()).toMatchObject({ first: 1 })
    expect(late.getRevision()).toBe(a.getRevision())
  })

  it('fetchUpdates() continues when the log is truncated again past the compact point it just loaded', async () => {
    const { a, stale, store } = await staleClient()
    // Right after the stale client read the newest compact point, `a`
    // compacts twice more: the entries after that point are truncated too.
    const get = store.get.bind(store)
    store.get = async (key) => {
      store.get = get
      const body = await get(key)
      await compactRounds(a, 2)
      return body
    }
    await stale.fetchUpdates()
    expect(store.get).toBe(get)
    expect(stale.getState()).toEqual(a.getState())
    expect(stale.getRevision()).toBe(a.getRevision())
  })

  it('fetchUpdates() lists again when the compact point it listed was deleted before it read it', async () => {
    const { a, stale, store } = await staleClient()
    const get = store.get.bind(store)
    store.get = async (key) => {
      store.get = get
      // Two compactions delete the point that was the newest at the listing.
      await compactRounds(a, 2)
      return get(key)
    }
    await stale.fetchUpdates()
    expect(store.get).toBe(get)
    expect(stale.getState()).toEqual(a.getState())
    expect(stale.getRevision()).toBe(a.getRevision())
  })
})

describe('a client whose revision was truncated away (Kafka log)', () => {
  // librdkafka's mock refuses DeleteRecords, so the stale client's log is
  // made to answer as a truncated Kafka log does: read() below the low
  // watermark and appendConditionally() on a basis below it fail with
  // TIDEMARK_LOG_TRUNCATED before anything is written. Everything else,
  // including the judging of entries after a compact point, is the real log.
  it('updateState() and compact() continue from the newest compact point, judged from its revision', async () => {
    const store = new FsSnapshotStore({ root: tempDir() })
    const options = { brokers: kafkaService().brokers, topic: randomName('stale'), fetchWaitMs: 5 }
    const [la, lb, lc] = await Promise.all([openKafkaLog(options), openKafkaLog(options), openKafkaLog(options)])
    onTestFinished(async () => {
      await Promise.all([la.close(), lb.close(), lc.close()])
    })
    let low = 0n
    const truncate = la.truncate.bind(la)
    la.truncate = async (before) => {
      if (before > low) low = before
      return truncate(before)
    }
    simulateTruncation(lb, () => low)
    const a = client(la, store)
    const stale = client(lb, store)
    await a.initialize({})
    await stale.fetchUpdates()
    for (let i = 0; i < 3; i++) {
      await vote(a, 20)
      await a.compact((s) => s)
    }
    expect(low).toBeGreaterThan(1n)
    await stale.updateState((_, u) => u.push({ name: 'stale' }))
    await a.fetchUpdates()
    expect(stale.getState()).toEqual(a.getState())
    expect(stale.getState()).toMatchObject({ stale: 1 })
    // Behind again, and behind the truncation again: compact() catches up first.
    for (let i = 0; i < 2; i++) {
      await vote(a, 20)
      await a.compact((s) => s)
    }
    expect(low).toBeGreaterThan(stale.getRevision() + 1n)
    await vote(a, 3, 'z')
    await stale.compact((s) => s)
    expect(stale.getState()).toEqual(a.getState())
    expect((await listCompactPoints(store, PREFIX))[0]!.revision).toBe(a.getRevision())
    const fresh = client(lc, store)
    await fresh.fetchUpdates()
    expect(fresh.getState()).toEqual(a.getState())
  })
})

/** Makes `log` answer as if everything before `low()` had been deleted (see above). */
function simulateTruncation(log: RevisionedLog, low: () => bigint): void {
  const read = log.read.bind(log)
  log.read = (from, options) => {
    const inner = read(from, options)
    return (async function* (): AsyncGenerator<LogEntry> {
      if (from < low()) throw truncatedError(from, low())
      yield* inner
    })()
  }
  const appendConditionally = log.appendConditionally.bind(log)
  log.appendConditionally = async (data, expected) => {
    if (expected + 1n < low()) throw truncatedError(expected + 1n, low())
    return appendConditionally(data, expected)
  }
}

const WRITERS = 8

/** Resolves the waiters registered before fire(). */
class Pulse {
  #waiters: Array<() => void> = []
  wait(): Promise<void> {
    return new Promise((resolve) => this.#waiters.push(resolve))
  }
  fire(): void {
    const waiters = this.#waiters
    this.#waiters = []
    for (const resolve of waiters) resolve()
  }
}

/**
 * 8 writers, each with its own log handle, make `increments` read-modify-write
 * increments of one counter, while writer 0 also compacts (and so truncates)
 * after every update that lands. Left alone, whether a writer falls behind a
 * truncation depends on timing, so writer k > 0 pauses once, when the
 * counter it sees has reached k * increments (staggered, so that the others
 * keep writing), until the log no longer holds its next revision (`oldest`
 * says where the log starts), or until no other writer is left to move it.
 * Returns the final states and how often a writer's read found its revision
 * truncated.
 */
async function race(
  logs: RevisionedLog[],
  store: CompactPointStore,
  increments: number,
  oldest: (log: RevisionedLog) => Promise<bigint>,
): Promise<{ states: Counter[]; truncations: number }> {
  let truncations = 0
  for (const log of logs) {
    const read = log.read.bind(log)
    log.read = (from, options) => {
      const inner = read(from, options)
      return (async function* (): AsyncGenerator<LogEntry> {
        try {
          yield* inner
        } catch (err) {
          if (isTidemarkError(err, 'TIDEMARK_LOG_TRUNCATED')) truncations++
          throw err
        }
      })()
    }
  }
  const syncs = logs.map((log) =>
    createStateSynchronizer<Counter, CounterUpdate>({ log, apply: applyCounter, compactPoints: { store, prefix: 'counter/' } }),
  )
  await syncs[0]!.initialize({ count: 0, digest: 0 })
  await Promise.all(syncs.map((s) => s.initialize({ count: -1, digest: 0 })))
  // Fired when an update lands, a compaction ends, or a writer finishes.
  const tick = new Pulse()
  let writing = WRITERS
  let paused = 0
  const fallBehind = async (k: number): Promise<void> => {
    paused++
    try {
      for (;;) {
        const next = tick.wait()
        if (writing === paused || (await oldest(logs[k]!)) > syncs[k]!.getRevision() + 1n) return
        await next
      }
    } finally {
      paused--
    }
  }
  const writers = syncs.map(async (sync, k) => {
    let pauses = k > 0 ? 1 : 0
    try {
      for (let i = 0; i < increments; i++) {
        if (pauses > 0 && sync.getState().count >= k * increments) {
          pauses--
          await fallBehind(k)
        }
        await sync.updateState((state, updates) => {
          updates.push({ set: state.count + 1, w: `w${k}`, i })
        })
        tick.fire()
      }
    } finally {
      writing--
      tick.fire()
    }
  })
  const compactor = (async () => {
    while (writing > 0) {
      await tick.wait()
      await syncs[0]!.compact((s) => s)
      tick.fire()
    }
  })()
  await Promise.all([...writers, compactor])
  await Promise.all(syncs.map((s) => s.fetchUpdates()))
  return { states: syncs.map((s) => s.getState()), truncations }
}

describe(`${WRITERS} writers, one of which compacts and truncates after every update that lands`, () => {
  it('on the file log: every writer finishes and no increment is lost', async () => {
    const dir = tempDir()
    const store = new FsSnapshotStore({ root: tempDir() })
    const logs = await Promise.all(Array.from({ length: WRITERS }, () => openFileLog(dir, SEGMENTS)))
    onTestFinished(async () => {
      await Promise.all(logs.map((l) => l.close()))
    })
    const increments = 60
    const { states, truncations } = await race(logs, store, increments, (log) => log.oldest())
    expect(states.map((s) => s.count)).toEqual(Array(WRITERS).fill(WRITERS * increments))
    expect(new Set(states.map((s) => s.digest)).size).toBe(1)
    // The race did what it is for: writers fell behind a truncation.
    expect(truncations).toBeGreaterThan(0)
    expect(await logs[0]!.oldest()).toBeGreaterThan(0n)
  })

  it('on the Kafka log (truncation simulated as above): every writer finishes and no increment is lost', async () => {
    const store = new FsSnapshotStore({ root: tempDir() })
    const options = { brokers: kafkaService().brokers, topic: randomName('race'), fetchWaitMs: 5 }
    const logs = await Promise.all(Array.from({ length: WRITERS + 1 }, () => openKafkaLog(options)))
    onTestFinished(async () => {
      await Promise.all(logs.map((l) => l.close()))
    })
    const observer = logs.pop()!
    let low = 0n
    const truncate = logs[0]!.truncate.bind(logs[0]!)
    logs[0]!.truncate = async (before) => {
      if (before > low) low = before
      return truncate(before)
    }
    for (const log of logs) simulateTruncation(log, () => low)
    const increments = 15
    const { states, truncations } = await race(logs, store, increments, async () => low)
    expect(states.map((s) => s.count)).toEqual(Array(WRITERS).fill(WRITERS * increments))
    expect(new Set(states.map((s) => s.digest)).size).toBe(1)
    expect(truncations).toBeGreaterThan(0)
    // A new client starts from the newest compact point and judges the real
    // entries after it from the revision the point records.
    const fresh = createStateSynchronizer<Counter, CounterUpdate>({ log: observer, apply: applyCounter, compactPoints: { store, prefix: 'counter/' } })
    await fresh.fetchUpdates()
    expect(fresh.getState()).toEqual(states[0])
  })
})
