// What a reader of today does with a newer version or an unknown field of
// each format, as docs/formats.md specifies: each case is a golden v1 sample
// with its version (or one field) changed.
import { cp, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { isTidemarkError } from '../../src/errors.js'
import { openFileLog } from '../../src/log/file-log/index.js'
import { parseClaim } from '../../src/ownership/record.js'
import { parseRecordId } from '../../src/outputs/id.js'
import { decodeOutboxChunk, decodeOutboxRecord } from '../../src/outputs/record.js'
import { checkSame, recordKey, type ReplayRecord } from '../../src/replay/record.js'
import { listManifests, readManifest } from '../../src/snapshot/catalog.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { parseManifest } from '../../src/snapshot/manifest.js'
import { restoreSnapshot } from '../../src/snapshot/restore/index.js'
import { readMarker, STORE_MARKER } from '../../src/store/store-dir.js'
import { decodeCompactPoint } from '../../src/synchronizer/compact-point.js'
import { decodeEntry } from '../../src/synchronizer/entry.js'
import { createStateSynchronizer } from '../../src/synchronizer/state-synchronizer.js'
import { tempDir } from '../helpers/tmp.js'
import { applyTally, COMPACT_PREFIX, expectedPath, GOLDEN_DIR, JOB, REPLAY_JOB, plain, type Tally, type TallyUpdate } from './samples.js'

async function copyOf(name: string): Promise<string> {
  const to = join(tempDir('tidemark-formats-'), name)
  await cp(join(GOLDEN_DIR, name), to, { recursive: true })
  return to
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(() => { throw new Error('expected a rejection') }, (err: unknown) => err)
}

function thrown(fn: () => unknown): unknown {
  try {
    fn()
  } catch (err) {
    return err
  }
  throw new Error('expected a throw')
}

const layout = new SnapshotLayout(JOB, 0)
const FIRST = layout.manifestKey(1, 0)
const SECOND = layout.manifestKey(1, 1)

describe('snapshot manifest', () => {
  it('a newer version is TIDEMARK_SNAPSHOT_CORRUPT with details.newerVersion; a restore skips that snapshot for an older one', async () => {
    const root = await copyOf('snapshot-store')
    const body = JSON.parse(await readFile(join(root, SECOND), 'utf8')) as Record<string, unknown>
    const third = layout.manifestKey(1, 2)
    await writeFile(join(root, third), JSON.stringify({ ...body, version: 2, id: '0000000001-000000000002', sequence: 2 }))
    const store = new FsSnapshotStore({ root })
    const ref = (await listManifests(store, layout)).find((r) => r.key === third)!
    const err = await rejection(readManifest(store, layout, ref))
    expect(isTidemarkError(err, 'TIDEMARK_SNAPSHOT_CORRUPT') && err.details).toMatchObject({ reason: 'manifest-unreadable', newerVersion: 2 })

    const result = await restoreSnapshot({ snapshotStore: store, job: JOB, partition: 0, target: join(root, '..', 'restored'), fsync: false })
    expect(result.snapshot?.id).toBe('0000000001-000000000001')
    expect(result.skipped.map((s) => [s.id, s.reason])).toEqual([['0000000001-000000000002', 'manifest-unreadable']])
  })

  it('unknown fields, at the top or in a file entry, are ignored and not kept', async () => {
    const bytes = await readFile(join(GOLDEN_DIR, 'snapshot-store', FIRST))
    const body = JSON.parse(bytes.toString('utf8')) as { files: Array<Record<string, unknown>> }
    const extended = { ...body, compression: 'zstd', files: body.files.map((f) => ({ ...f, mode: 420 })) }
    const expect1 = { job: JOB, partition: '0', epoch: 1, sequence: 0 }
    expect(parseManifest(Buffer.from(`${JSON.stringify(extended)}\n`), expect1)).toEqual(parseManifest(bytes, expect1))
  })
})

describe('claim', () => {
  it('another format is a problem (an unreadable claim); unknown fields are ignored but kept in the record', async () => {
    const bytes = await readFile(join(GOLDEN_DIR, 'claim-held.json'))
    const body = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>
    expect(parseClaim(Buffer.from(JSON.stringify({ ...body, format: 'tidemark-claim/2' })), JOB, '1')).toEqual({ problem: `format is "tidemark-claim/2", not 'tidemark-claim/1'` })
    const parsed = parseClaim(Buffer.from(JSON.stringify({ ...body, zone: 'eu-1' })), JOB, '1')
    expect(parsed).toEqual({ record: { ...body, zone: 'eu-1' } })
  })
})

describe('file log segment', () => {
  it('a segment of another version (its magic\'s last byte) is TIDEMARK_LOG_CORRUPT, at open for the last segment', async () => {
    const dir = await copyOf('output-log')
    const path = join(dir, '00000000000000000000.seg')
    const bytes = await readFile(path)
    bytes[7] = 2
    await writeFile(path, bytes)
    for (const readOnly of [false, true]) {
      const err = await rejection(openFileLog(dir, { readOnly }))
      expect(isTidemarkError(err, 'TIDEMARK_LOG_CORRUPT')).toBe(true)
      expect((err as Error).message).toContain('another format version')
    }
    // Nothing was repaired or cut: the segment is as it was.
    expect((await readFile(path)).equals(bytes)).toBe(true)
  })
})

describe('output records', () => {
  it('a record or an outbox entry of another magic or version, or with bytes past its end, is refused', async () => {
    const expected = JSON.parse(await readFile(expectedPath('partition-store'), 'utf8')) as { raw: Array<[string, string]> }
    // The outbox entries are the raw values that start with TMC\x01.
    const entry = Buffer.from(expected.raw.map(([, v]) => v).find((v) => v.startsWith('544d4301'))!, 'hex')
    const record = entry.subarray(12, 12 + entry.readUInt32BE(8))
    expect(decodeOutboxRecord(record).id).toBe('tm1:orders:orders:0:10:0')
    const newer = Buffer.from(record)
    newer[3] = 2
    expect(() => decodeOutboxRecord(newer)).toThrow(/no TMO\\x01 magic/)
    expect(() => decodeOutboxRecord(Buffer.concat([record, Buffer.of(0)]))).toThrow(/1 trailing bytes/)
    const newerEntry = Buffer.from(entry)
    newerEntry[3] = 2
    expect(() => decodeOutboxChunk(newerEntry)).toThrow(/no TMC\\x01 magic/)
  })

  it('a record id of another tag is TIDEMARK_OUTPUT_ID_INVALID', () => {
    expect(parseRecordId('tm1:orders:orders:0:10:0')).toEqual({ job: 'orders', topic: 'orders', partition: 0, offset: 10n, index: 0 })
    const err = thrown(() => parseRecordId('tm2:orders:orders:0:10:0'))
    expect(isTidemarkError(err, 'TIDEMARK_OUTPUT_ID_INVALID')).toBe(true)
  })
})

describe('state synchronizer', () => {
  it('a compact point of another version is skipped for the one before it; the state comes out the same', async () => {
    const dir = await copyOf('sync-log')
    const root = await copyOf('snapshot-store')
    const newest = join(root, COMPACT_PREFIX, '00000000000000000006-00000000c0de.compact')
    const body = await readFile(newest)
    expect('state' in decodeCompactPoint(body, 6n)).toBe(true)
    body[4] = 2
    await writeFile(newest, body)
    expect(decodeCompactPoint(body, 6n)).toEqual({ problem: 'unknown format version 2' })

    const log = await openFileLog(dir)
    const sync = createStateSynchronizer<Tally, TallyUpdate>({ log, apply: applyTally, compactPoints: { store: new FsSnapshotStore({ root }), prefix: COMPACT_PREFIX } })
    try {
      await sync.fetchUpdates()
      const expected = JSON.parse(await readFile(expectedPath('sync-log'), 'utf8')) as { synchronized: unknown }
      expect({ state: plain(sync.getState()), revision: plain(sync.getRevision()) }).toEqual(expected.synchronized)
    } finally {
      await sync.close()
      await log.close()
    }
  })

  it('a log entry of another version is TIDEMARK_DECODE_FAILED', () => {
    expect(decodeEntry(Buffer.of(1, 2, 0, 0, 0, 0), 9n, 'x')).toEqual({ kind: 'updates', updates: [] })
    const err = thrown(() => decodeEntry(Buffer.of(2, 2, 0, 0, 0, 0), 9n, 'x'))
    expect(isTidemarkError(err, 'TIDEMARK_DECODE_FAILED')).toBe(true)
  })
})

describe('store marker', () => {
  it('is a proof whatever its format number, as long as its kind is known', async () => {
    const dir = await copyOf('partition-store')
    const marker = JSON.parse(await readFile(join(dir, STORE_MARKER), 'utf8')) as Record<string, unknown>
    await writeFile(join(dir, STORE_MARKER), JSON.stringify({ ...marker, format: 2, extra: true }))
    expect(await readMarker(dir)).toMatchObject({ format: 2, kind: 'store' })
    await writeFile(join(dir, STORE_MARKER), JSON.stringify({ ...marker, kind: 'archive' }))
    expect(await readMarker(dir)).toBeUndefined()
  })
})

describe('replay record', () => {
  it('is compared whole: an unknown field makes it another replay (TIDEMARK_REPLAY_JOB_EXISTS)', async () => {
    const key = recordKey(new SnapshotLayout(REPLAY_JOB, 0))
    const stored = JSON.parse(await readFile(join(GOLDEN_DIR, 'snapshot-store', key), 'utf8')) as ReplayRecord
    expect(() => checkSame(stored, stored, 'the sample', key)).not.toThrow()
    const err = thrown(() => checkSame({ ...stored, parallelism: 2 }, stored, 'the sample', key))
    expect(isTidemarkError(err, 'TIDEMARK_REPLAY_JOB_EXISTS') && err.details).toMatchObject({ reason: 'other-parameters', differences: ['parallelism: 2 -> absent'] })
  })
})
