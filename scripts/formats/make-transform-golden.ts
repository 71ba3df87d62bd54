/**
 * Writes the golden samples of offline transforms (test/formats/transform-samples.ts)
 * and what today's code reads from the records file:
 *
 *   npx tsx scripts/formats/make-transform-golden.ts [--replace]
 *
 * The manifest is the first state-versions manifest given a lineage and
 * encoded again, as a Snapshotter writes it (the lineage after `states`); the
 * records file holds one line of each kind. An existing folder is refused, and
 * --replace is only for checking that a second run gives the same bytes.
 */
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises'
import { encodeManifest, parseManifest } from '../../src/snapshot/manifest.js'
import { readStateRecords } from '../../src/transform/index.js'
import { VERSIONED_JOB } from '../../test/formats/versioned-samples.js'
import {
  LINEAGE, LINEAGE_MANIFEST, LINEAGE_SOURCE, plainEntry, RECORD_LINES, RECORDS, RECORDS_EXPECTED, recordStates, TRANSFORM_DIR,
} from '../../test/formats/transform-samples.js'

async function main(): Promise<void> {
  if (!process.argv.includes('--replace') && (await stat(TRANSFORM_DIR).catch(() => undefined)) !== undefined) {
    console.error(`${TRANSFORM_DIR} exists; committed samples are not rewritten (pass --replace only to check that a run gives the same bytes)`)
    process.exit(2)
  }
  await mkdir(TRANSFORM_DIR, { recursive: true })
  const source = parseManifest(await readFile(LINEAGE_SOURCE), { job: VERSIONED_JOB, partition: '0', epoch: 1, sequence: 0 })
  const { stateBytes, objects, files, ...head } = source
  await writeFile(LINEAGE_MANIFEST, encodeManifest({ ...head, lineage: LINEAGE, stateBytes, objects, files }))
  await writeFile(RECORDS, RECORD_LINES.map((l) => JSON.stringify(l)).join('\n') + '\n')
  const read: unknown[] = []
  for await (const entry of readStateRecords(RECORDS, recordStates())) read.push(plainEntry(entry))
  await writeFile(RECORDS_EXPECTED, `${JSON.stringify(read, null, 2)}\n`)
}

await main()
