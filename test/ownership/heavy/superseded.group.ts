// A superseded acquire must not steal the claim (docs/ownership.md). The
// reproduction of the chaos runs, with real signals: A owns the partition
// and dies without a release; B is assigned it and waits for A's release;
// B is SIGSTOPped; C is assigned it (a newer generation) and takes the
// claim by force; B is SIGCONTed after its own deadline. B must give up
// (TIDEMARK_OWNERSHIP_CONFLICT, reason superseded), and C keeps the claim.
import { join } from 'node:path'
import { setTimeout as delay } from 'node:timers/promises' // ok: see its one use
import { expect, it, onTestFinished } from 'vitest'
import { acquireClaim, FsSnapshotStore } from '../../../src/index.js'
import { spawnScript } from '../../log/child.js'
import { tempDir } from '../../helpers/tmp.js'

it('a member paused while it waits for a release, resumed after another member took the claim, does not take it back', async () => {
  const root = join(tempDir('tidemark-superseded-'), 'snapshots')
  const store = new FsSnapshotStore({ root })
  onTestFinished(() => store.close())
  // A: held without a lease (a group's claim), never released (SIGKILLed).
  const a = await acquireClaim({ store, job: 'job', partition: 'src-0', leaseMs: null })
  const waitMs = 1500
  const b = spawnScript('test/ownership/fixtures/assigned-child.ts', [root, 'job', 'src-0', String(waitMs)])
  await b.waitFor((line) => line === 'WAITING')
  b.proc.kill('SIGSTOP')
  // C, assigned later, does not wait for the dead A: it forces.
  const c = await acquireClaim({ store, job: 'job', partition: 'src-0', leaseMs: null, takeover: 'force', minEpoch: a.epoch })
  // B's deadline passes while it is stopped (its monotonic clock runs on): the scenario is time passing, so the test lets it pass.
  await delay(waitMs + 100) // ok: the time B sleeps through is the subject of the test
  b.proc.kill('SIGCONT')
  const result = JSON.parse(await b.waitFor((line) => line.startsWith('{'))) as { ok: boolean; code?: string; reason?: string }
  expect(result).toMatchObject({ ok: false, code: 'TIDEMARK_OWNERSHIP_CONFLICT', reason: 'superseded' })
  await expect(c.check()).resolves.toBeUndefined()
  await c.release()
})
