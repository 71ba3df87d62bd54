import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { openFileLog, PartitionProcessor, type FileLog } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { fold, readTotals, saleAt, TOPIC, totals, type Sale } from './fixtures/totals.js'

// What the process allows (src/runtime/catch-up-turns.ts): a test of it has to
// fill every turn.
const TURNS = 64
const EVENTS = 12
const BATCH = 10

describe('PartitionProcessor: catch-ups of a backlog take turns per process', () => {
  it('the 65th partition behind its log waits for a turn (an abort while it waits gives 0), one within a batch does not, and nothing is lost', async () => {
    const dir = tempDir()
    let open = true
    let opened!: () => void
    const gate = new Promise<void>((resolve) => { opened = resolve })
    const entered = new Set<number>()
    let allIn!: () => void
    const full = new Promise<void>((resolve) => { allIn = resolve })
    let smallIn!: () => void
    const small = new Promise<void>((resolve) => { smallIn = resolve })
    const logs: FileLog[] = []
    const make = async (partition: number, events: number): Promise<PartitionProcessor<Sale>> => {
      const log = await openFileLog(join(dir, 'logs', String(partition)), { sync: false })
      await log.appendAll(Array.from({ length: events }, (_, i) => Buffer.from(JSON.stringify(saleAt(i)))))
      logs.push(log)
      const p = new PartitionProcessor<Sale>({
        job: 'turns', topic: TOPIC, partition, log, path: join(dir, 'stores', String(partition)), states: [totals], batchSize: BATCH,
        handler: async (tx, sale) => {
          if (!entered.has(partition)) {
            entered.add(partition)
            if (partition === TURNS + 1) smallIn()
            if (entered.size === TURNS) allIn()
          }
          // Every handler holds its catch-up (and its turn) until the gate opens.
          if (open) await gate
          const view = tx.value(totals)
          view.put(sale.key, ((await view.get(sale.key)) ?? 0) + sale.amount)
        },
      })
      await p.start()
      return p
    }
    const behind = await Promise.all(Array.from({ length: TURNS }, (_, p) => make(p, EVENTS)))
    const waiting = await make(TURNS, EVENTS)
    const within = await make(TURNS + 1, BATCH)
    const first = behind.map((p) => p.catchUp())
    await full
    // Every turn is held: the next partition behind its log waits for one...
    const abort = new AbortController()
    const waited = waiting.catchUp({ signal: abort.signal })
    // ...while one no more than a batch behind takes none and gets to its handler.
    const withinDone = within.catchUp()
    await small
    abort.abort()
    open = false
    opened()
    expect(await waited).toBe(0)
    expect(entered.has(TURNS)).toBe(false)
    expect(await withinDone).toBe(BATCH)
    expect(await Promise.all(first)).toEqual(behind.map(() => EVENTS))
    // Its turn, given back when it came, serves its next catch-up.
    expect(await waiting.catchUp()).toBe(EVENTS)
    for (const p of [...behind, waiting]) expect(await readTotals(p.store)).toEqual(fold(EVENTS - 1))
    expect(await readTotals(within.store)).toEqual(fold(BATCH - 1))
    await Promise.all([...behind, waiting, within].map((p) => p.close()))
    await Promise.all(logs.map((log) => log.close()))
  })
})
