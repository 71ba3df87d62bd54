// What a snapshot may trust in the snapshot store: listed manifest keys only
// once their manifests verify, and its own data objects only once they are
// seen there after the manifest.
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { afterEach, describe, expect, it } from 'vitest'
import { restoreSnapshot, type SnapshotterEvent } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { fixture, levelDigest, storeDigest, type Fixture } from './helpers.js'

const fixtures: Fixture[] = []
afterEach(async () => {
  await Promise.all(fixtures.splice(0).map((f) => f.close()))
})

async function setup(events: SnapshotterEvent[] = []): Promise<Fixture> {
  const f = await fixture(tempDir('tidemark-integrity-'), 2000, { gcAfterSnapshot: false, onEvent: (e) => events.push(e) })
  fixtures.push(f)
  return f
}

async function readText(f: Fixture, key: string): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of (await f.dfs.get(key)) as Readable) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8')
}

const manifests = 'job/0/manifests/'

describe('manifests a snapshot does not trust', () => {
  it('junk at the largest epoch, the largest sequence and the next key is skipped and reported once: numbering goes on from the manifests that verify', async () => {
    const events: SnapshotterEvent[] = []
    const f = await setup(events)
    const first = await f.snapshotter.takeSnapshot()
    expect(first).toMatchObject({ epoch: 0, sequence: 0 })
    // Anyone with write access to the bucket can plant these.
    await f.dfs.put(`${manifests}9999999999-000000000000.json`, Buffer.from('junk'))
    await f.dfs.put(`${manifests}0000000000-999999999999.json`, Buffer.from('{}'))
    await f.dfs.put(`${manifests}0000000000-000000000001.json`, Buffer.from('not a manifest either'))

    await f.write(0, 500, 2)
    const second = await f.snapshotter.takeSnapshot()
    // Not fenced by the junk epoch, not exhausted by the junk sequence, and the taken next key is left alone.
    expect(second).toMatchObject({ epoch: 0, sequence: 2, key: `${manifests}0000000000-000000000002.json` })
    expect(await readText(f, `${manifests}0000000000-000000000001.json`)).toBe('not a manifest either')
    const invalid = events.filter((e) => e.type === 'manifests-invalid')
    expect(invalid).toHaveLength(1)
    expect(invalid[0]).toMatchObject({
      manifests: [
        { key: `${manifests}9999999999-000000000000.json`, reason: 'manifest-unreadable' },
        { key: `${manifests}0000000000-999999999999.json`, reason: 'manifest-unreadable' },
        { key: `${manifests}0000000000-000000000001.json`, reason: 'manifest-unreadable' },
      ],
    })

    await f.write(500, 600, 3)
    const third = await f.snapshotter.takeSnapshot()
    expect(third).toMatchObject({ epoch: 0, sequence: 3, full: false })
    expect(events.filter((e) => e.type === 'manifests-invalid')).toHaveLength(1)
    const digest = await storeDigest(f.store)
    const target = join(f.dir, 'restored')
    const restored = await restoreSnapshot({ snapshotStore: f.dfs, job: 'job', partition: 0, target })
    expect(restored.snapshot?.id).toBe(third.id)
    expect(await levelDigest(target)).toEqual(digest)
  })

  it('a manifest that verifies at the largest sequence fails the snapshot with TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED', async () => {
    const f = await setup()
    const first = await f.snapshotter.takeSnapshot()
    const doc = JSON.parse(await readText(f, first.key)) as Record<string, unknown>
    const last = 999_999_999_999
    await f.dfs.put(`${manifests}0000000000-${last}.json`, Buffer.from(`${JSON.stringify({ ...doc, sequence: last, id: `0000000000-${last}` })}\n`))
    await expect(f.snapshotter.takeSnapshot()).rejects.toMatchObject({ code: 'TIDEMARK_SNAPSHOT_NUMBERING_EXHAUSTED', retriable: false, details: { sequence: last } })
  })
})

describe('objects that vanish during the upload', () => {
  it('a data object deleted before the manifest lands fails the snapshot (retriable), the manifest is withdrawn and the previous snapshot stays the latest', async () => {
    const f = await setup()
    const previous = await f.snapshotter.takeSnapshot()
    const digest = await storeDigest(f.store)
    await f.write(0, 1000, 2)
    // Fault injection on one call: just before the manifest's put, what a gc
    // of another process (grace 0) does to the object this upload wrote.
    const put = f.dfs.put.bind(f.dfs)
    const uploaded: string[] = []
    f.dfs.put = async (key, body, options) => {
      if (key.includes('/data/')) uploaded.push(key)
      else await f.dfs.deleteMany(uploaded)
      return put(key, body, options)
    }
    const err = await f.snapshotter.takeSnapshot().catch((e: unknown) => e)
    f.dfs.put = put
    expect(uploaded).toHaveLength(1)
    expect(err).toMatchObject({ code: 'TIDEMARK_SNAPSHOT_UPLOAD_FAILED', retriable: true, details: { vanished: uploaded } })
    expect((err as Error).message).toContain(uploaded[0])
    expect((err as Error).message).toMatch(/was deleted; the previous snapshot stays the latest/)
    expect((await f.snapshotter.listSnapshots()).map((r) => r.key)).toEqual([previous.key])
    const target = join(f.dir, 'restored')
    const restored = await restoreSnapshot({ snapshotStore: f.dfs, job: 'job', partition: 0, target })
    expect(restored.snapshot?.id).toBe(previous.id)
    expect(restored.skipped).toEqual([])
    expect(await levelDigest(target)).toEqual(digest)

    // The next attempt uploads the files again and succeeds.
    const next = await f.snapshotter.takeSnapshot()
    expect(next.sequence).toBe(1) // the withdrawn manifest's number is free again
    expect((await f.snapshotter.latest())?.id).toBe(next.id)
  })
})
