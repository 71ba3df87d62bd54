// Partition stores a test opens, closed after each test (pass or fail).
import { afterEach } from 'vitest'
import { PartitionStore } from '../../src/index.js'
import type { StateDefinition } from '../../src/index.js'

export interface OpenStores {
  /** Opens the store at `path` with `states`; it is closed after the test unless closed before. */
  open(path: string, states: StateDefinition[]): Promise<PartitionStore>
  /** Closes a store opened here, now (to reopen its directory). */
  close(store: PartitionStore): Promise<void>
}

/** Call at the top of a test file: registers the afterEach that closes what is still open. */
export function openStores(): OpenStores {
  const open: PartitionStore[] = []
  afterEach(async () => {
    await Promise.all(open.splice(0).map((s) => s.close()))
  })
  return {
    async open(path, states) {
      const store = await PartitionStore.open({ path, states })
      open.push(store)
      return store
    },
    async close(store) {
      open.splice(open.indexOf(store), 1)
      await store.close()
    },
  }
}
