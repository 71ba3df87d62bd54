// Today's code must read every committed v1 sample (test/fixtures/formats/v1/)
// and get what was recorded when the sample was written: a change that can no
// longer read what an earlier version wrote fails here. The samples are never
// rewritten for a change of a reader; a new format version adds a new folder.
// See docs/formats.md, and scripts/formats/make-golden.ts for how they were made.
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { serializeClaim, parseClaim } from '../../src/ownership/record.js'
import { decodeOutboxChunk, decodeOutboxRecord, encodeOutboxRecord } from '../../src/outputs/record.js'
import { OUTBOX_STATE } from '../../src/outputs/states.js'
import { encodeManifest, parseManifest } from '../../src/snapshot/manifest.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { statePrefix } from '../../src/store/keys.js'
import { tempDir } from '../helpers/tmp.js'
import { expectedPath, GOLDEN_DIR, JOB, SAMPLES, type SampleName } from './samples.js'

describe('v1 format samples', () => {
  for (const name of Object.keys(SAMPLES) as SampleName[]) {
    it(`today's code reads ${name} as recorded`, async () => {
      const expected = JSON.parse(await readFile(expectedPath(name), 'utf8')) as unknown
      // Readers work on a copy: LevelDB and the file log write when they open.
      const actual = await SAMPLES[name](GOLDEN_DIR, tempDir('tidemark-golden-'))
      expect(actual).toEqual(expected)
    })
  }

  // Re-encoding what was read gives the sample's bytes: the reader kept every field the writer wrote.
  it('a manifest read and encoded again is byte for byte the sample', async () => {
    const layout = new SnapshotLayout(JOB, 0)
    for (const sequence of [0, 1]) {
      const key = layout.manifestKey(1, sequence)
      const bytes = await readFile(join(GOLDEN_DIR, 'snapshot-store', key))
      expect(encodeManifest(parseManifest(bytes, { job: JOB, partition: '0', epoch: 1, sequence })).equals(bytes), key).toBe(true)
    }
  })

  it('claims read and serialized again are byte for byte the samples', async () => {
    for (const [path, partition] of [[join('snapshot-store', new SnapshotLayout(JOB, 0).claimKey), '0'], ['claim-held.json', '1'], ['claim-process.json', '1']] as const) {
      const bytes = await readFile(join(GOLDEN_DIR, path))
      const parsed = parseClaim(bytes, JOB, partition)
      if (!('record' in parsed)) throw new Error(`${path}: ${parsed.problem}`)
      expect(serializeClaim(parsed.record).equals(bytes), path).toBe(true)
    }
  })

  it('output records encoded again are byte for byte the output log entries and the outbox entries', async () => {
    const log = JSON.parse(await readFile(expectedPath('output-log'), 'utf8')) as { entries: Array<{ bytes: number }> }
    const segment = await readFile(join(GOLDEN_DIR, 'output-log', '00000000000000000000.seg'))
    // Entries follow the 16-byte segment header, each behind its 20-byte record header.
    let at = 16
    for (const { bytes } of log.entries) {
      const payload = segment.subarray(at + 20, at + 20 + bytes)
      expect(encodeOutboxRecord(decodeOutboxRecord(payload)).equals(payload)).toBe(true)
      at += 20 + bytes
    }
    expect(at).toBe(segment.length)

    const store = JSON.parse(await readFile(expectedPath('partition-store'), 'utf8')) as { raw: Array<[string, string]> }
    const outboxPrefix = statePrefix(OUTBOX_STATE.name).toString('hex')
    const entries = store.raw.filter(([key]) => key.startsWith(outboxPrefix)).map(([, value]) => Buffer.from(value, 'hex'))
    expect(entries.length).toBe(2)
    for (const entry of entries) {
      const records = decodeOutboxChunk(entry).records.map((r) => encodeOutboxRecord(r))
      const framed = records.flatMap((r) => [u32(r.length), r])
      expect(Buffer.concat([Buffer.from('TMC\x01', 'latin1'), u32(records.length), ...framed]).equals(entry)).toBe(true)
    }
  })
})

function u32(n: number): Buffer {
  const b = Buffer.alloc(4)
  b.writeUInt32BE(n)
  return b
}
