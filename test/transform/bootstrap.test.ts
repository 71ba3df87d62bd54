// bootstrapState: a job's partition bootstrapped from records (a JSON lines
// file as `tidemark state dump` prints them, or any iterable) instead of
// another job's snapshot, through the same machinery; the job then resumes
// right after the positions given.
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import {
  FsSnapshotStore, PartitionProcessor, bootstrapState, openFileLog, rawCodec, readClaim, readStateRecords, valueState,
  type FileLog, type SnapshotStore, type StateEntry,
} from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { NEW_STATES, TOPIC, foldRest, newHandler, oldTotals, readNewState, saleAt, transformed, type NewState, type Sale } from './fixtures/jobs.js'

const blobs = valueState<Uint8Array, 'bytes'>('blobs', { codec: rawCodec(), keyType: 'bytes' })
const scores = valueState<{ n: number; note: string }>('scores', { version: 2, upgrade: { 1: (n: number) => ({ n, note: 'from v1' }) } })
const STATES = [...NEW_STATES, blobs, scores]

async function setup(events: number): Promise<{ dir: string; log: FileLog; store: SnapshotStore }> {
  const dir = tempDir('tidemark-bootstrap-')
  const log = await openFileLog(join(dir, 'log'), { sync: false })
  onTestFinished(() => log.close())
  for (let i = 0; i < events; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
  const store = new FsSnapshotStore({ root: join(dir, 'snapshots') })
  onTestFinished(() => store.close())
  return { dir, log, store }
}

function job(path: string, log: FileLog, store: SnapshotStore): PartitionProcessor<Sale> {
  return new PartitionProcessor<Sale>({
    job: 'boot', topic: TOPIC, partition: 0, log, path, states: STATES, handler: newHandler,
    batchSize: 50, snapshots: { store, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
  })
}

/** The state as records, one JSON line each, as state dump prints them. */
function recordLines(state: NewState): string[] {
  const lines = [...state.byBucket].map(([key, value]) => JSON.stringify({ state: 'by-bucket', key, value }))
  for (const [both, value] of state.perKey) {
    const [key, subKey] = both.split('/')
    lines.push(JSON.stringify({ state: 'per-key', key, subKey, value }))
  }
  return lines
}

async function manifests(store: SnapshotStore, prefix: string): Promise<string[]> {
  const keys: string[] = []
  for await (const info of store.list(`${prefix}manifests/`)) keys.push(info.key)
  return keys
}

describe('bootstrapState', () => {
  it('from a JSON lines file: the job starts on the bootstrapped snapshot and resumes right after the positions given', async () => {
    const { dir, log, store } = await setup(260)
    const initial = transformed(oldTotals(149n))
    const file = join(dir, 'records.jsonl')
    await writeFile(file, [
      ...recordLines(initial),
      '',
      JSON.stringify({ state: 'blobs', keyBase64: Buffer.of(0, 255).toString('base64'), valueBase64: Buffer.of(1, 2, 3).toString('base64') }),
      JSON.stringify({ state: 'scores', key: 'alice', version: 1, value: 7 }),
      JSON.stringify({ state: 'scores', key: 'bob', version: 2, value: { n: 3, note: 'as is' } }),
    ].join('\n') + '\n')

    const result = await bootstrapState({
      snapshotStore: store,
      to: { job: 'boot', partition: 0 },
      states: STATES,
      records: readStateRecords(file, STATES),
      positions: [{ topic: TOPIC, partition: 0, offset: 149n }],
      batchSize: 16,
      workDir: join(dir, 'work'),
    })
    const lines = recordLines(initial).length + 3
    expect(result).toMatchObject({
      job: 'boot', partition: '0', source: { records: true }, read: lines, written: lines,
      positions: [{ topic: TOPIC, partition: 0, offset: 149n }],
      states: { 'by-bucket': initial.byBucket.size, 'per-key': initial.perKey.size, blobs: 1, scores: 2 },
    })
    expect((await readClaim(store, 'boot', 0))?.record).toMatchObject({ leaseUntil: 0, lastSnapshot: result.snapshot.key })

    const next = job(join(dir, 'job'), log, store)
    expect(await next.start()).toMatchObject({ source: 'snapshot', snapshot: result.snapshot.id, offset: 149n })
    expect(await next.catchUp()).toBe(110)
    const tx = next.store.transaction()
    expect(await readNewState(tx)).toEqual(foldRest(initial, 150n, 259n))
    expect(Buffer.from((await tx.value(blobs).get(Buffer.of(0, 255)))!)).toEqual(Buffer.of(1, 2, 3))
    expect(await tx.value(scores).get('alice')).toEqual({ n: 7, note: 'from v1' })
    expect(await tx.value(scores).get('bob')).toEqual({ n: 3, note: 'as is' })
    await next.close()
  })

  it('from any iterable, through a per-record transform; without positions the job starts at the log\'s beginning', async () => {
    const { dir, log, store } = await setup(80)
    async function* external(): AsyncGenerator<StateEntry> {
      for (let b = 0; b < 7; b++) yield { state: 'legacy-sums', key: `B-${b}`, value: { total: b * 10 } }
    }
    const result = await bootstrapState({
      snapshotStore: store,
      to: { job: 'boot', partition: 0 },
      states: STATES,
      records: external(),
      transform: (entry) => ({ state: 'by-bucket', key: (entry.key as string).replace('B-', 'b'), value: (entry.value as { total: number }).total }),
      workDir: join(dir, 'work'),
    })
    expect(result).toMatchObject({ read: 7, written: 7, positions: [] })
    const next = job(join(dir, 'job'), log, store)
    expect(await next.start()).toMatchObject({ source: 'snapshot', offset: undefined })
    await next.catchUp()
    const start: NewState = { byBucket: new Map(Array.from({ length: 7 }, (_, b) => [`b${b}`, b * 10])), perKey: new Map() }
    expect(await readNewState(next.store.transaction())).toEqual(foldRest(start, 0n, 79n))
    await next.close()
  })

  const bad: Array<[string, string, string]> = [
    ['not JSON', '{"state":', 'not-a-record'],
    ['an unknown field', '{"state":"by-bucket","key":"a","value":1,"subkey":"x"}', 'not-a-record'],
    ['a state the target does not declare', '{"state":"totals","key":"a","value":1}', 'unknown-state'],
    ['a map record without its sub-key', '{"state":"per-key","key":"a","value":1}', 'sub-key'],
    ['a value record with a sub-key', '{"state":"by-bucket","key":"a","subKey":"x","value":1}', 'sub-key'],
    ['no value', '{"state":"by-bucket","key":"a"}', 'value'],
    ['a versioned state\'s value without its version', '{"state":"scores","key":"a","value":{"n":1}}', 'version'],
    ['a keyBase64 that is not base64', '{"state":"by-bucket","keyBase64":"%%","value":1}', 'not-a-record'],
    ['both key and keyBase64', '{"state":"by-bucket","key":"a","keyBase64":"YQ==","value":1}', 'key'],
  ]
  for (const [what, line, reason] of bad) {
    it(`refuses a file with ${what} (TIDEMARK_TRANSFORM_ENTRY_INVALID, naming the line), publishes nothing and releases the claim`, async () => {
      const { dir, store } = await setup(0)
      const file = join(dir, 'records.jsonl')
      await writeFile(file, `{"state":"by-bucket","key":"b0","value":1}\n\n${line}\n`)
      const error = await bootstrapState({ snapshotStore: store, to: { job: 'boot', partition: 0 }, states: STATES, records: readStateRecords(file, STATES), workDir: join(dir, 'work') }).catch((e: unknown) => e)
      expect(error).toMatchObject({ code: 'TIDEMARK_TRANSFORM_ENTRY_INVALID', details: { reason, line: 3 }, message: expect.stringContaining(`${file} line 3`) })
      expect(await manifests(store, 'boot/0/')).toEqual([])
      expect((await readClaim(store, 'boot', 0))?.record).toMatchObject({ leaseUntil: 0 })
    })
  }
})
