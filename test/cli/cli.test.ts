import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { expect, it } from 'vitest'
import { FsSnapshotStore, PartitionStore, Snapshotter, valueState } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'

const run = promisify(execFile)
const cli = (...args: string[]) => run(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '../../src/cli/main.ts'), ...args])

it('lists positions and snapshots, restores a snapshot and collects garbage', async () => {
  const dir = tempDir()
  const counts = valueState<number>('counts')
  const store = await PartitionStore.open({ path: join(dir, 'store'), states: [counts] })
  const tx = store.transaction()
  tx.value(counts).put('a', 1)
  await tx.commit({ topic: 't', partition: 0, offset: 41n })
  const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
  const snap = await new Snapshotter({ snapshotStore: snapshots, partitionStore: store, job: 'j', partition: 0 }).takeSnapshot()
  await store.close()

  const positions = JSON.parse((await cli('positions', join(dir, 'store'))).stdout)
  expect(positions.positions).toEqual([{ topic: 't', partition: 0, offset: '41' }])
  const url = `file://${join(dir, 'snapshots')}`
  const listed = JSON.parse((await cli('snapshots', url, '--job', 'j', '--partition', '0')).stdout)
  expect(listed).toMatchObject([{ id: snap.id, positions: [{ offset: '41' }] }])
  const restored = await cli('restore', url, '--job', 'j', '--partition', '0', '--target', join(dir, 'restored'))
  expect(JSON.parse(restored.stdout)).toMatchObject({ source: 'snapshot', positions: [{ offset: '41' }] })
  expect(restored.stderr).toContain('bytes')
  const gc = JSON.parse((await cli('gc', url, '--job', 'j', '--partition', '0', '--retain', '1')).stdout)
  expect(gc.retained).toEqual([snap.id])
  await expect(cli('restore', url, '--job', 'j')).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('missing --partition') })
  await expect(cli('positions', join(dir, 'nope', 'file'), '--bogus')).rejects.toMatchObject({ code: 2 })
})
