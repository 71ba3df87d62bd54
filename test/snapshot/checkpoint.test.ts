import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { FsSnapshotStore, PartitionStore, restoreSnapshot, Snapshotter, type SnapshotResult } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { keyOf, kv, openKvStore, TOPIC } from './helpers.js'

const open: Array<{ close(): Promise<void> }> = []
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()))
})

/**
 * Commit n (offset n) adds key n and overwrites key n / 2: a snapshot at
 * offset P holds exactly keys 0..P, key i with the value written by commit
 * the last of i, 2i and 2i + 1 at or before P. A table file missing from a checkpoint, a
 * write-ahead log cut short or a MANIFEST ahead of its files shows as a
 * missing key, a wrong value or a store that does not open.
 */
function valueAt(i: number, position: number): string {
  const last = 2 * i + 1 <= position ? 2 * i + 1 : 2 * i <= position ? 2 * i : i
  return `${last}:${'x'.repeat(900)}`
}

async function commit(store: PartitionStore, n: number): Promise<void> {
  const tx = store.transaction()
  tx.value(kv).put(keyOf(n), Buffer.from(`${n}:${'x'.repeat(900)}`))
  tx.value(kv).put(keyOf(Math.floor(n / 2)), Buffer.from(`${n}:${'x'.repeat(900)}`))
  await tx.commit({ topic: TOPIC, partition: 0, offset: BigInt(n) })
}

async function checkRestored(dfs: FsSnapshotStore, snap: SnapshotResult, target: string): Promise<void> {
  await restoreSnapshot({ snapshotStore: dfs, job: 'job', partition: 0, target, snapshot: snap.id })
  const restored = await PartitionStore.open({ path: target, states: [kv] })
  open.push(restored)
  expect(restored.positions()).toEqual(snap.positions)
  const position = Number(snap.positions[0]!.offset)
  const view = restored.transaction().value(kv)
  let count = 0
  for await (const [key, value] of restored.scan({ gte: kv.prefix, lt: Buffer.concat([kv.prefix, Buffer.from([0xff])]), reverse: false })) {
    void key
    void value
    count++
  }
  expect(count).toBe(position + 1)
  for (const i of [0, 1, Math.floor(position / 3), Math.floor(position / 2), position - 1, position]) {
    expect(Buffer.from((await view.get(keyOf(i)))!).toString()).toBe(valueAt(i, position))
  }
}

describe('checkpoints', () => {
  for (const mode of ['open', 'close'] as const) {
    it(`checkpoint: '${mode}' snapshots taken while commits and LevelDB's compactions run restore exactly the committed state`, { timeout: 120_000 }, async () => {
      const dir = tempDir('tidemark-ckpt-')
      // A small write buffer: table files and compactions all along.
      const store = await openKvStore(join(dir, 'store'), { writeBufferSize: 256 * 1024 })
      open.push(store)
      const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
      const snapshotter = new Snapshotter({ snapshotStore: dfs, partitionStore: store, job: 'job', partition: 0, checkpoint: mode, retain: 100 })
      const snapshots: SnapshotResult[] = []
      let n = 0
      let writing = true
      const writer = (async () => {
        while (writing || n < 3000) await commit(store, n++)
      })()
      while (snapshots.length < 6) {
        // Commits go on between and during snapshots.
        const before = n
        while (n < before + 800) await new Promise((resolve) => setImmediate(resolve))
        snapshots.push(await snapshotter.takeSnapshot())
      }
      writing = false
      await writer
      await snapshotter.close()
      const positions = snapshots.map((s) => Number(s.positions[0]!.offset))
      expect(positions).toEqual([...positions].sort((a, b) => a - b))
      for (const snap of snapshots) await checkRestored(dfs, snap, join(dir, `restored-${snap.id}`))
    })
  }

  it('refuses a checkpoint mode other than open or close', async () => {
    const dir = tempDir('tidemark-ckpt-')
    const dfs = new FsSnapshotStore({ root: join(dir, 'dfs') })
    const partitionStore = await openKvStore(join(dir, 'store'))
    open.push(partitionStore)
    expect(() => new Snapshotter({ snapshotStore: dfs, partitionStore, job: 'job', partition: 0, checkpoint: 'online' as 'open' })).toThrow(/checkpoint must be 'open' or 'close', got 'online'/)
  })
})
