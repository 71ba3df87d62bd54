import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { PartitionProcessor, PartitionStore, mapState, openFileLog, type Logger, type RecordedState } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { addSale, saleAt, TOPIC, totals, type Sale } from './fixtures/totals.js'

describe('states the program no longer lists', () => {
  it('are reported once at start, by an event and a log line, and kept', async () => {
    const dir = tempDir()
    const path = join(dir, 'store')
    const legacy = mapState<number>('legacy')
    const store = await PartitionStore.open({ path, states: [totals, legacy] })
    const tx = store.transaction()
    tx.map(legacy).put('a', 'b', 1)
    await tx.commitWithoutPosition()
    await store.close()

    const log = await openFileLog(join(dir, 'log'), { sync: false })
    for (let i = 0; i < 20; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
    const warnings: Array<{ fields: Record<string, unknown>; message: string }> = []
    const logger: Logger = {
      debug: () => undefined, info: () => undefined, error: () => undefined,
      warn: (fields: object, message: string) => { warnings.push({ fields: fields as Record<string, unknown>, message }) },
    } as unknown as Logger
    const p = new PartitionProcessor<Sale>({ job: 'undeclared', topic: TOPIC, partition: 0, log, path, states: [totals], handler: addSale, logger })
    const reported: RecordedState[][] = []
    p.on('states-undeclared', (states) => reported.push(states))
    await p.start()
    await p.catchUp()
    await p.close()
    expect(reported).toEqual([[{ name: 'legacy', kind: 'map' }]])
    const warned = warnings.filter((w) => w.message.includes('states the program does not list'))
    expect(warned).toHaveLength(1)
    expect(warned[0]!.fields).toMatchObject({ job: 'undeclared', states: ['legacy'] })

    const again = await PartitionStore.open({ path, states: [totals, legacy] })
    expect(await again.transaction().map(legacy).get('a', 'b')).toBe(1)
    await again.close()
    await log.close()
  })
})
