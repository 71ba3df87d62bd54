import { mkdir, readdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { acquireClaim, fileLogSink, isTidemarkError, restoreSnapshot } from '../../src/index.js'
import { replayJob, type ReplayJobOptions, type ReplayProgress } from '../../src/replay/index.js'
import { runReplayCommand } from '../../src/cli/commands/replay.js'
import { resolveReplayOptions } from '../../src/replay/options.js'
import { replaceRecord, replayRecord } from '../../src/replay/record.js'
import { tempDir } from '../helpers/tmp.js'
import { fold, handler, stateOnly, states, TOPIC, type Sale } from './fixtures/operator.js'
import { digestOf, distinct, EVENTS, liveJob, outputs, readPosition, readTotals, sourceLog, store } from './helpers.js'

const OPERATOR = join(import.meta.dirname, 'fixtures', 'operator.ts')

describe('replayJob', () => {
  it('from empty: the state is the fold of [from, to], one output per event with its id, a final snapshot at to', async () => {
    const root = tempDir()
    const log = await sourceLog(root)
    const snapshots = await store(join(root, 'snapshots'))
    const sink = fileLogSink({ dir: join(root, 'out'), fileLog: { sync: false } })
    const seen: ReplayProgress['phase'][] = []
    const result = await replayJob<Sale>({
      job: 'backfill', source: { log, topic: TOPIC, partition: 0, from: 100n, to: 1999n }, start: 'empty',
      handler, states, output: sink, path: join(root, 'replay'), snapshots, batchSize: 700,
      onProgress: (p) => seen.push(p.phase),
    })
    await sink.close()
    expect(result).toMatchObject({ job: 'backfill', from: 100n, to: 1999n, offset: 1999n, source: 'new', events: 1900, warmedUp: 0 })
    expect(seen).toContain('replay')
    expect(result.digest).toBe(await digestOf(fold(100, 1999)))
    const records = await outputs(join(root, 'out'))
    expect(distinct(records).map((r) => r.id)).toEqual(Array.from({ length: 1900 }, (_, i) => `tm1:backfill:${TOPIC}:0:${100 + i}:0`))
    // The snapshot at `to`: restored elsewhere, it holds the same state.
    await restoreSnapshot({ snapshotStore: snapshots, job: 'backfill', partition: 0, target: join(root, 'check'), snapshot: result.snapshot.id })
    expect(await readTotals(join(root, 'check'))).toEqual(fold(100, 1999))
    // A call after the end does nothing more and says the same.
    const again = await replayJob<Sale>({
      job: 'backfill', source: { log, topic: TOPIC, partition: 0, from: 100n, to: 1999n }, start: 'empty',
      handler, states, output: fileLogSink({ dir: join(root, 'out'), fileLog: { sync: false } }), path: join(root, 'replay'), snapshots, batchSize: 700,
    })
    expect(again).toMatchObject({ source: 'local', events: 0, digest: result.digest, snapshot: result.snapshot })
    await log.close()
  })

  it('a resume never redoes or skips an event: stopped by its signal at each snapshot, the store gone, then resumed from its own snapshot', async () => {
    const root = tempDir()
    const log = await sourceLog(root)
    const snapshots = await store(join(root, 'snapshots'))
    const path = join(root, 'replay')
    const options = (signal?: AbortSignal): ReplayJobOptions<Sale> => ({
      job: 'resumable', source: { log, topic: TOPIC, partition: 0, to: BigInt(EVENTS - 1) }, start: 'empty',
      handler: stateOnly, states, path, snapshots, batchSize: 300, checkpoints: { everyEvents: 900, intervalMs: 0 },
      ...(signal === undefined ? {} : { signal }),
    })
    // Stopped mid-way: the snapshot the schedule started at 900 events is
    // finished (committed) while the replay stops.
    const stop = new AbortController()
    const first = replayJob({ ...options(stop.signal), onProgress: (p) => { if (p.phase === 'commit' && p.offset >= 2000n) stop.abort(new Error('stopped')) } })
    await expect(first).rejects.toThrow('stopped')
    const stoppedAt = (await readPosition(path))!
    expect(stoppedAt).toBeLessThan(BigInt(EVENTS - 1))
    // Another machine: the local store is gone, the replay's snapshots remain.
    await rm(path, { recursive: true })
    const second = await replayJob(options())
    expect(second.source).toBe('snapshot')
    expect(second.events).toBeGreaterThanOrEqual(EVENTS - 1 - Number(stoppedAt))
    expect(second.events).toBeLessThan(EVENTS)
    expect(second.offset).toBe(BigInt(EVENTS - 1))
    expect(second.digest).toBe(await digestOf(fold(0, EVENTS - 1)))
    expect(await readTotals(path)).toEqual(fold(0, EVENTS - 1))
    await log.close()
  })

  it('starts from another job\'s snapshot: that job\'s undelivered outputs are not the replay\'s', async () => {
    const root = tempDir()
    const log = await sourceLog(root)
    const snapshots = await store(join(root, 'snapshots'))
    const id = await liveJob(log, join(root, 'live'), snapshots, 1999n)
    const sink = fileLogSink({ dir: join(root, 'out'), fileLog: { sync: false } })
    const result = await replayJob<Sale>({
      job: 'from-live', source: { log, topic: TOPIC, partition: 0, to: 2499n }, start: { snapshot: id, job: 'live' },
      handler, states, output: sink, path: join(root, 'replay'), snapshots,
    })
    await sink.close()
    expect(result).toMatchObject({ from: 2000n, offset: 2499n, source: 'new', startSnapshot: { job: 'live', id }, events: 500 })
    expect(result.digest).toBe(await digestOf(fold(0, 2499)))
    const ids = (await outputs(join(root, 'out'))).map((r) => r.id)
    expect(ids).toHaveLength(500)
    expect(ids.every((i) => i.startsWith('tm1:from-live:'))).toBe(true)

    // A from that does not follow the snapshot is refused before anything is written.
    const err = await replayJob<Sale>({
      job: 'from-live-2', source: { log, topic: TOPIC, partition: 0, from: 10n, to: 2499n }, start: { snapshot: id, job: 'live' },
      handler: stateOnly, states, path: join(root, 'replay-2'), snapshots,
    }).catch((e: unknown) => e)
    expect(isTidemarkError(err, 'TIDEMARK_REPLAY_RANGE_INVALID') && err.details.reason).toBe('start-mismatch')
    await log.close()
  })

  it('starts from an offset: the newest snapshot at or before it, then the events up to it without their outputs', async () => {
    const root = tempDir()
    const log = await sourceLog(root)
    const snapshots = await store(join(root, 'snapshots'))
    const id = await liveJob(log, join(root, 'live'), snapshots, 999n)
    const sink = fileLogSink({ dir: join(root, 'out'), fileLog: { sync: false } })
    const result = await replayJob<Sale>({
      job: 'as-of', source: { log, topic: TOPIC, partition: 0, to: 1999n }, start: { offset: 1499n, job: 'live' },
      handler, states, output: sink, path: join(root, 'replay'), snapshots,
    })
    await sink.close()
    expect(result).toMatchObject({ from: 1500n, offset: 1999n, startSnapshot: { job: 'live', id }, warmedUp: 500, events: 500 })
    expect(result.digest).toBe(await digestOf(fold(0, 1999)))
    const ids = (await outputs(join(root, 'out'))).map((r) => r.id)
    expect(ids[0]).toBe(`tm1:as-of:${TOPIC}:0:1500:0`)
    expect(ids).toHaveLength(500)

    // Without a job: from empty state, every event up to the offset a warm-up.
    const plain = await replayJob<Sale>({
      job: 'as-of-empty', source: { log, topic: TOPIC, partition: 0, to: 1999n }, start: { offset: 1499n },
      handler: stateOnly, states, path: join(root, 'replay-2'), snapshots,
    })
    expect(plain).toMatchObject({ from: 1500n, warmedUp: 1500, events: 500, digest: result.digest })
    await log.close()
  })

  it('refuses to write into the source job, into a job that is no replay, or into a replay with other parameters', async () => {
    const root = tempDir()
    const log = await sourceLog(root, 3000)
    const snapshots = await store(join(root, 'snapshots'))
    const id = await liveJob(log, join(root, 'live'), snapshots, 999n)
    const base: ReplayJobOptions<Sale> = {
      job: 'live', source: { log, topic: TOPIC, partition: 0, to: 1999n }, start: { snapshot: id, job: 'live' },
      handler: stateOnly, states, path: join(root, 'replay'), snapshots,
    }
    const code = (p: Promise<unknown>) => p.then(() => 'resolved', (e: unknown) => (isTidemarkError(e) ? `${e.code}${typeof e.details.reason === 'string' ? `/${e.details.reason}` : ''}` : String(e)))
    expect(await code(replayJob(base))).toBe('TIDEMARK_REPLAY_SOURCE_JOB')
    expect(await code(replayJob({ ...base, start: { offset: 1500n, job: 'live' } }))).toBe('TIDEMARK_REPLAY_SOURCE_JOB')
    // The live job's namespace, even starting from empty.
    expect(await code(replayJob({ ...base, start: 'empty' }))).toBe('TIDEMARK_REPLAY_JOB_EXISTS/not-a-replay')
    // Its local store is not a replay's either.
    expect(await code(replayJob({ ...base, job: 'other', start: 'empty', path: join(root, 'live') }))).toBe('TIDEMARK_REPLAY_JOB_EXISTS/not-a-replay')
    // A replay, resumed with another range (in the snapshot store and then in its local store).
    await replayJob({ ...base, job: 'copy' })
    const err = await replayJob({ ...base, job: 'copy', source: { ...base.source, to: 2999n } }).catch((e: unknown) => e)
    expect(isTidemarkError(err, 'TIDEMARK_REPLAY_JOB_EXISTS') && err.details).toMatchObject({ reason: 'other-parameters', differences: ['source.to: "1999" -> "2999"'] })
    expect(await code(replayJob({ ...base, job: 'copy-2', source: { ...base.source, to: 2999n } }))).toBe('TIDEMARK_REPLAY_JOB_EXISTS/other-parameters')
    expect(await code(replayJob({ ...base, job: 'beyond', source: { ...base.source, to: 3000n } }))).toBe('TIDEMARK_REPLAY_RANGE_INVALID/beyond-tail')
    await log.close()
  })

  it('a replay that committed nothing of its range starts again with other parameters; one that committed a batch, or lost its store, is refused', async () => {
    const root = tempDir()
    const log = await sourceLog(root, 3000)
    const snapshots = await store(join(root, 'snapshots'))
    // A handler with a bug at one offset; its fix is another fingerprint.
    const failingAt = (at: bigint): ReplayJobOptions<Sale>['handler'] => (tx, sale, ctx) => {
      if (ctx.offset === at) throw new Error(`bug at ${at}`)
      return handler(tx, sale, ctx)
    }
    const options = (job: string, fingerprint: string, run: ReplayJobOptions<Sale>['handler'], out = join(root, `out-${job}`)): ReplayJobOptions<Sale> => ({
      job, source: { log, topic: TOPIC, partition: 0, to: 1999n }, start: 'empty', handler: run, states, fingerprint,
      output: fileLogSink({ dir: out, fileLog: { sync: false } }), path: join(root, job), snapshots, batchSize: 1000,
    })
    const code = (p: Promise<unknown>) => p.then(() => 'resolved', (e: unknown) => (isTidemarkError(e) ? `${e.code}${typeof e.details.reason === 'string' ? `/${e.details.reason}` : ''}` : String(e)))

    // The first batch fails: nothing of the range committed, the fixed handler starts the job again.
    expect(await code(replayJob(options('fixed', 'v1', failingAt(500n))))).toBe('TIDEMARK_HANDLER_FAILED')
    const messages: string[] = []
    const fixed = await replayJob({ ...options('fixed', 'v2', handler), onProgress: (p) => { if (p.phase === 'prepare') messages.push(p.message) } })
    expect(fixed).toMatchObject({ source: 'new', from: 0n, events: 2000, offset: 1999n })
    expect(fixed.digest).toBe(await digestOf(fold(0, 1999)))
    expect(messages[0]).toMatch(/again with other parameters \(fingerprint: "v1" -> "v2"\)/)
    const records = await outputs(join(root, 'out-fixed'))
    expect(records.map((r) => r.id)).toEqual(Array.from({ length: 2000 }, (_, i) => `tm1:fixed:${TOPIC}:0:${i}:0`))
    // The namespace's record is the new one: the old parameters are now the other ones.
    const refused = await replayJob(options('fixed', 'v1', handler)).catch((e: unknown) => e)
    expect(isTidemarkError(refused, 'TIDEMARK_REPLAY_JOB_EXISTS') && refused.details).toMatchObject({ reason: 'other-parameters', differences: ['fingerprint: "v2" -> "v1"'] })

    // Another owner took the partition's claim after this store's call (a call on another machine, with its own
    // store, that may have committed and delivered): refused while it holds the claim, and after it released it.
    expect(await code(replayJob(options('elsewhere', 'v1', failingAt(500n))))).toBe('TIDEMARK_HANDLER_FAILED')
    const other = await acquireClaim({ store: snapshots, job: 'elsewhere', partition: 0, takeover: 'force', leaseMs: 60_000 })
    expect(await code(replayJob(options('elsewhere', 'v2', handler)))).toBe('TIDEMARK_REPLAY_JOB_EXISTS/other-parameters')
    await other.release()
    expect(await code(replayJob(options('elsewhere', 'v2', handler)))).toBe('TIDEMARK_REPLAY_JOB_EXISTS/other-parameters')
    // The same parameters resume it as always.
    expect(await replayJob(options('elsewhere', 'v1', handler))).toMatchObject({ source: 'local', events: 2000 })

    // Two failed calls on the same store, then a fix: the claims were all this store's calls'.
    expect(await code(replayJob(options('twice', 'v1', failingAt(500n))))).toBe('TIDEMARK_HANDLER_FAILED')
    expect(await code(replayJob(options('twice', 'v1', failingAt(600n))))).toBe('TIDEMARK_HANDLER_FAILED')
    expect(await code(replayJob(options('twice', 'v2', failingAt(700n))))).toBe('TIDEMARK_HANDLER_FAILED')
    expect(await replayJob(options('twice', 'v3', handler))).toMatchObject({ source: 'new', events: 2000 })

    // A kill between the new record and the discarded store: the store is still unstarted, the next call discards it.
    expect(await code(replayJob(options('killed', 'v1', failingAt(10n))))).toBe('TIDEMARK_HANDLER_FAILED')
    const resolved = resolveReplayOptions(options('killed', 'v2', handler))
    await replaceRecord(snapshots, resolved.layout, replayRecord(resolved))
    expect(await replayJob(options('killed', 'v2', handler))).toMatchObject({ source: 'new', events: 2000 })

    // One batch committed (and its records delivered): other parameters are refused, the same ones resume.
    expect(await code(replayJob(options('started', 'v1', failingAt(1200n))))).toBe('TIDEMARK_HANDLER_FAILED')
    expect(await readPosition(join(root, 'started'))).toBe(999n)
    expect(await code(replayJob(options('started', 'v2', handler)))).toBe('TIDEMARK_REPLAY_JOB_EXISTS/other-parameters')
    // Its position is in the source its record names: another topic finds none there, and is refused too.
    const otherTopic = options('started', 'v1', handler)
    expect(await code(replayJob({ ...otherTopic, source: { ...otherTopic.source, topic: 'refunds' } }))).toBe('TIDEMARK_REPLAY_JOB_EXISTS/other-parameters')
    expect(await replayJob(options('started', 'v1', handler))).toMatchObject({ source: 'local', events: 1000 })

    // Nothing committed, but the local store is gone: what it had committed cannot be known, so refused.
    expect(await code(replayJob(options('lost', 'v1', failingAt(500n))))).toBe('TIDEMARK_HANDLER_FAILED')
    await rm(join(root, 'lost'), { recursive: true, force: true })
    expect(await code(replayJob(options('lost', 'v2', handler)))).toBe('TIDEMARK_REPLAY_JOB_EXISTS/other-parameters')
    await log.close()
  })

  it('bad options are TypeErrors and RangeErrors that name the option', async () => {
    const root = tempDir()
    const log = await sourceLog(root, 10)
    const snapshots = await store(join(root, 'snapshots'))
    const base = { job: 'bad', source: { log, topic: TOPIC, partition: 0, to: 5n }, start: 'empty' as const, handler: stateOnly, states, path: join(root, 'r'), snapshots }
    const cases: Array<[unknown, ErrorConstructor, RegExp]> = [
      [{ ...base, job: '' }, TypeError, /options\.job/],
      [{ ...base, job: 'a/b' }, RangeError, /options\.job/],
      [{ ...base, source: { ...base.source, to: 5 } }, TypeError, /options\.source\.to .*5n/],
      [{ ...base, source: { ...base.source, from: 6n } }, RangeError, /options\.source\.from/],
      [{ ...base, source: { ...base.source, log: {} } }, TypeError, /options\.source\.log/],
      [{ ...base, source: { ...base.source, partition: -1 } }, RangeError, /options\.source\.partition/],
      [{ ...base, start: 'latest' }, TypeError, /options\.start/],
      [{ ...base, start: { snapshot: 'newest', job: 'x' } }, RangeError, /options\.start\.snapshot/],
      [{ ...base, start: { offset: 5n } }, RangeError, /options\.start\.offset/],
      [{ ...base, handler: undefined }, TypeError, /options\.handler/],
      [{ ...base, output: { send: 1 } }, TypeError, /options\.output/],
      [{ ...base, snapshots: undefined }, TypeError, /options\.snapshots/],
      [{ ...base, batchSize: 0 }, RangeError, /options\.batchSize/],
      [{ ...base, checkpoints: { everyEvents: -1 } }, RangeError, /options\.checkpoints\.everyEvents/],
      [{ ...base, retries: 3 }, RangeError, /options\.retries/],
    ]
    for (const [options, type, message] of cases) {
      const err = await replayJob(options as ReplayJobOptions<Sale>).catch((e: unknown) => e)
      expect(err, JSON.stringify(options, (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v))).toBeInstanceOf(type)
      expect((err as Error).message).toMatch(message)
    }
    await log.close()
  })

  it('a mistake the store or the outputs would refuse later is refused before anything is written: the corrected call is a first call', async () => {
    const root = tempDir()
    const log = await sourceLog(root, 10)
    const snapshots = await store(join(root, 'snapshots'))
    const plain = await store(join(root, 'snapshots'))
    Object.defineProperty(plain, 'capabilities', { value: Object.freeze({ conditionalPut: false, compareAndSwap: false }) })
    const base = { job: 'fixed', source: { log, topic: TOPIC, partition: 0, to: 5n }, start: 'empty' as const, handler: stateOnly, states, path: join(root, 'r'), snapshots }
    const cases: Array<[unknown, ErrorConstructor, RegExp]> = [
      [{ ...base, states: [...states, ...states] }, RangeError, /options\.states\[1\].*twice/],
      [{ ...base, source: { ...base.source, topic: 'x'.repeat(1025) } }, RangeError, /options\.source\.topic.*1024 bytes/],
      [{ ...base, source: { ...base.source, partition: 2 ** 32 } }, RangeError, /options\.source\.partition/],
      [{ ...base, start: { offset: 2n, job: 'a/b' } }, RangeError, /options\.start\.job/],
      [{ ...base, states: [...states, { ...states[0]!, name: 'tidemark.outbox' }], output: fileLogSink({ dir: join(root, 'out') }) }, RangeError, /options\.states\[1\].*reserved/],
      [{ ...base, snapshots: plain }, RangeError, /options\.snapshots.*conditionalPut/],
    ]
    for (const [options, type, message] of cases) {
      const err = await replayJob(options as ReplayJobOptions<Sale>).catch((e: unknown) => e)
      expect(err, String((err as Error).message)).toBeInstanceOf(type)
      expect((err as Error).message).toMatch(message)
    }
    const reason = new Error('stopped before it began')
    await expect(replayJob({ ...base, signal: AbortSignal.abort(reason) })).rejects.toBe(reason)
    expect(await readdir(join(root, 'snapshots')).catch(() => [])).toEqual([])
    const result = await replayJob(base)
    expect(result.source).toBe('new')
    expect(result.events).toBe(6)
    await log.close()
  })
})

describe('tidemark replay', () => {
  function io() {
    const out = { stdout: '', stderr: '' }
    return { out, io: { stdout: { write: (t: string) => (out.stdout += t) }, stderr: { write: (t: string) => (out.stderr += t) }, isTTY: false } }
  }

  it('--help, usage mistakes (exit 2), a refused replay (exit 1) and plain progress lines', async () => {
    const root = tempDir()
    const log = await sourceLog(root, 2000)
    await log.close()
    await mkdir(join(root, 'snapshots'))
    const args = ['--job', 'cli', '--handler', OPERATOR, '--path', join(root, 'store'), '--snapshots', pathToFileURL(join(root, 'snapshots')).href,
      '--log', pathToFileURL(join(root, 'source')).href, '--topic', TOPIC, '--partition', '0', '--to', '1999', '--output', pathToFileURL(join(root, 'out')).href, '--output-no-fsync']

    let t = io()
    expect(await runReplayCommand(['--help'], t.io)).toBe(0)
    expect(t.out.stdout).toMatch(/^usage:/)
    for (const bad of [[...args, '--start', 'latest'], [...args, '--from', '3000'], args.filter((a) => a !== '--job' && a !== 'cli'), [...args, '--brokers', '127.0.0.1:1'], [...args, '--start-offset', '1999']]) {
      t = io()
      expect(await runReplayCommand(bad, t.io), bad.join(' ')).toBe(2)
      expect(t.out.stderr).toMatch(/^tidemark replay: .*\nusage:/)
    }
    t = io()
    expect(await runReplayCommand(args, t.io), t.out.stderr).toBe(0)
    expect(t.out.stdout).toMatch(/^job +cli \(new\)\n/m)
    expect(t.out.stdout).toMatch(/^digest +[0-9a-f]{64}$/m)
    // Plain lines, no carriage returns, and the last one says it all.
    expect(t.out.stderr).not.toContain('\r')
    expect(t.out.stderr).toMatch(/^replay: replay 2000\/2000 events \(100%\)$/m)
    expect(t.out.stderr).toMatch(/^replay: final snapshot \d{10}-\d{12}$/m)

    t = io()
    expect(await runReplayCommand(args.map((a) => (a === '1999' ? '1000' : a)), t.io)).toBe(1)
    expect(t.out.stderr).toMatch(/^tidemark replay: TIDEMARK_REPLAY_JOB_EXISTS: /)

    // A source log that is not there is not found (not unavailable, which would say retry).
    t = io()
    expect(await runReplayCommand(args.map((a) => (a === pathToFileURL(join(root, 'source')).href ? pathToFileURL(join(root, 'missing')).href : a)), t.io)).toBe(1)
    expect(t.out.stderr).toMatch(/^tidemark replay: TIDEMARK_LOG_NOT_FOUND: no file log at .*missing: it does not exist$/m)
  })
})
