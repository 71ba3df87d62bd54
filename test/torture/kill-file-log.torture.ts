// SIGKILLs over commit, snapshot upload, manifest write, GC, restore download
// and replay, on the embedded file log, with the file-system and radosgw
// snapshot stores. See kill-run.ts.
import { describe, it } from 'vitest'
import { tempDir } from '../helpers/tmp.js'
import { recordFigures, rng, scaled } from './common.js'
import { killLoop, type KillFigures } from './kill-run.js'

// 220 kills in the full run over the two test files (2 x 70 here, 2 x 40 on
// Kafka, whose owners start slower), 30 in CI (2 x 11 here, 2 x 4 on Kafka).
const KILLS = scaled(11, 70)
// Bounds, about three times what a run takes on an idle 2-core machine.
const BUDGET_MS = scaled(100_000, 480_000)

describe('SIGKILL torture on the file log', () => {
  for (const store of ['fs', 's3'] as const) {
    it(`${KILLS} kills with the ${store} snapshot store: every restart starts from the fold of the log up to its position`, async () => {
      const figures: KillFigures = { kills: 0, restarts: 0, unreached: 0, killPoints: {}, killCombos: {} }
      try {
        await killLoop({ root: tempDir('tidemark-torture-kill-'), log: 'file', store, kills: KILLS, budgetMs: BUDGET_MS, rng: rng(`kill-file-${store}`), figures })
      } finally {
        recordFigures(`kill-file-${store}`, { ...figures })
      }
    })
  }
})
