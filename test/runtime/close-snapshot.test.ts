// close() with snapshots.onClose takes a last snapshot only when something
// was committed since this owner's last one (docs/processor.md, "Explicit
// snapshots"). Store requests are counted by wrapping the store's put().
import { join } from 'node:path'
import { expect, it, onTestFinished } from 'vitest'
import { FsSnapshotStore, PartitionProcessor, openFileLog, type FileLog } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { addSale, saleAt, TOPIC, totals, type Sale } from './fixtures/totals.js'

const JOB = 'close-job'

interface Setup { log: FileLog; processor: PartitionProcessor<Sale>; puts: string[]; another(options: { path: string; onClose: boolean }): PartitionProcessor<Sale> }

async function setup(): Promise<Setup> {
  const dir = tempDir('tidemark-close-')
  const log = await openFileLog(join(dir, 'log'), { sync: false })
  onTestFinished(() => log.close())
  for (let i = 0; i < 200; i++) await log.append(Buffer.from(JSON.stringify(saleAt(i))))
  const store = new FsSnapshotStore({ root: join(dir, 'snapshots') })
  onTestFinished(() => store.close())
  const puts: string[] = []
  const put = store.put.bind(store)
  store.put = (key, ...rest) => {
    puts.push(key)
    return put(key, ...rest)
  }
  const another = (options: { path: string; onClose: boolean }): PartitionProcessor<Sale> => new PartitionProcessor<Sale>({
    job: JOB, topic: TOPIC, partition: 0, log, path: join(dir, options.path), states: [totals], handler: addSale, batchSize: 50,
    snapshots: { store, onClose: options.onClose, schedule: { intervalMs: 0, everyEvents: 0, everyBytes: 0 } },
  })
  return { log, processor: another({ path: 'state', onClose: true }), puts, another }
}

it('a close right after a snapshot, with nothing committed since, uploads nothing: only the claim is released', async () => {
  const { processor, puts } = await setup()
  await processor.start()
  await processor.catchUp()
  expect(await processor.snapshot()).toBeDefined()
  puts.length = 0
  await processor.close()
  expect(puts).toEqual([`${JOB}/0/owner.json`])
})

it('a close after new commits still takes its snapshot', async () => {
  const { log, processor, puts } = await setup()
  await processor.start()
  await processor.catchUp()
  const first = (await processor.snapshot())!
  await log.append(Buffer.from(JSON.stringify(saleAt(200))))
  await processor.catchUp()
  puts.length = 0
  await processor.close()
  const manifests = puts.filter((key) => key.startsWith(`${JOB}/0/manifests/`))
  expect(manifests).toHaveLength(1)
  expect(manifests[0]).not.toBe(first.key)
  expect(puts.at(-1)).toBe(`${JOB}/0/owner.json`)
})

it('a close with nothing committed and no snapshot of this owner yet takes one', async () => {
  const { processor, puts } = await setup()
  await processor.start()
  await processor.catchUp()
  puts.length = 0
  await processor.close()
  expect(puts.filter((key) => key.startsWith(`${JOB}/0/manifests/`))).toHaveLength(1)
})

it('an owner that restored a snapshot and committed nothing closes without one', async () => {
  const { processor, puts, another } = await setup()
  await processor.start()
  await processor.catchUp()
  await processor.snapshot()
  await processor.close()
  // A new owner elsewhere restores that snapshot; nothing new comes.
  const next = another({ path: 'elsewhere', onClose: true })
  await next.start()
  await next.catchUp()
  puts.length = 0
  await next.close()
  expect(puts).toEqual([`${JOB}/0/owner.json`])
})

it('an owner whose local store was past the snapshot it found takes one at close, though it committed nothing', async () => {
  const { log, puts, another } = await setup()
  const owner = another({ path: 'kept', onClose: false })
  await owner.start()
  await owner.catchUp()
  const first = (await owner.snapshot())!
  // Committed past the snapshot, then closed without a last one.
  await log.append(Buffer.from(JSON.stringify(saleAt(200))))
  await owner.catchUp()
  await owner.close()
  const next = another({ path: 'kept', onClose: true })
  await next.start()
  await next.catchUp()
  puts.length = 0
  await next.close()
  const manifests = puts.filter((key) => key.startsWith(`${JOB}/0/manifests/`))
  expect(manifests).toHaveLength(1)
  expect(manifests[0]).not.toBe(first.key)
})
