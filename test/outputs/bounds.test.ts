import { join } from 'node:path'
import { expect, it } from 'vitest'
import { openFileLog } from '../../src/index.js'
import { fileLogSink, outboxRecordCodec, readOutbox, type OutputsEvent } from '../../src/outputs/index.js'
import { tempDir } from '../helpers/tmp.js'
import { counter, expectedCounts, readCounts, wordLog } from './fixtures.js'

it('outbox bounds: with the sink unavailable processing goes on to the limit, pauses with outbox-full, resumes with delivery, and loses nothing', async () => {
  const dir = tempDir()
  const log = await wordLog(join(dir, 'log'), 1000)
  const sink = fileLogSink({ dir: join(dir, 'out'), fileLog: { sync: false } })
  // The fault: one wrapped call of the real sink (the publisher's: the sink takes the binary form), failing while `down`.
  let down = true
  const sendEncoded = sink.sendEncoded!.bind(sink)
  sink.sendEncoded = (records) => (down ? Promise.reject(new Error('output cluster unavailable')) : sendEncoded(records))
  const p = counter(dir, log, { sink, maxOutboxRecords: 200, retry: { initialMs: 5, maxMs: 20 } }, { snapshots: undefined })
  const events: OutputsEvent[] = []
  p.on('outputs', (e) => events.push(e))
  await p.start()
  const full = new Promise<OutputsEvent>((resolve) => p.on('outputs', (e) => { if (e.type === 'outbox-full') resolve(e) }))
  const ac = new AbortController()
  const running = p.run(ac.signal)
  expect(await full).toMatchObject({ type: 'outbox-full', records: 200 })
  // Paused: the batch after the limit waits uncommitted; delivery keeps failing meanwhile.
  const failures = (): number => events.filter((e) => e.type === 'delivery-failed').length
  const before = failures()
  await new Promise<void>((resolve) => p.on('outputs', (e) => { if (e.type === 'delivery-failed' && failures() >= before + 3) resolve() }))
  expect(p.offset).toBe(199n)
  expect(await readOutbox(p.store)).toHaveLength(200)
  const failed = events.find((e) => e.type === 'delivery-failed')
  expect(failed).toMatchObject({ error: { code: 'TIDEMARK_OUTPUT_DELIVERY_FAILED', retriable: true, cause: { message: 'output cluster unavailable' } } })

  down = false
  const resumed = new Promise<void>((resolve) => p.on('outputs', (e) => { if (e.type === 'outbox-resumed') resolve() }))
  await resumed
  await new Promise<void>((resolve) => { const check = (): void => { if (p.offset === 999n) resolve() }; check(); p.on('commit', check) })
  await p.flushOutputs()
  ac.abort()
  await running
  expect(await readCounts(p)).toEqual(expectedCounts(1000))
  await p.close()
  await sink.close()

  const out = await openFileLog(join(dir, 'out', 'counts'))
  const codec = outboxRecordCodec()
  const offsets: number[] = []
  for await (const e of out.read(0n)) offsets.push(Number(codec.decode(e.data).id.split(':')[4]))
  // Every record once, in order: the failed sends wrote nothing.
  expect(offsets).toEqual(Array.from({ length: 1000 }, (_, i) => i))
  await out.close()
  await log.close()
})
