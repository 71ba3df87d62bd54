// scripts/readme-rebalance.ts: docs/consumer-group.md's "What a rebalance
// costs now" is written from the committed figure files, never typed.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { readFigures } from '../../scripts/readme-bench.js'
import { END, renderRebalanceBlock, START } from '../../scripts/readme-rebalance.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

describe('npm run readme:bench: the rebalance costs of docs/consumer-group.md', () => {
  it('shows what the committed scaleout, failover and rolling figure files say', () => {
    const doc = readFileSync(join(ROOT, 'docs', 'consumer-group.md'), 'utf8')
    const block = doc.slice(doc.indexOf(START), doc.indexOf(END) + END.length)
    expect(block).toBe(renderRebalanceBlock(readFigures(join(ROOT, 'bench', 'results'))))
  })

  it('names a figure a file lacks "not measured", and takes the no-standbys failover from its prefixed fields', () => {
    const block = renderRebalanceBlock(new Map([
      ['failover', { moved: 3, stayedGapMsMax: 420.4, steadyGapMsMax: 310, tidemarkGapMsMax: 690, noStandbysStayedGapMsMax: 500, noStandbysTidemarkGapMsMax: 740 }],
    ]))
    const rows = block.split('\n').filter((l) => l.startsWith('| '))
    expect(rows.find((l) => l.startsWith('| SIGKILL of 1 of 4 (standbys: 1)'))).toBe('| SIGKILL of 1 of 4 (standbys: 1) | 3 | 420 ms | 310 ms | 690 ms | — |')
    expect(rows.find((l) => l.startsWith('| SIGKILL of 1 of 4 (no standbys)'))).toBe('| SIGKILL of 1 of 4 (no standbys) | — | 500 ms | not measured | 740 ms | — |')
    expect(rows.find((l) => l.startsWith('| scale-out'))).toContain('not measured')
  })
})
