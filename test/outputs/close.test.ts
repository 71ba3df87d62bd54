import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { openFileLog, PartitionStore } from '../../src/index.js'
import { DEDUPE_STATE, fileLogSink, OUTBOX_STATE, readOutbox, type OutboxRecord, type OutputSink, type OutputsEvent } from '../../src/outputs/index.js'
import { resolveOutputs } from '../../src/outputs/options.js'
import { OutboxPublisher } from '../../src/outputs/publisher.js'
import { tempDir } from '../helpers/tmp.js'
import { counter, counts, wordLog } from './fixtures.js'

/** A sink whose first send waits until release() (and tells `started` when it began); later sends go straight through. */
function gatedSink(inner: OutputSink): OutputSink & { started: Promise<void>; release(): void } {
  let began!: () => void
  let release!: () => void
  const started = new Promise<void>((resolve) => { began = resolve })
  const gate = new Promise<void>((resolve) => { release = resolve })
  let first = true
  return {
    name: 'gated',
    started,
    release,
    async send(records: readonly OutboxRecord[]) {
      if (first) {
        first = false
        began()
        await gate
      }
      await inner.send(records)
    },
    close: () => inner.close(),
  }
}

async function countLog(path: string): Promise<number> {
  const log = await openFileLog(path, { readOnly: true })
  let n = 0
  for await (const _ of log.read(0n)) n++
  await log.close()
  return n
}

describe('outputs: closing', () => {
  it('close() right after start() resolves (close came during the publisher\'s first outbox scan)', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 1)
    const sink = fileLogSink({ dir: join(dir, 'out'), fileLog: { sync: false } })
    const p = counter(dir, log, { sink }, { snapshots: undefined })
    await p.start()
    await p.close()
    await sink.close()
    await log.close()
  })

  it('a publisher closed while it scans an empty outbox stops (no wait for a wake-up nobody gives)', async () => {
    const dir = tempDir()
    const store = await PartitionStore.open({ path: join(dir, 'store'), states: [OUTBOX_STATE, DEDUPE_STATE] })
    const publisher = new OutboxPublisher({ store, outputs: resolveOutputs({ sink: fileLogSink({ dir: join(dir, 'out') }) })! })
    await publisher.start()
    await publisher.close()
    await store.close()
  })

  it('a clean stop during a send waits for it and deletes what it delivered: the next start sends nothing twice', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 120)
    const files = fileLogSink({ dir: join(dir, 'out'), fileLog: { sync: false } })
    const sink = gatedSink(files)
    const p = counter(dir, log, { sink, maxBatchRecords: 30 }, { snapshots: undefined })
    await p.start()
    await p.catchUp()
    await sink.started
    const closed = p.close()
    sink.release()
    await closed
    const left = (await outboxOfStore(join(dir, 'counter'))).length
    expect(left).toBe(120 - (await countLog(join(dir, 'out', 'counts'))))

    const q = counter(dir, log, { sink: files, maxBatchRecords: 30 }, { snapshots: undefined })
    await q.start()
    await q.flushOutputs()
    await q.close()
    await files.close()
    expect(await countLog(join(dir, 'out', 'counts'))).toBe(120)
    await log.close()
  })

  it('close() stops waiting for a send after outputs.closeTimeoutMs, says so in a delivery-failed event, and keeps those records', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), 10)
    let sending!: () => void
    const sendStarted = new Promise<void>((resolve) => { sending = resolve })
    const sink: OutputSink = { name: 'stalled', send: () => { sending(); return new Promise(() => undefined) }, close: async () => undefined }
    const p = counter(dir, log, { sink, closeTimeoutMs: 50 }, { snapshots: undefined })
    const events: OutputsEvent[] = []
    p.on('outputs', (e) => events.push(e))
    await p.start()
    await p.catchUp()
    await sendStarted
    const flushed = expect(p.flushOutputs()).rejects.toMatchObject({ code: 'TIDEMARK_PROCESSOR_CLOSED' })
    await p.close()
    await flushed
    expect(events).toEqual([expect.objectContaining({ type: 'delivery-failed', error: expect.objectContaining({ code: 'TIDEMARK_OUTPUT_DELIVERY_FAILED', message: expect.stringContaining('within 50 ms') }) })])
    expect(await outboxOfStore(join(dir, 'counter'))).toHaveLength(10)
    await log.close()
  })

  it('outputs.closeTimeoutMs must be a positive integer', () => {
    const sink = fileLogSink({ dir: tempDir() })
    expect(() => resolveOutputs({ sink, closeTimeoutMs: 0 })).toThrow(/options\.outputs\.closeTimeoutMs must be a positive integer/)
    expect(resolveOutputs({ sink })!.closeTimeoutMs).toBe(10_000)
  })
})

async function outboxOfStore(path: string): Promise<OutboxRecord[]> {
  const store = await PartitionStore.open({ path, states: [counts, OUTBOX_STATE, DEDUPE_STATE] })
  try {
    return await readOutbox(store)
  } finally {
    await store.close()
  }
}
