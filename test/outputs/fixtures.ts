import { join } from 'node:path'
import { expect } from 'vitest'
import { interceptBatchWrites } from '../helpers/faults.js'
import { FsSnapshotStore, openFileLog, PartitionProcessor, valueState, type FileLog } from '../../src/index.js'
import { outboxRecordCodec, type OutboxRecord, type OutputsOptions } from '../../src/outputs/index.js'

export const counts = valueState<number>('counts')
export const WORDS = ['a', 'b', 'c', 'd', 'e', 'f', 'g']

export async function wordLog(dir: string, events: number): Promise<FileLog> {
  const log = await openFileLog(dir, { sync: false })
  for (let i = 0; i < events; i++) await log.append(Buffer.from(JSON.stringify({ word: WORDS[(i * 5) % WORDS.length] })))
  return log
}

/** Stage 1: counts per word, emits every new count (key: word, value: count). */
export function counter(root: string, log: FileLog, outputs: OutputsOptions, more: Partial<ConstructorParameters<typeof PartitionProcessor<{ word: string }>>[0]> = {}): PartitionProcessor<{ word: string }> {
  return new PartitionProcessor<{ word: string }>({
    job: 'counter', topic: 'words', partition: 0, log, path: join(root, 'counter'), states: [counts], batchSize: 50,
    snapshots: { store: new FsSnapshotStore({ root: join(root, 'snapshots') }), schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
    handler: (tx, { word }, ctx) => {
      const view = tx.value(counts)
      const n = (view.getSync(word) ?? 0) + 1
      view.put(word, n)
      ctx.emit({ topic: 'counts', key: word, value: JSON.stringify({ word, delta: 1, count: n }) })
    },
    outputs,
    ...more,
  })
}

/** Stage 2: sums deltas per word from the counter's file-log output, with dedupe. */
export function summer(root: string, log: FileLog, more: Partial<ConstructorParameters<typeof PartitionProcessor<OutboxRecord>>[0]> = {}): PartitionProcessor<OutboxRecord> {
  return new PartitionProcessor<OutboxRecord>({
    job: 'summer', topic: 'counts', partition: 0, log, path: join(root, 'summer'), states: [counts], batchSize: 40, codec: outboxRecordCodec(),
    dedupe: 'tidemark-ids',
    handler: (tx, record) => {
      const { word, delta } = JSON.parse(record.value!.toString()) as { word: string; delta: number }
      const view = tx.value(counts)
      view.put(word, (view.getSync(word) ?? 0) + delta)
    },
    ...more,
  })
}

export function expectedCounts(events: number): Record<string, number> {
  const out: Record<string, number> = {}
  for (let i = 0; i < events; i++) {
    const w = WORDS[(i * 5) % WORDS.length]!
    out[w] = (out[w] ?? 0) + 1
  }
  return out
}

export async function readCounts(p: PartitionProcessor<never> | PartitionProcessor<{ word: string }> | PartitionProcessor<OutboxRecord>): Promise<Record<string, number>> {
  const out: Record<string, number> = {}
  for await (const [k, v] of p.store.transaction().value(counts).entries()) out[k] = v
  return out
}

/**
 * Starts `p` and runs its catch-up with its `n`th LevelDB batch write failing
 * (as a crash before that commit would): the catch-up must fail with
 * TIDEMARK_COMMIT_FAILED; then closes it.
 */
export async function catchUpFailingAtWrite(p: { start(): Promise<unknown>; catchUp(): Promise<unknown>; close(): Promise<void> }, n: number): Promise<void> {
  const restore = interceptBatchWrites((i, real) => (i === n ? Promise.reject(new Error('crash before the commit')) : real()))
  try {
    await p.start()
    await expect(p.catchUp()).rejects.toMatchObject({ code: 'TIDEMARK_COMMIT_FAILED' })
  } finally {
    restore()
  }
  await p.close()
}
