// Today's code must read the committed samples of offline transforms
// (test/fixtures/formats/transform/) as recorded: a manifest that carries a
// lineage (read and encoded again byte for byte) and a file of state records
// (every kind of line). See docs/formats.md and
// scripts/formats/make-transform-golden.ts.
import { readFile } from 'node:fs/promises'
import { describe, expect, it } from 'vitest'
import { encodeManifest, parseManifest } from '../../src/snapshot/manifest.js'
import { readStateRecords } from '../../src/transform/index.js'
import { LINEAGE, LINEAGE_MANIFEST, plainEntry, RECORDS, RECORDS_EXPECTED, recordStates } from './transform-samples.js'
import { VERSIONED_JOB } from './versioned-samples.js'

describe('transform format samples', () => {
  it('a manifest with a lineage reads as recorded and encodes again byte for byte', async () => {
    const bytes = await readFile(LINEAGE_MANIFEST)
    const manifest = parseManifest(bytes, { job: VERSIONED_JOB, partition: '0', epoch: 1, sequence: 0 })
    expect(manifest.lineage).toBe(LINEAGE)
    expect(encodeManifest(manifest).equals(bytes)).toBe(true)
  })

  it('a records file reads as recorded', async () => {
    const expected = JSON.parse(await readFile(RECORDS_EXPECTED, 'utf8')) as unknown[]
    const read: unknown[] = []
    for await (const entry of readStateRecords(RECORDS, recordStates())) read.push(plainEntry(entry))
    expect(read).toEqual(expected)
  })
})
