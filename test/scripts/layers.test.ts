// The layering rules (scripts/ci/layers.ts, CONTRIBUTING.md "Layers and
// files"): connectors import src/ only through each layer's index, src/
// imports no connector, and no source file is long without saying why.
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { checkLayers } from '../../scripts/ci/layers.js'

describe('layers', () => {
  it('the tree keeps the import and file-length rules', () => {
    expect(checkLayers(fileURLToPath(new URL('../..', import.meta.url)))).toEqual([])
  })
})
