import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { PartitionStore, valueState } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { lines, tidemark } from './helpers.js'

/** A --states module: counts at version 2 ({ n } from a bare number), visits unversioned. */
function statesModule(dir: string): string {
  const path = join(dir, 'states.mjs')
  const index = pathToFileURL(join(import.meta.dirname, '../../src/index.ts')).href
  writeFileSync(path, `import { valueState, mapState } from ${JSON.stringify(index)}
export const states = [valueState('counts', { version: 2, upgrade: { 1: (n) => ({ n }) } }), mapState('visits')]
`)
  return path
}

describe('tidemark state migrate', () => {
  it('rewrites a versioned state at its version, prints one JSON line per state, and state dump shows the version', async () => {
    const dir = tempDir()
    const path = join(dir, 'store')
    const counts = valueState<number>('counts')
    const store = await PartitionStore.open({ path, states: [counts] })
    const tx = store.transaction()
    for (let i = 0; i < 25; i++) tx.value(counts).put(`k${String(i).padStart(2, '0')}`, i)
    await tx.commit({ topic: 't', partition: 0, offset: 1n })
    await store.close()

    const before = lines((await tidemark('state', 'dump', path, '--state', 'counts')).stdout)
    expect(before[0]).toEqual({ state: 'counts', key: 'k00', value: 0 })
    const result = await tidemark('state', 'migrate', path, '--states', statesModule(dir), '--batch-size', '10')
    expect(result.code).toBe(0)
    expect(lines(result.stdout)).toEqual([{ state: 'counts', version: 2, scanned: 25, rewritten: 25, resumed: false }])
    expect(result.stderr).toContain('migrate counts: 25/25 values')
    const after = lines((await tidemark('state', 'dump', path, '--state', 'counts')).stdout)
    expect(after).toHaveLength(25)
    expect(after[3]).toEqual({ state: 'counts', key: 'k03', version: 2, value: { n: 3 } })

    expect(lines((await tidemark('state', 'migrate', path, '--states', statesModule(dir))).stdout)).toEqual([{ state: 'counts', version: 2, scanned: 25, rewritten: 0, resumed: false }])
    const wrong = await tidemark('state', 'migrate', path, '--states', statesModule(dir), '--state', 'visits')
    expect(wrong.code).toBe(2)
    expect(wrong.stderr).toContain('--state visits is not a versioned state of --states (counts)')
  })
})

describe('tidemark state drop', () => {
  it('deletes a state and its record from a store, and refuses a state the store does not hold', async () => {
    const dir = tempDir()
    const path = join(dir, 'store')
    const old = valueState<number>('old')
    const kept = valueState<number>('kept')
    const store = await PartitionStore.open({ path, states: [old, kept] })
    const tx = store.transaction()
    for (let i = 0; i < 5; i++) tx.value(old).put(`k${i}`, i)
    tx.value(kept).put('a', 1)
    await tx.commit({ topic: 't', partition: 0, offset: 1n })
    await store.close()
    expect(await tidemark('state', 'drop', path, '--state', 'old')).toEqual({ code: 0, stdout: '{"state":"old","deleted":5}\n', stderr: '' })
    expect(lines((await tidemark('state', 'dump', path)).stdout)).toEqual([{ state: 'kept', key: 'a', value: 1 }])
    const missing = await tidemark('state', 'drop', path, '--state', 'old')
    expect(missing.code).toBe(1)
    expect(missing.stderr).toContain('TIDEMARK_UNKNOWN_STATE')
  })
})
