import type { Readable } from 'node:stream'
import { describe, expect, it, onTestFinished } from 'vitest'
import { TransferPriority } from '../../connectors/kafka/consumer/transfer-priority.js'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { tempDir } from '../helpers/tmp.js'

/** Settles after every promise callback queued now and by those callbacks has run (a macrotask later). */
function drained(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve))
}

async function fsStore(): Promise<FsSnapshotStore> {
  const store = new FsSnapshotStore({ root: tempDir() })
  onTestFinished(() => store.close())
  await store.put('job/p/a', Buffer.alloc(256 * 1024, 1))
  return store
}

async function readAll(body: Readable): Promise<number> {
  let n = 0
  for await (const chunk of body as AsyncIterable<Buffer>) n += chunk.byteLength
  return n
}

describe('TransferPriority: standby downloads wait for restores and hand-offs', () => {
  it('a standby download of another partition starts only once no partition starts or closes', async () => {
    const priority = new TransferPriority()
    const store = priority.yielding(await fsStore(), 'src-2')
    const leave = priority.enter('src-1')
    let got = false
    const download = store.get('job/p/a').then((body) => { got = true; return readAll(body) })
    await drained()
    expect(got).toBe(false)
    leave()
    expect(await download).toBe(256 * 1024)
  })

  it('a download under way stops between chunks while a partition starts, and goes on after', async () => {
    const priority = new TransferPriority()
    const store = priority.yielding(await fsStore(), 'src-2')
    const body = await store.get('job/p/a')
    const it = (body as AsyncIterable<Buffer>)[Symbol.asyncIterator]()
    const first = await it.next()
    expect(first.done).toBe(false)
    const leave = priority.enter('src-1')
    let next = false
    const pending = it.next().then((r) => { next = true; return r })
    await drained()
    expect(next).toBe(false)
    leave()
    expect((await pending).done).toBe(false)
    await it.return?.()
  })

  it('the standby copy of the partition being started does not wait: that start waits for its sync', async () => {
    const priority = new TransferPriority()
    const store = priority.yielding(await fsStore(), 'src-1')
    const leave = priority.enter('src-1')
    onTestFinished(leave)
    expect(await readAll(await store.get('job/p/a'))).toBe(256 * 1024)
  })

  it('waits until every start and close ended, a partition entered twice included', async () => {
    const priority = new TransferPriority()
    const a = priority.enter('src-1')
    const b = priority.enter('src-1')
    const c = priority.enter('src-3')
    a()
    a()
    c()
    expect(priority.wait('src-2')).toBeDefined()
    b()
    expect(priority.busy).toBe(false)
    expect(priority.wait('src-2')).toBeUndefined()
  })
})
