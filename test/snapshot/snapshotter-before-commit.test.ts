// The snapshotter's beforeCommit hook: where an owner proves it still holds
// the partition (claim.check()) right before the manifest, the commit point.
import { afterEach, describe, expect, it } from 'vitest'
import { Snapshotter, TidemarkError } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { fixture, type Fixture } from './helpers.js'

const fixtures: Fixture[] = []
afterEach(async () => {
  await Promise.all(fixtures.splice(0).map((f) => f.close()))
})

async function setup(beforeCommit: () => Promise<void>): Promise<Fixture> {
  const f = await fixture(tempDir('tidemark-before-commit-'), 500, { gcAfterSnapshot: false, beforeCommit })
  fixtures.push(f)
  return f
}

async function listKeys(f: Fixture, prefix: string): Promise<string[]> {
  const keys: string[] = []
  for await (const entry of f.dfs.list(prefix)) keys.push(entry.key)
  return keys
}

describe('Snapshotter beforeCommit', () => {
  it('is called once per snapshot after the data objects are uploaded and before the manifest is written', async () => {
    const seen: { manifests: string[]; data: string[] }[] = []
    const f = await setup(async () => {
      seen.push({ manifests: await listKeys(f, 'job/0/manifests/'), data: await listKeys(f, 'job/0/data/') })
    })
    const first = await f.snapshotter.takeSnapshot()
    expect(seen).toHaveLength(1)
    expect(seen[0]!.manifests).toEqual([])
    expect(seen[0]!.data).toEqual(first.objects)
    await f.write(0, 100, 2)
    const second = await f.snapshotter.takeSnapshot()
    expect(seen).toHaveLength(2)
    expect(seen[1]!.manifests).toEqual([first.key])
    expect(second.sequence).toBe(1)
  })

  it('a TidemarkError it rejects with fails the snapshot as it is (not a retriable upload failure): no manifest, the uploaded objects stay for gc', async () => {
    const lost = new TidemarkError('TIDEMARK_OWNERSHIP_LOST', 'taken over', { details: { reason: 'taken-over' } })
    let fail = true
    const f = await setup(async () => {
      if (fail) throw lost
    })
    const err = await f.snapshotter.takeSnapshot().catch((e: unknown) => e)
    expect(err).toBe(lost)
    expect(err).toMatchObject({ code: 'TIDEMARK_OWNERSHIP_LOST', retriable: false })
    expect(await listKeys(f, 'job/0/manifests/')).toEqual([])
    const orphans = await listKeys(f, 'job/0/data/')
    expect(orphans.length).toBeGreaterThan(0)
    expect(f.snapshotter.inFlight).toBe(false)

    // Not stuck: the next snapshot commits, and gc (no grace) takes the orphans.
    fail = false
    const next = await new Snapshotter({ snapshotStore: f.dfs, partitionStore: f.store, job: 'job', partition: 0, graceMs: 0 }).takeSnapshot()
    expect(next.sequence).toBe(0)
    expect(next.gc?.deletedObjects).toEqual(expect.arrayContaining(orphans))
  })

  it('any other rejection fails the snapshot with that error too', async () => {
    const boom = new Error('boom')
    const f = await setup(async () => { throw boom })
    await expect(f.snapshotter.takeSnapshot()).rejects.toBe(boom)
    expect(await listKeys(f, 'job/0/manifests/')).toEqual([])
  })

  it('is validated at construction', async () => {
    const f = await fixture(tempDir('tidemark-before-commit-'), 0)
    fixtures.push(f)
    expect(() => new Snapshotter({ snapshotStore: f.dfs, partitionStore: f.store, job: 'job', partition: 0, beforeCommit: 'yes' as unknown as () => Promise<void> }))
      .toThrow(/beforeCommit must be a function/)
  })
})
