// Shared by the replay tests: a source file log of sales, snapshot stores, the outputs of a replay, digests of expected states.
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { expect } from 'vitest'
import {
  decodeOutboxRecord, openFileLog, openSnapshotStore, PartitionProcessor, PartitionStore,
  type FileLog, type OutputSink, type SnapshotStore,
} from '../../src/index.js'
import { stateDigest } from '../../src/store/digest.js'
import { tempDir } from '../helpers/tmp.js'
import { handler, OUTPUT_TOPIC, saleAt, states, TOPIC, totals, type Sale } from './fixtures/operator.js'

export const EVENTS = 3000

export async function sourceLog(root: string, events = EVENTS): Promise<FileLog> {
  const log = await openFileLog(join(root, 'source'), { sync: false })
  for (let i = 0; i < events; i += 1000) {
    await Promise.all(Array.from({ length: Math.min(1000, events - i) }, (_, j) => log.append(Buffer.from(JSON.stringify(saleAt(i + j))))))
  }
  return log
}

export async function store(dir: string): Promise<SnapshotStore> {
  return openSnapshotStore(pathToFileURL(dir).href)
}

/** The records of an output file log: id and bytes, in log order. */
export async function outputs(dir: string): Promise<Array<{ id: string; bytes: string }>> {
  const log = await openFileLog(join(dir, OUTPUT_TOPIC), { readOnly: true })
  try {
    const out = []
    for await (const entry of log.read(0n)) out.push({ id: decodeOutboxRecord(entry.data).id, bytes: Buffer.from(entry.data).toString('hex') })
    return out
  } finally {
    await log.close()
  }
}

/** Distinct records by id in first-seen order; a duplicate must carry the same bytes. */
export function distinct(records: Array<{ id: string; bytes: string }>): Array<{ id: string; bytes: string }> {
  const seen = new Map<string, string>()
  for (const r of records) {
    const before = seen.get(r.id)
    if (before === undefined) seen.set(r.id, r.bytes)
    else expect(r.bytes, `duplicate ${r.id} carries the same bytes`).toBe(before)
  }
  return [...seen].map(([id, bytes]) => ({ id, bytes }))
}

/** The digest of a store that holds exactly `values` (built without the replay). */
export async function digestOf(values: Map<string, number>): Promise<string> {
  const s = await PartitionStore.open({ path: join(tempDir(), 'fold'), states })
  try {
    const tx = s.transaction()
    for (const [k, v] of values) tx.value(totals).put(k, v)
    await tx.commitWithoutPosition()
    return await stateDigest(s, states)
  } finally {
    await s.close()
  }
}

export async function readTotals(path: string): Promise<Map<string, number>> {
  const s = await PartitionStore.open({ path, states, create: false })
  try {
    const out = new Map<string, number>()
    for await (const [k, v] of s.transaction().value(totals).entries()) out.set(k, v)
    return out
  } finally {
    await s.close()
  }
}

/** A live job over the source log, with a snapshot at `at`; its outputs never get delivered (its sink is down), so its snapshot carries an outbox. */
export async function liveJob(log: FileLog, path: string, snapshots: SnapshotStore, at: bigint): Promise<string> {
  const down: OutputSink = { name: 'down', send: () => Promise.reject(new Error('the output cluster is down')), close: async () => undefined }
  const p = new PartitionProcessor<Sale>({
    job: 'live', log, topic: TOPIC, partition: 0, path, states, handler, snapshots: { store: snapshots },
    outputs: { sink: down, retry: { initialMs: 10_000 } },
  })
  await p.start()
  await p.catchUp({ end: at + 1n })
  const snap = await p.snapshot()
  await p.close()
  return snap!.id
}


export async function readPosition(path: string): Promise<bigint | undefined> {
  const s = await PartitionStore.open({ path, create: false })
  try {
    return s.position(TOPIC, 0)
  } finally {
    await s.close()
  }
}
