import { describe, expect, it } from 'vitest'
import { dropState, mapState, valueState } from '../../src/index.js'
import { interceptBatchWrites } from '../helpers/faults.js'
import { openStores } from '../helpers/open-stores.js'
import { tempDir } from '../helpers/tmp.js'

const kept = valueState<number>('kept')
const old = mapState<number>('old')

const stores = openStores()
const openStore = stores.open
const close = stores.close

async function fill(path: string): Promise<void> {
  const store = await openStore(path, [kept, old])
  const tx = store.transaction()
  for (let i = 0; i < 10; i++) {
    tx.value(kept).put(`k${i}`, i)
    tx.map(old).put(`k${i}`, 's', i)
  }
  await tx.commit({ topic: 't', partition: 0, offset: 1n })
  await close(store)
}

describe('states the program no longer lists', () => {
  it('are kept by an open without them, and dropState removes one on purpose', async () => {
    const path = tempDir()
    await fill(path)
    let store = await openStore(path, [kept])
    expect(store.recordedStates()).toEqual([{ name: 'kept', kind: 'value' }, { name: 'old', kind: 'map' }])
    expect(store.isDeclared('old')).toBe(false)
    await close(store)
    // Still there for a program that lists it again.
    store = await openStore(path, [kept, old])
    expect(await store.transaction().map(old).get('k3', 's')).toBe(3)
    await expect(dropState(store, 'old')).rejects.toThrow(/state "old" is one of the states the store was opened with/)
    await close(store)

    store = await openStore(path, [kept])
    await expect(dropState(store, 'nope')).rejects.toMatchObject({ code: 'TIDEMARK_UNKNOWN_STATE' })
    expect(await dropState(store, 'old', { batchSize: 3 })).toEqual({ state: 'old', deleted: 10 })
    expect(store.recordedStates()).toEqual([{ name: 'kept', kind: 'value' }])
    await close(store)
    store = await openStore(path, [kept, old])
    expect(await store.transaction().map(old).get('k3', 's')).toBeUndefined()
    expect(await store.transaction().value(kept).get('k3')).toBe(3)
  })

  it('a drop stopped halfway leaves the state listed, and a second run finishes it', async () => {
    const path = tempDir()
    await fill(path)
    let store = await openStore(path, [kept])
    const restore = interceptBatchWrites((n, real) => (n === 2 ? Promise.reject(new Error('killed')) : real()))
    try {
      await expect(dropState(store, 'old', { batchSize: 4 })).rejects.toThrow(/killed/)
    } finally {
      restore()
    }
    await close(store)
    store = await openStore(path, [kept])
    expect(store.recordedStates().map((s) => s.name)).toEqual(['kept', 'old'])
    expect(await dropState(store, 'old', { batchSize: 4 })).toEqual({ state: 'old', deleted: 6 })
    expect(store.recordedStates().map((s) => s.name)).toEqual(['kept'])
  })
})
