import { describe, expect, it, onTestFinished } from 'vitest'
import { openKafkaLog } from '../../connectors/kafka/index.js'
import { NO_REVISION, openFileLog, type LogEntry, type RevisionedLog } from '../../src/log/index.js'
import { jsonCodec, type Codec } from '../../src/store/index.js'
import { createStateSynchronizer, type StateSynchronizer, type StateSynchronizerOptions } from '../../src/synchronizer/index.js'
import { encodeUpdates } from '../../src/synchronizer/entry.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'

type Tally = Record<string, number>
type Vote = { name: string; by?: number }

const applyVote = (state: Tally, vote: Vote): Tally => {
  if (vote.name === '') throw new RangeError('a vote needs a name')
  return { ...state, [vote.name]: (state[vote.name] ?? 0) + (vote.by ?? 1) }
}

/** A file log and a way to open more handles on it; every handle is closed when the test finishes. */
async function fileLog(): Promise<{ log: RevisionedLog; reopen(): Promise<RevisionedLog> }> {
  const dir = tempDir()
  const open = async (): Promise<RevisionedLog> => {
    const log = await openFileLog(dir)
    onTestFinished(() => log.close())
    return log
  }
  return { log: await open(), reopen: open }
}

function synchronizer(log: RevisionedLog, extra: Partial<StateSynchronizerOptions<Tally, Vote>> = {}): StateSynchronizer<Tally, Vote> {
  return createStateSynchronizer<Tally, Vote>({ log, apply: applyVote, ...extra })
}

async function entries(log: RevisionedLog): Promise<LogEntry[]> {
  const out: LogEntry[] = []
  for await (const e of log.read(0n)) out.push(e)
  return out
}

describe('StateSynchronizer on the file log', () => {
  it('initialize() creates the state once; later calls and other clients see the first', async () => {
    const { log, reopen } = await fileLog()
    const a = synchronizer(log)
    const b = synchronizer(await reopen())
    expect(a.getRevision()).toBe(NO_REVISION)
    expect(() => a.getState()).toThrow(expect.objectContaining({ code: 'TIDEMARK_SYNC_NOT_INITIALIZED' }))
    await a.initialize({ start: 1 })
    await b.initialize({ other: 2 })
    await a.initialize({ again: 3 })
    expect(a.getState()).toEqual({ start: 1 })
    expect(b.getState()).toEqual({ start: 1 })
    expect(await entries(log)).toHaveLength(1)
    expect(a.getRevision()).toBe(0n)
  })

  it('updateState() writes only on the current revision, calls the generator again after a conflict, and applies locally', async () => {
    const { log, reopen } = await fileLog()
    const a = synchronizer(log)
    const b = synchronizer(await reopen())
    await a.initialize({})
    await b.fetchUpdates()
    await a.updateState((_, updates) => updates.push({ name: 'x' }))
    expect(a.getState()).toEqual({ x: 1 })
    expect(b.getState()).toEqual({})
    const seen: Tally[] = []
    const result = await b.updateStateWithResult((state, updates) => {
      seen.push(state)
      updates.push({ name: 'x', by: 10 }, { name: 'y' })
      return `saw ${state.x ?? 0}`
    })
    // The first run saw the stale state; its updates were not written.
    expect(seen).toEqual([{}, { x: 1 }])
    expect(result).toBe('saw 1')
    expect(b.getState()).toEqual({ x: 11, y: 1 })
    expect(b.getRevision()).toBe(2n)
    await a.fetchUpdates()
    expect(a.getState()).toEqual(b.getState())
    expect(a.getRevision()).toBe(2n)
    // One entry for both updates of one generator call.
    expect(await entries(log)).toHaveLength(3)
  })

  it('a generator that throws leaves the state and the log unchanged, and the error reaches the caller', async () => {
    const { log } = await fileLog()
    const a = synchronizer(log)
    await a.initialize({ kept: 1 })
    const boom = new Error('boom')
    await expect(a.updateState((_, updates) => {
      updates.push({ name: 'lost' })
      throw boom
    })).rejects.toBe(boom)
    expect(a.getState()).toEqual({ kept: 1 })
    expect(a.getRevision()).toBe(0n)
    expect(await log.tail()).toBe(1n)
    // An update apply() refuses fails before it is written, too.
    await expect(a.updateState((_, updates) => updates.push({ name: '' }))).rejects.toThrow(/a vote needs a name/)
    await expect(a.updateState((() => Promise.resolve()) as never)).rejects.toThrow(/generator must be synchronous/)
    expect(await log.tail()).toBe(1n)
    // A generator that derives nothing writes nothing.
    expect(await a.updateStateWithResult(() => 'nothing to do')).toBe('nothing to do')
    expect(await log.tail()).toBe(1n)
  })

  it('updateStateUnconditionally() appends without a check; the state sees it after fetchUpdates()', async () => {
    const { log, reopen } = await fileLog()
    const a = synchronizer(log)
    const b = synchronizer(await reopen())
    await a.initialize({})
    await b.updateStateUnconditionally({ name: 'u' }, { name: 'v' })
    await a.updateStateUnconditionally({ name: 'u' })
    expect(a.getState()).toEqual({})
    await a.fetchUpdates()
    expect(a.getState()).toEqual({ u: 2, v: 1 })
    expect(a.getRevision()).toBe(2n)
  })

  it('refuses to update before there is a state', async () => {
    const { log } = await fileLog()
    const a = synchronizer(log)
    await expect(a.updateState((_, u) => u.push({ name: 'x' }))).rejects.toMatchObject({ code: 'TIDEMARK_SYNC_NOT_INITIALIZED' })
    await expect(a.updateStateUnconditionally({ name: 'x' })).rejects.toMatchObject({ code: 'TIDEMARK_SYNC_NOT_INITIALIZED' })
    expect(await log.tail()).toBe(0n)
  })

  it('updates that come before the initial state are skipped by every client alike', async () => {
    const { log, reopen } = await fileLog()
    await log.append(encodeUpdates([Buffer.from(JSON.stringify({ name: 'early' }))]))
    const a = synchronizer(log)
    await a.initialize({})
    await a.updateState((_, u) => u.push({ name: 'late' }))
    const b = synchronizer(await reopen())
    await b.fetchUpdates()
    expect(b.getState()).toEqual({ late: 1 })
    expect(a.getState()).toEqual(b.getState())
  })

  it('an entry that fails to decode is reported with its revision', async () => {
    const { log } = await fileLog()
    const a = synchronizer(log)
    await a.initialize({})
    const bad = await log.append(encodeUpdates([Buffer.from('{not json')]))
    await expect(a.fetchUpdates()).rejects.toMatchObject({ code: 'TIDEMARK_DECODE_FAILED', details: { revision: bad } })
    await expect(a.fetchUpdates()).rejects.toThrow(new RegExp(`update at revision ${bad} of .* could not be decoded by the json codec`))
    expect(a.getRevision()).toBe(0n)
    const { log: other } = await fileLog()
    const b = synchronizer(other)
    await b.initialize({})
    const foreign = await other.append(Buffer.from('not a synchronizer entry'))
    await expect(b.fetchUpdates()).rejects.toMatchObject({ code: 'TIDEMARK_DECODE_FAILED', details: { revision: foreign } })
    await expect(b.fetchUpdates()).rejects.toThrow(/entry at revision 1 .* unknown format version/)
  })

  it('an update the codec cannot encode fails with TIDEMARK_ENCODE_FAILED and writes nothing', async () => {
    const { log } = await fileLog()
    const a = synchronizer(log)
    await a.initialize({})
    await expect(a.updateState((_, u) => u.push({ name: 'x', by: 1n as unknown as number }))).rejects.toMatchObject({ code: 'TIDEMARK_ENCODE_FAILED' })
    expect(await log.tail()).toBe(1n)
  })

  it('applies the codec round trip locally, as every other client does', async () => {
    const { log, reopen } = await fileLog()
    // A lossy codec: numbers above 100 are stored as 100.
    const json = jsonCodec<Vote>()
    const clamp: Codec<Vote> = { name: 'clamp', encode: (v) => json.encode({ ...v, by: Math.min(v.by ?? 1, 100) }), decode: (b) => json.decode(b) }
    const a = synchronizer(log, { updateCodec: clamp })
    await a.initialize({})
    await a.updateState((_, u) => u.push({ name: 'x', by: 1000 }))
    const b = synchronizer(await reopen(), { updateCodec: clamp })
    await b.fetchUpdates()
    expect(a.getState()).toEqual({ x: 100 })
    expect(b.getState()).toEqual(a.getState())
  })

  it('bytesWrittenSinceCompaction() counts the bytes of the entries applied', async () => {
    const { log } = await fileLog()
    const a = synchronizer(log)
    await a.initialize({})
    const afterInit = a.bytesWrittenSinceCompaction()
    expect(afterInit).toBeGreaterThan(0)
    await a.updateState((_, u) => u.push({ name: 'x' }))
    await a.updateStateUnconditionally({ name: 'y' })
    expect(a.bytesWrittenSinceCompaction()).toBeGreaterThan(afterInit)
    const before = a.bytesWrittenSinceCompaction()
    await a.fetchUpdates()
    expect(a.bytesWrittenSinceCompaction()).toBeGreaterThan(before)
  })

  it('runs one operation at a time per client, and refuses calls after close()', async () => {
    const { log } = await fileLog()
    const a = synchronizer(log)
    await a.initialize({})
    // Each call sees the state the previous one left, never the same one twice.
    const seen = await Promise.all(Array.from({ length: 20 }, () => a.updateStateWithResult((s, u) => {
      u.push({ name: 'n' })
      return s.n ?? 0
    })))
    expect(seen).toEqual(Array.from({ length: 20 }, (_, i) => i))
    expect(a.getState()).toEqual({ n: 20 })
    await a.close()
    await expect(a.fetchUpdates()).rejects.toMatchObject({ code: 'TIDEMARK_SYNC_CLOSED' })
    expect(() => a.getState()).toThrow(expect.objectContaining({ code: 'TIDEMARK_SYNC_CLOSED' }))
    // The log is the caller's and stays open.
    expect(await log.tail()).toBe(21n)
  })

  it('validates its options', async () => {
    const { log } = await fileLog()
    expect(() => createStateSynchronizer({ log: {} as RevisionedLog, apply: applyVote })).toThrow(/log must be a RevisionedLog/)
    expect(() => createStateSynchronizer({ log, apply: 'x' as never })).toThrow(/apply must be a function/)
    expect(() => createStateSynchronizer({ log, apply: applyVote, updateCodec: {} as never })).toThrow(/updateCodec must be a codec/)
    expect(() => createStateSynchronizer({ log, apply: applyVote, compactPoints: { store: {} as never, prefix: 'p/' } })).toThrow(/compactPoints.store/)
    const a = synchronizer(log)
    await expect(a.compact((s) => s)).rejects.toThrow(/compact\(\) needs the compactPoints option/)
    await expect(a.updateState('x' as never)).rejects.toThrow(TypeError)
  })
})

describe('StateSynchronizer on the Kafka log', () => {
  it('keeps the contract: initialize, conflicts, unconditional updates', async () => {
    const topic = randomName('sync')
    const options = { brokers: kafkaService().brokers, topic, fetchWaitMs: 5 }
    const [la, lb] = await Promise.all([openKafkaLog(options), openKafkaLog(options)])
    try {
      const a = synchronizer(la)
      const b = synchronizer(lb)
      await Promise.all([a.initialize({ a: 1 }), b.initialize({ b: 1 })])
      expect(a.getState()).toEqual(b.getState())
      await a.updateState((_, u) => u.push({ name: 'x' }))
      let runs = 0
      await b.updateState((s, u) => {
        runs++
        u.push({ name: 'x', by: (s.x ?? 0) + 1 })
      })
      expect(runs).toBe(2)
      await b.updateStateUnconditionally({ name: 'z' })
      await Promise.all([a.fetchUpdates(), b.fetchUpdates()])
      expect(a.getState()).toEqual(b.getState())
      expect(a.getState()).toMatchObject({ x: 3, z: 1 })
      expect(a.getRevision()).toBe(b.getRevision())
    } finally {
      await Promise.all([la.close(), lb.close()])
    }
  })
})
