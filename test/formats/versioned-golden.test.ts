// Today's code must read the committed samples of versioned states
// (test/fixtures/formats/state-versions/) and get what was recorded when they
// were written: values of versions 1, 2 and 3 (and unversioned JSON values),
// all read at version 3; the registry's version records; each manifest's
// `states`. See docs/formats.md and scripts/formats/make-versioned-golden.ts.
import { cp, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { PartitionStore } from '../../src/store/partition-store.js'
import { encodeManifest, parseManifest } from '../../src/snapshot/manifest.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { restoreSnapshot } from '../../src/snapshot/restore/index.js'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { tempDir } from '../helpers/tmp.js'
import { VERSIONED_DIR, VERSIONED_JOB, VERSIONED_SAMPLES, versionedExpectedPath, versionedStates, type VersionedSampleName } from './versioned-samples.js'

describe('state-versions format samples', () => {
  for (const name of Object.keys(VERSIONED_SAMPLES) as VersionedSampleName[]) {
    it(`today's code reads ${name} at version 3 as recorded`, async () => {
      const expected = JSON.parse(await readFile(versionedExpectedPath(name), 'utf8')) as unknown
      expect(await VERSIONED_SAMPLES[name](VERSIONED_DIR, tempDir('tidemark-golden-'))).toEqual(expected)
    })
  }

  it('a manifest with states, read and encoded again, is byte for byte the sample', async () => {
    const layout = new SnapshotLayout(VERSIONED_JOB, 0)
    for (const sequence of [0, 1, 2]) {
      const bytes = await readFile(join(VERSIONED_DIR, 'snapshot-store', layout.manifestKey(1, sequence)))
      const manifest = parseManifest(bytes, { job: VERSIONED_JOB, partition: '0', epoch: 1, sequence })
      expect(manifest.states?.length).toBe(3)
      expect(encodeManifest(manifest).equals(bytes)).toBe(true)
    }
  })

  it('code at version 2 refuses the store sample and the newest snapshot', async () => {
    const work = tempDir('tidemark-golden-')
    // On a copy: LevelDB writes when it opens.
    await cp(join(VERSIONED_DIR, 'partition-store'), join(work, 'store'), { recursive: true })
    await expect(PartitionStore.open({ path: join(work, 'store'), states: versionedStates(2), create: false }))
      .rejects.toMatchObject({ code: 'TIDEMARK_STATE_VERSION_AHEAD', details: { storedVersion: 3, declaredVersion: 2 } })
    await expect(restoreSnapshot({ snapshotStore: new FsSnapshotStore({ root: join(VERSIONED_DIR, 'snapshot-store') }), job: VERSIONED_JOB, partition: 0, target: join(work, 'r'), states: versionedStates(2) }))
      .rejects.toMatchObject({ code: 'TIDEMARK_STATE_VERSION_AHEAD' })
  })
})
