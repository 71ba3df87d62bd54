import { join } from 'node:path'
import { describe, expect, expectTypeOf, it } from 'vitest'
import type { StatefulConsumerEvents } from '../../connectors/kafka/index.js'
import { asTidemarkError } from '../../src/errors.js'
import type { OutputsEvent } from '../../src/outputs/index.js'
import {
  FsSnapshotStore, PartitionProcessor, TidemarkError, openFileLog,
  type OwnershipEvent, type ProcessorEvents, type Progress, type SnapshotterEvent,
} from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { addSale, saleAt, TOPIC, totals, type Sale } from './fixtures/totals.js'

describe('typed events', () => {
  it('every error an event carries is a TidemarkError (checked by the typecheck)', () => {
    expectTypeOf<ProcessorEvents['snapshot-failed']>().toEqualTypeOf<[TidemarkError]>()
    expectTypeOf<Extract<OwnershipEvent, { type: 'renew-failed' }>['error']>().toEqualTypeOf<TidemarkError>()
    expectTypeOf<Extract<OwnershipEvent, { type: 'lost' }>['error']>().toEqualTypeOf<TidemarkError>()
    expectTypeOf<Extract<OwnershipEvent, { type: 'release-failed' }>['error']>().toEqualTypeOf<TidemarkError>()
    expectTypeOf<Extract<SnapshotterEvent, { type: 'gc-failed' }>['error']>().toEqualTypeOf<TidemarkError>()
    expectTypeOf<Extract<OutputsEvent, { type: 'delivery-failed' }>['error']>().toEqualTypeOf<TidemarkError>()
    expectTypeOf<StatefulConsumerEvents['snapshot-failed'][0]['error']>().toEqualTypeOf<TidemarkError>()
    expectTypeOf<StatefulConsumerEvents['partition-failed'][0]['error']>().toEqualTypeOf<TidemarkError>()
    expectTypeOf<StatefulConsumerEvents['record-skipped'][0]['error']>().toEqualTypeOf<TidemarkError>()
    expectTypeOf<StatefulConsumerEvents['crash'][0]['error']>().toEqualTypeOf<TidemarkError>()
  })

  it('an error that is no TidemarkError arrives wrapped, as the cause; a TidemarkError arrives as it is', () => {
    const bug = new TypeError('x is undefined')
    const wrapped = asTidemarkError(bug, 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', 'snapshot of t/0 failed', { retriable: false })
    expect(wrapped).toBeInstanceOf(TidemarkError)
    expect(wrapped).toMatchObject({ code: 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', retriable: false, cause: bug, message: 'snapshot of t/0 failed: x is undefined' })
    expect(asTidemarkError('a string', 'TIDEMARK_DFS_REQUEST_FAILED', 'gc failed')).toMatchObject({ message: 'gc failed: a string', cause: 'a string', retriable: false })
    const own = new TidemarkError('TIDEMARK_DFS_UNAVAILABLE', 'slow down')
    expect(asTidemarkError(own, 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', 'snapshot failed')).toBe(own)
  })
})

describe('progress events', () => {
  it('an idle run() reports no progress (it polls every pollIntervalMs); events that arrive are reported', async () => {
    const dir = tempDir()
    const log = await openFileLog(join(dir, 'log'), { sync: false })
    for (let i = 0; i < 10; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
    const p = new PartitionProcessor<Sale>({
      job: 'idle', topic: TOPIC, partition: 0, log, path: join(dir, 'store'), states: [totals], handler: addSale,
      pollIntervalMs: 1, snapshots: { store: new FsSnapshotStore({ root: join(dir, 'snapshots') }) },
    })
    const progress: Progress[] = []
    p.on('progress', (e) => progress.push(e))
    await p.start()
    // Counts the run loop's polls of the log (one wrapped call of the real log).
    const tail = log.tail.bind(log)
    let polls = 0
    let idle!: () => void
    let wakeAt = 30
    const reached = new Promise<void>((resolve) => { idle = resolve })
    log.tail = () => {
      if (++polls === wakeAt) idle()
      return tail()
    }
    const stop = new AbortController()
    const running = p.run(stop.signal)
    await reached
    // The replay's reports, then nothing while 30 polls found nothing.
    expect(progress.filter((e) => e.phase === 'replay' && e.final).map((e) => e.done)).toEqual([10])
    expect(progress.filter((e) => e.phase === 'process')).toEqual([])

    // Live events are still reported.
    const next = new Promise<void>((resolve) => { idle = resolve })
    wakeAt = polls + 5
    await log.append(Buffer.from(JSON.stringify(saleAt(10))))
    await next
    expect(progress.filter((e) => e.phase === 'process' && e.final).map((e) => e.done)).toEqual([1])
    stop.abort()
    await running
    await p.close()
    await log.close()
  })
})
