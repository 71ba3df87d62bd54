// A consumer-group assignee waits for the previous owner's release
// (src/ownership/assigned.ts): onWait when it starts waiting (a
// prefetch starts there), onChange when the claim object changes, before
// the attempt that takes it (the prefetch stops there, so its reads in
// flight end during that attempt's requests).
import { join } from 'node:path'
import { afterEach, expect, it } from 'vitest'
import { acquireAsAssignee } from '../helpers/acquire-assigned.js'
import { acquireClaim, FsSnapshotStore } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'

const stores: FsSnapshotStore[] = []
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close()
})

function store(): FsSnapshotStore {
  const s = new FsSnapshotStore({ root: join(tempDir('tidemark-ownership-watch-'), 'dfs') })
  stores.push(s)
  return s
}

it('calls onWait once when the claim is held, onChange once when it is released, and then holds the claim', async () => {
  const dfs = store()
  const previous = await acquireClaim({ store: dfs, job: 'job', partition: '0', leaseMs: null })
  const seen: string[] = []
  let released: Promise<boolean> | undefined
  const { claim: ownership } = await acquireAsAssignee({
    store: dfs, job: 'job', partition: '0', waitMs: 10_000,
    onWait: () => {
      seen.push('wait')
      released = previous.release()
    },
    onChange: () => { seen.push('change') },
  })
  seen.push('claimed')
  expect(await released).toBe(true)
  expect(seen).toEqual(['wait', 'change', 'claimed'])
  expect(ownership.epoch).toBeGreaterThan(previous.epoch)
  await ownership.release()
})

it('does not call onChange when the wait ends in a takeover by force (the claim never changed)', async () => {
  const dfs = store()
  const previous = await acquireClaim({ store: dfs, job: 'job', partition: '0', leaseMs: null })
  const seen: string[] = []
  const { claim: ownership } = await acquireAsAssignee({
    store: dfs, job: 'job', partition: '0', waitMs: 200,
    onWait: () => { seen.push('wait') },
    onChange: () => { seen.push('change') },
  })
  expect(seen).toEqual(['wait'])
  expect(ownership.epoch).toBeGreaterThan(previous.epoch)
  await expect(previous.check()).rejects.toMatchObject({ code: 'TIDEMARK_OWNERSHIP_LOST' })
})
