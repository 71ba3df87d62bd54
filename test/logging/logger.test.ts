import { join } from 'node:path'
import { describe, expect, it, onTestFinished, vi } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import {
  FsSnapshotStore, PartitionProcessor, PartitionStore, Snapshotter, checkLogger, createStateSynchronizer, noopLogger, openFileLog, restoreSnapshot, type FileLog, type Logger,
} from '../../src/index.js'
import { addSale, saleAt, TOPIC, totals, type Sale } from '../runtime/fixtures/totals.js'
import { tempDir } from '../helpers/tmp.js'

interface Line { level: keyof Logger; fields: Record<string, unknown>; message: string }

/** A pino-shaped logger that keeps its lines; `this` must be the logger, as pino's methods need. */
function recorder(): Logger & { lines: Line[] } {
  const lines: Line[] = []
  const logger = {
    lines,
    debug(this: { lines: Line[] }, fields: object, message: string) { this.lines.push({ level: 'debug', fields: fields as Record<string, unknown>, message }) },
    info(this: { lines: Line[] }, fields: object, message: string) { this.lines.push({ level: 'info', fields: fields as Record<string, unknown>, message }) },
    warn(this: { lines: Line[] }, fields: object, message: string) { this.lines.push({ level: 'warn', fields: fields as Record<string, unknown>, message }) },
    error(this: { lines: Line[] }, fields: object, message: string) { this.lines.push({ level: 'error', fields: fields as Record<string, unknown>, message }) },
  }
  return logger
}

async function filledLog(dir: string, events: number): Promise<FileLog> {
  const log = await openFileLog(dir, { sync: false })
  onTestFinished(() => log.close())
  for (let i = 0; i < events; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
  return log
}

function processor(path: string, log: FileLog, store: FsSnapshotStore, logger?: unknown): PartitionProcessor<Sale> {
  return new PartitionProcessor<Sale>({
    job: 'log-job', topic: TOPIC, partition: 0, log, path, states: [totals], handler: addSale,
    batchSize: 100, snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    ...(logger === undefined ? {} : { logger: logger as Logger }),
  })
}

describe('logging', () => {
  it('checkLogger: none gives the no-op logger; anything that is not a logger is a TypeError naming the argument', () => {
    expect(checkLogger(undefined)).toBe(noopLogger)
    expect(() => checkLogger(null, 'options.logger')).toThrow(TypeError)
    expect(() => checkLogger(null, 'options.logger')).toThrow(/options\.logger must be a logger/)
    expect(() => checkLogger({ info() {}, warn() {}, error() {} }, 'options.logger')).toThrow(/options\.logger .*it has no debug/)
    expect(() => checkLogger(console)).not.toThrow()
  })

  it('every component takes a logger option and refuses one that is not a logger, naming it', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 1)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    expect(() => processor(join(dir, 'p'), log, snapshots, { info: () => undefined })).toThrow(/options\.logger .*it has no debug, warn, error/)
    const store = await PartitionStore.open({ path: join(dir, 'store'), states: [totals] })
    onTestFinished(() => store.close())
    expect(() => new Snapshotter({ snapshotStore: snapshots, partitionStore: store, job: 'j', partition: 0, logger: 5 as never })).toThrow(/^logger must be a logger/)
    await expect(restoreSnapshot({ snapshotStore: snapshots, job: 'j', partition: 0, target: join(dir, 'r'), logger: 'x' as never })).rejects.toThrow(/^logger must be a logger/)
    expect(() => createStateSynchronizer({ log, apply: (s: number) => s, logger: [] as never })).toThrow(/options\.logger .*it has no debug/)
    expect(() => new StatefulConsumer({ job: 'j', brokers: ['127.0.0.1:1'], topics: ['t'], stateDir: dir, states: [], handler: () => undefined, logger: {} as never })).toThrow(/options\.logger .*it has no debug/)
  })

  it('a processor, its restore and its snapshotter log through the logger (fields first, then the message); nothing reaches the console without one', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 300)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const spies = (['log', 'info', 'warn', 'error', 'debug'] as const).map((m) => vi.spyOn(console, m))
    onTestFinished(() => spies.forEach((s) => s.mockRestore()))

    const silent = processor(join(dir, 'a'), log, snapshots)
    await silent.start()
    await silent.catchUp({ end: 200n })
    await silent.snapshot()
    await silent.close()
    for (const spy of spies) expect(spy).not.toHaveBeenCalled()

    const logger = recorder()
    const logged = processor(join(dir, 'b'), log, snapshots, logger)
    await logged.start()
    await logged.catchUp()
    await logged.snapshot()
    await logged.close()
    for (const spy of spies) expect(spy).not.toHaveBeenCalled()
    const messages = logger.lines.map((l) => `${l.level} ${l.message}`)
    expect(messages).toEqual(expect.arrayContaining([
      'info restoring snapshot', 'info restore done', 'info partition started', 'info replay done', 'info snapshot committed',
    ]))
    for (const line of logger.lines) {
      expect(typeof line.message).toBe('string')
      expect(line.fields).toMatchObject({ job: 'log-job', partition: expect.anything() })
      // Offsets are text: JSON has no BigInt.
      expect(Object.values(line.fields).some((v) => typeof v === 'bigint')).toBe(false)
    }
    expect(logger.lines.find((l) => l.message === 'partition started')!.fields).toMatchObject({ source: 'snapshot', offset: '199', topic: TOPIC })
    expect(logger.lines.find((l) => l.message === 'replay done')!.fields).toMatchObject({ events: 100 })
  })

  it('a logger that throws loses its line, and nothing else: the processor runs and snapshots', async () => {
    const dir = tempDir()
    const log = await filledLog(join(dir, 'log'), 100)
    const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
    const broken = { debug() { throw new Error('d') }, info() { throw new Error('i') }, warn() { throw new Error('w') }, error() { throw new Error('e') } }
    const p = processor(join(dir, 'a'), log, snapshots, broken)
    expect((await p.start()).source).toBe('empty')
    expect(await p.catchUp()).toBe(100)
    expect(await p.snapshot()).toBeDefined()
    await p.close()
  })

  it('the synchronizer logs a conditional update that conflicted (debug) and a compact point written (info)', async () => {
    const dir = tempDir()
    const log = await openFileLog(join(dir, 'log'))
    onTestFinished(() => log.close())
    const other = await openFileLog(join(dir, 'log'))
    onTestFinished(() => other.close())
    const logger = recorder()
    const apply = (s: number, u: number) => s + u
    const a = createStateSynchronizer<number, number>({ log, apply, logger, compactPoints: { store: new FsSnapshotStore({ root: join(dir, 'points') }), prefix: 'counter/' } })
    const b = createStateSynchronizer<number, number>({ log: other, apply })
    await a.initialize(0)
    await a.fetchUpdates()
    await b.updateState((s, updates) => { updates.push(1) })
    await a.updateState((s, updates) => { updates.push(s + 1) })
    expect(a.getState()).toBe(3)
    await a.compact((s) => s)
    const messages = logger.lines.map((l) => `${l.level} ${l.message}`)
    expect(messages).toContain('debug conditional update conflicted with another write; running the generator again on the newer state')
    expect(messages).toContain('info compact point written')
  })
})
