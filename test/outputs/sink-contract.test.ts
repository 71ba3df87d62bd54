import { join } from 'node:path'
import { expect, it } from 'vitest'
import { openFileLog } from '../../src/index.js'
import { fileLogSink, type OutboxRecord, type OutputSink, type OutputsEvent } from '../../src/outputs/index.js'
import { tempDir } from '../helpers/tmp.js'
import { counter, wordLog } from './fixtures.js'

/** Applies the whole log (`events` of it), waits for every output to be delivered, and closes `p` and then `rest`. */
async function catchUpAndDeliver(p: ReturnType<typeof counter>, events: number, rest: Array<{ close(): Promise<void> }>): Promise<void> {
  await p.start()
  expect(await p.catchUp()).toBe(events)
  await p.flushOutputs()
  await p.close()
  for (const r of rest) await r.close()
}

it('a sink whose send() throws instead of rejecting fails that attempt like a rejection: retried, delivered, nothing lost', async () => {
  const dir = tempDir()
  const log = await wordLog(join(dir, 'log'), 120)
  const inner = fileLogSink({ dir: join(dir, 'out'), fileLog: { sync: false } })
  let calls = 0
  // Not async: the throw comes out of the call itself (it used to escape the
  // publisher's loop as an unhandled rejection, which ends a Node process).
  const sink: OutputSink = {
    name: 'throws',
    send(records: readonly OutboxRecord[]): Promise<void> {
      if (++calls <= 2) throw new Error(`broken send ${calls}`)
      return inner.send(records)
    },
    close: () => inner.close(),
  }
  const p = counter(dir, log, { sink, retry: { initialMs: 1, maxMs: 5 } }, { snapshots: undefined })
  const events: OutputsEvent[] = []
  p.on('outputs', (e) => events.push(e))
  await catchUpAndDeliver(p, 120, [sink, log])
  const failed = events.filter((e) => e.type === 'delivery-failed')
  expect(failed.map((e) => (e.type === 'delivery-failed' ? [e.error.code, e.attempt, /broken send/.test(e.error.message)] : []))).toEqual([
    ['TIDEMARK_OUTPUT_DELIVERY_FAILED', 1, true],
    ['TIDEMARK_OUTPUT_DELIVERY_FAILED', 2, true],
  ])
  const out = await openFileLog(join(dir, 'out', 'counts'), { readOnly: true })
  let delivered = 0
  for await (const entry of out.read(0n)) if (entry.data.byteLength > 0) delivered++
  await out.close()
  expect(delivered).toBe(120)
})

it('an outputs listener that throws does not stop delivery (it ended the delivery loop, an unhandled rejection)', async () => {
  const dir = tempDir()
  const log = await wordLog(join(dir, 'log'), 60)
  const sink = fileLogSink({ dir: join(dir, 'out'), fileLog: { sync: false } })
  const p = counter(dir, log, { sink }, { snapshots: undefined })
  const seen: string[] = []
  p.on('outputs', (e) => {
    seen.push(e.type)
    throw new Error(`the listener's bug on ${e.type}`)
  })
  await catchUpAndDeliver(p, 60, [sink, log])
  expect(seen).toContain('delivered')
  const out = await openFileLog(join(dir, 'out', 'counts'), { readOnly: true })
  expect(await out.tail()).toBe(60n)
  await out.close()
})
