import { once } from 'node:events'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { openFileLog, PartitionProcessor } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { spawnScript } from '../log/child.js'
import { addSale, fold, readTotals, saleAt, TOPIC, totals, type Sale } from './fixtures/totals.js'

// A poll interval no test outlives: only the wake of an append can bring the events in.
const NEVER = 600_000

describe('PartitionProcessor.run(): an append written in this process wakes it', () => {
  it('through the same handle, another handle, and a handle with other options, each event once', async () => {
    const dir = tempDir()
    const logDir = join(dir, 'log')
    const log = await openFileLog(logDir, { sync: false })
    // Other options: a core of its own, which coordinates through the lock file as another process would.
    const other = await openFileLog(logDir, { sync: true })
    const second = await openFileLog(logDir, { sync: false })
    const p = new PartitionProcessor<Sale>({
      job: 'wake', topic: TOPIC, partition: 0, log, path: join(dir, 'store'), states: [totals], pollIntervalMs: NEVER,
      handler: addSale,
    })
    await p.start()
    const abort = new AbortController()
    const running = p.run(abort.signal)
    const through = [log, second, other, log]
    for (let i = 0; i < through.length; i++) {
      const committed = once(p, 'commit')
      const offset = await through[i]!.append(Buffer.from(JSON.stringify(saleAt(i))))
      expect(offset).toBe(BigInt(i))
      await committed
      expect(p.offset).toBe(offset)
    }
    abort.abort()
    await running
    expect(await readTotals(p.store)).toEqual(fold(through.length - 1))
    await p.close()
    await Promise.all([log.close(), other.close(), second.close()])
  })

  it('finds the appends of another process by looking, also after a quiet spell has made its looks rarer', async () => {
    const dir = tempDir()
    const logDir = join(dir, 'log')
    const log = await openFileLog(logDir)
    await log.appendAll(Array.from({ length: 3 }, (_, i) => Buffer.from(JSON.stringify(saleAt(i)))))
    const p = new PartitionProcessor<Sale>({
      job: 'wake', topic: TOPIC, partition: 0, log, path: join(dir, 'store'), states: [totals], pollIntervalMs: 10, handler: addSale,
    })
    await p.start()
    const abort = new AbortController()
    const running = p.run(abort.signal)
    const caughtUp = (offset: bigint): Promise<void> => new Promise((resolve) => {
      const check = (): void => {
        if (p.offset === offset) {
          p.off('commit', check)
          resolve()
        }
      }
      p.on('commit', check)
      check()
    })
    await caughtUp(2n)
    // Nothing comes while the other process starts: the looks get rarer.
    const writer = spawnScript('test/runtime/fixtures/append-sales.ts', [logDir, '3', '40'])
    await writer.waitFor((line) => line === 'done')
    await caughtUp(39n)
    abort.abort()
    await running
    expect(await readTotals(p.store)).toEqual(fold(39))
    await p.close()
    await log.close()
  })
})
