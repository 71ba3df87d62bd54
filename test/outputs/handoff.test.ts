import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { PartitionProcessor, PartitionStore } from '../../src/index.js'
import { DEDUPE_STATE, OUTBOX_STATE, readOutbox, type EncodedRecords, type OutputSink } from '../../src/outputs/index.js'
import { tempDir } from '../helpers/tmp.js'
import { counts, wordLog } from './fixtures.js'

const EVENTS = 3000

/** A sink that records the ids it is sent and lets `gate` decide when each send is confirmed. */
function recordingSink(gate: (send: number) => Promise<void> | undefined): { sink: OutputSink; ids: string[]; sends: () => number } {
  const ids: string[] = []
  let sends = 0
  const sink: OutputSink = {
    name: 'recording',
    send: () => Promise.reject(new Error('send() called on a sink with sendEncoded')),
    async sendEncoded(records: EncodedRecords) {
      const wait = gate(sends++)
      if (wait !== undefined) await wait
      for (let i = 0; i < records.length; i++) ids.push(String(records.record(i).headers['tidemark-id']))
    },
    close: async () => undefined,
  }
  return { sink, ids, sends: () => sends }
}

type Options = ConstructorParameters<typeof PartitionProcessor<{ word: string }>>[0]

function processor(dir: string, log: Options['log'], sink: OutputSink, outputs: Partial<NonNullable<Options['outputs']>> = {}): PartitionProcessor<{ word: string }> {
  return new PartitionProcessor<{ word: string }>({
    job: 'handoff', topic: 'words', partition: 0, log, path: join(dir, 'store'), states: [counts], batchSize: 50,
    handler: (tx, { word }, ctx) => {
      const view = tx.value(counts)
      const n = (view.getSync(word) ?? 0) + 1
      view.put(word, n)
      ctx.emit({ topic: 'out', key: word, value: String(n) })
      ctx.emit({ topic: 'out', key: null, value: word })
    },
    outputs: { sink, maxBatchRecords: 200, ...outputs },
  })
}

/** The ids of EVENTS events that emit two records each, in emit order. */
const expectedIds = Array.from({ length: EVENTS }, (_, i) => [0, 1].map((index) => `tm1:handoff:words:0:${i}:${index}`)).flat()

/** Counts the outbox reads (the store's range scans of the outbox state). */
function countOutboxScans(): { scans: () => number } {
  let scans = 0
  const scan = PartitionStore.prototype.scan
  vi.spyOn(PartitionStore.prototype, 'scan').mockImplementation(function (this: PartitionStore, ...args: Parameters<PartitionStore['scan']>) {
    const gte = args[0]?.gte
    if (gte instanceof Uint8Array && Buffer.from(gte).subarray(0, OUTBOX_STATE.prefix.length).equals(OUTBOX_STATE.prefix)) scans++
    return scan.apply(this, args)
  })
  return { scans: () => scans }
}

afterEach(() => { vi.restoreAllMocks() })

describe('outputs: committed entries handed to the publisher', () => {
  it('delivery that keeps up takes each commit\'s entries without reading the outbox back; one that falls behind reads them back; every record once, in order', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), EVENTS)
    const reads = countOutboxScans()
    // Sends 0-9 are confirmed at once; 10-19 each wait for four more commits
    // (delivery falls behind: the queue reaches its bound and the rest stays
    // in the store); from 20 on at once again.
    let commits = 0
    let caughtUp = false
    const waiting: Array<{ at: number; resolve: () => void }> = []
    const { sink, ids, sends } = recordingSink((n) => {
      if (n < 10 || n >= 20 || caughtUp) return undefined
      return new Promise<void>((resolve) => waiting.push({ at: commits + 4, resolve }))
    })
    const p = processor(dir, log, sink)
    let scansAfterFastPhase = -1
    p.on('commit', () => {
      commits++
      for (const w of waiting.splice(0)) if (commits >= w.at) w.resolve(); else waiting.push(w)
      if (sends() === 10 && scansAfterFastPhase < 0) scansAfterFastPhase = reads.scans()
    })
    await p.start()
    await p.catchUp()
    // The job is done: what still waits for commits is let go.
    caughtUp = true
    for (const w of waiting.splice(0)) w.resolve()
    await p.flushOutputs()
    await p.close()
    await log.close()
    expect(ids).toEqual(expectedIds)
    // 10 sends of 200 records kept up with 20 commits of 100 records: the
    // outbox was read at start (its count and a first fill) and at most a
    // few times since (a scan that overlapped a commit is repeated), not
    // once per commit.
    expect(scansAfterFastPhase).toBeGreaterThan(0)
    expect(scansAfterFastPhase).toBeLessThanOrEqual(4)
    // Falling behind, it read the rest back from the store.
    expect(reads.scans()).toBeGreaterThan(scansAfterFastPhase)
    const store = await PartitionStore.open({ path: join(dir, 'store'), states: [counts, OUTBOX_STATE, DEDUPE_STATE] })
    expect(await readOutbox(store)).toEqual([])
    await store.close()
  })

  it('a restart delivers what the last run committed and did not deliver (read back from the store), then goes on with the entries its commits hand over: every record once, in order', async () => {
    const dir = tempDir()
    const log = await wordLog(join(dir, 'log'), EVENTS)
    // First run: nothing is confirmed (the outbox holds every record).
    const stalled: OutputSink = { name: 'stalled', send: () => new Promise(() => undefined), sendEncoded: () => new Promise(() => undefined), close: async () => undefined }
    const first = processor(dir, log, stalled, { closeTimeoutMs: 1 })
    await first.start()
    await first.catchUp({ end: BigInt(EVENTS / 2) })
    await first.close()
    const { sink, ids } = recordingSink(() => undefined)
    const second = processor(dir, log, sink)
    await second.start()
    await second.catchUp()
    await second.flushOutputs()
    await second.close()
    await log.close()
    expect(ids).toEqual(expectedIds)
  })
})
