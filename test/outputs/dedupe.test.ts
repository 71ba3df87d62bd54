import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { openFileLog, PartitionStore, valueState } from '../../src/index.js'
import { DEDUPE_STATE, encodeOutboxRecord, formatRecordId, OUTBOX_STATE, readDedupeWatermarks, type OutputsEvent } from '../../src/outputs/index.js'
import { tempDir } from '../helpers/tmp.js'
import { catchUpFailingAtWrite, counts, readCounts, summer } from './fixtures.js'

/** An upstream record as a file-log sink writes it. */
function upstream(job: string, partition: number, offset: number, index = 0): Buffer {
  const id = formatRecordId({ job, topic: 'words', partition, offset: BigInt(offset), index })
  return encodeOutboxRecord({ id, topic: 'counts', partition: -1, key: Buffer.from('w'), value: Buffer.from(JSON.stringify({ word: 'w', delta: 1 })), headers: { 'tidemark-id': Buffer.from(id) } })
}

describe('dedupe on input', () => {
  it('applies each id once: keeps the highest (offset, index) per upstream job and partition, in the batch', async () => {
    const dir = tempDir()
    const log = await openFileLog(join(dir, 'log'), { sync: false })
    // Upstream 0 sends 0..9, re-sends 5..14 after a crash, then 15..19;
    // upstream 1 (another partition) interleaves with its own 0..4 and
    // a record with two emits per event; job b's ids count separately.
    for (let i = 0; i < 10; i++) await log.append(upstream('a', 0, i))
    for (let i = 0; i < 5; i++) await log.append(upstream('a', 1, i))
    for (let i = 5; i < 20; i++) await log.append(upstream('a', 0, i))
    await log.append(upstream('a', 1, 5, 0))
    await log.append(upstream('a', 1, 5, 1))
    await log.append(upstream('a', 1, 5, 0))
    await log.append(upstream('b', 0, 3))
    const p = summer(dir, log)
    const skipped: string[] = []
    p.on('outputs', (e: OutputsEvent) => { if (e.type === 'duplicate-skipped') skipped.push(e.id) })
    await p.start()
    expect(await p.catchUp()).toBe(34)
    expect(await readCounts(p)).toEqual({ w: 20 + 7 + 1 })
    expect(skipped).toEqual([...Array.from({ length: 5 }, (_, i) => `tm1:a:words:0:${i + 5}:0`), 'tm1:a:words:1:5:0'])
    expect(await readDedupeWatermarks(p.store)).toEqual(new Map([
      ['tm1:a:words:0', { offset: 19n, index: 0 }],
      ['tm1:a:words:1', { offset: 5n, index: 1 }],
      ['tm1:b:words:0', { offset: 3n, index: 0 }],
    ]))
    await p.close()
    await log.close()
  })

  it('off by default: on a plain source, records carrying tidemark-id headers (repeated ids, junk ids) all reach the handler', async () => {
    const dir = tempDir()
    const log = await openFileLog(join(dir, 'log'), { sync: false })
    for (let i = 0; i < 5; i++) await log.append(upstream('a', 0, i))
    for (let i = 0; i < 5; i++) await log.append(upstream('a', 0, i))
    await log.append(encodeOutboxRecord({ id: 'junk', topic: 'counts', partition: -1, key: null, value: Buffer.from(JSON.stringify({ word: 'w', delta: 1 })), headers: { 'tidemark-id': Buffer.from('not an id') } }))
    const p = summer(dir, log, { dedupe: undefined })
    const skipped: string[] = []
    p.on('outputs', (e: OutputsEvent) => { if (e.type === 'duplicate-skipped') skipped.push(e.id) })
    await p.start()
    expect(await p.catchUp()).toBe(11)
    expect(await readCounts(p)).toEqual({ w: 11 })
    expect(skipped).toEqual([])
    await p.close()
    await log.close()
  })

  it('the watermark commits with the batch: a failed commit moves neither, and the retry applies each record once', async () => {
    const dir = tempDir()
    const log = await openFileLog(join(dir, 'log'), { sync: false })
    for (let i = 0; i < 100; i++) await log.append(upstream('a', 0, i))
    await catchUpFailingAtWrite(summer(dir, log), 2)
    const store = await PartitionStore.open({ path: join(dir, 'summer'), states: [counts, OUTBOX_STATE, DEDUPE_STATE] })
    expect(store.position('counts', 0)).toBe(39n)
    expect(await readDedupeWatermarks(store)).toEqual(new Map([['tm1:a:words:0', { offset: 39n, index: 0 }]]))
    await store.close()
    const again = summer(dir, log)
    await again.start()
    expect(await again.catchUp()).toBe(60)
    expect(await readCounts(again)).toEqual({ w: 100 })
    await again.close()
    await log.close()
  })

  it('a tidemark-id header that does not parse stops the partition with TIDEMARK_OUTPUT_ID_INVALID', async () => {
    const dir = tempDir()
    const log = await openFileLog(join(dir, 'log'), { sync: false })
    await log.append(encodeOutboxRecord({ id: 'x', topic: 'counts', partition: -1, key: null, value: Buffer.from('{}'), headers: { 'tidemark-id': Buffer.from('tm1:a:b:01:0:0') } }))
    const p = summer(dir, log, { states: [counts, valueState('unused')] })
    await p.start()
    await expect(p.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_OUTPUT_ID_INVALID' })
    await p.close()
    await log.close()
  })
})
