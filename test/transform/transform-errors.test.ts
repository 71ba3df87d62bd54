// What a transform refuses, and what it leaves behind when it fails: the
// target's snapshots as they were and its claim released. Also the outputs'
// own states (the outbox only into the same job, the dedupe watermarks
// always) and the options' checks.
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import {
  DEDUPE_STATE, FsSnapshotStore, OUTBOX_STATE, PartitionStore, Snapshotter, acquireClaim, openFileLog, readClaim, restoreSnapshot, transformState,
  type SnapshotStore, type TransformStateOptions,
} from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'
import { NEW_STATES, OLD_STATES, TOPIC, legacy, newHandler, toNewProgram, totals } from './fixtures/jobs.js'

/** Job "sales" partition 0: one snapshot of the old program at offset 19, with an outbox entry and a dedupe watermark. */
async function source(dir: string): Promise<SnapshotStore> {
  const store = new FsSnapshotStore({ root: join(dir, 'snapshots') })
  onTestFinished(() => store.close())
  const partition = await PartitionStore.open({ path: join(dir, 'old'), states: [...OLD_STATES, OUTBOX_STATE, DEDUPE_STATE] })
  const tx = partition.transaction()
  for (let i = 0; i < 20; i++) {
    tx.value(totals).put(`k${i}`, i)
    tx.value(legacy).put(`k${i}`, 1)
  }
  tx.value(OUTBOX_STATE).put(Buffer.from('undelivered'), Buffer.from('record'))
  tx.value(DEDUPE_STATE).put('upstream', ['41', 0])
  await tx.commit({ topic: TOPIC, partition: 0, offset: 19n })
  const snapshotter = new Snapshotter({ snapshotStore: store, partitionStore: partition, job: 'sales', partition: 0, gcAfterSnapshot: false })
  await snapshotter.takeSnapshot()
  await snapshotter.close()
  await partition.close()
  return store
}

function options(store: SnapshotStore, dir: string, extra: Partial<TransformStateOptions> = {}): TransformStateOptions {
  return { snapshotStore: store, from: { job: 'sales', partition: 0, states: OLD_STATES }, to: { job: 'target' }, states: NEW_STATES, transform: toNewProgram, workDir: join(dir, 'work'), ...extra }
}

async function manifests(store: SnapshotStore, job: string): Promise<string[]> {
  const keys: string[] = []
  for await (const info of store.list(`${job}/0/manifests/`)) keys.push(info.key)
  return keys.sort()
}

/** A new owner of the target takes the claim at once, without force: it was released. */
async function claimIsFree(store: SnapshotStore, job: string): Promise<void> {
  const claim = await acquireClaim({ store, job, partition: 0 })
  await claim.release()
}

describe('transformState refuses', () => {
  it('a target with snapshots unless to.replace (TIDEMARK_TRANSFORM_TARGET_NOT_EMPTY); with it, the target\'s newest snapshot is the transformed one', async () => {
    const dir = tempDir('tidemark-transform-errors-')
    const store = await source(dir)
    const first = await transformState(options(store, dir))
    await expect(transformState(options(store, dir))).rejects.toMatchObject({ code: 'TIDEMARK_TRANSFORM_TARGET_NOT_EMPTY', details: { job: 'target', partition: '0', snapshots: 1, newest: first.snapshot.id } })
    expect(await manifests(store, 'target')).toEqual([first.snapshot.key])
    await claimIsFree(store, 'target')
    const second = await transformState(options(store, dir, { to: { job: 'target', replace: true } }))
    expect(second.snapshot.epoch).toBeGreaterThan(first.snapshot.epoch)
    expect(await manifests(store, 'target')).toEqual([first.snapshot.key, second.snapshot.key])
  })

  it('source states that from.states does not declare (TIDEMARK_TRANSFORM_STATE_UNDECLARED), unless unlisted: \'drop\'', async () => {
    const dir = tempDir('tidemark-transform-errors-')
    const store = await source(dir)
    await expect(transformState(options(store, dir, { from: { job: 'sales', partition: 0, states: [totals] } })))
      .rejects.toMatchObject({ code: 'TIDEMARK_TRANSFORM_STATE_UNDECLARED', details: { states: ['legacy'] } })
    expect(await manifests(store, 'target')).toEqual([])
    await claimIsFree(store, 'target')
    const dropped = await transformState(options(store, dir, { from: { job: 'sales', partition: 0, states: [totals] }, unlisted: 'drop' }))
    expect(dropped.read).toBe(20)
  })

  it('an entry of a state the target does not declare, a map entry without its sub-key, an entry without a value (TIDEMARK_TRANSFORM_ENTRY_INVALID)', async () => {
    const dir = tempDir('tidemark-transform-errors-')
    const store = await source(dir)
    const cases: Array<[TransformStateOptions['transform'], string]> = [
      [() => ({ state: 'totals', key: 'a', value: 1 }), 'unknown-state'],
      [(e) => ({ state: 'per-key', key: e.key, value: 1 }), 'sub-key'],
      [(e) => ({ state: 'by-bucket', key: e.key, value: undefined }), 'value'],
      [() => ({ state: 'by-bucket', key: '', value: 1 }), 'key'],
      [() => [42] as never, 'not-an-entry'],
    ]
    for (const [transform, reason] of cases) {
      await expect(transformState(options(store, dir, { transform }))).rejects.toMatchObject({ code: 'TIDEMARK_TRANSFORM_ENTRY_INVALID', details: { reason } })
    }
    expect(await manifests(store, 'target')).toEqual([])
    await claimIsFree(store, 'target')
  })

  it('a transform that throws fails with TIDEMARK_TRANSFORM_FAILED naming the state and key, its error as the cause; nothing is published', async () => {
    const dir = tempDir('tidemark-transform-errors-')
    const store = await source(dir)
    const boom = new Error('boom')
    const error = await transformState(options(store, dir, { transform: (e) => { if (e.key === 'k7') throw boom; return [] } })).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: 'TIDEMARK_TRANSFORM_FAILED', retriable: false, cause: boom, details: { state: 'legacy', key: 'k7' } })
    const perState = await transformState(options(store, dir, { transform: undefined, perState: () => { throw boom } })).catch((e: unknown) => e)
    expect(perState).toMatchObject({ code: 'TIDEMARK_TRANSFORM_FAILED', cause: boom, details: { state: 'legacy' } })
    expect(await manifests(store, 'target')).toEqual([])
    await claimIsFree(store, 'target')
  })

  it('to commit its snapshot once another owner took the target\'s claim (TIDEMARK_OWNERSHIP_LOST)', async () => {
    const dir = tempDir('tidemark-transform-errors-')
    const store = await source(dir)
    let taken = false
    const error = await transformState(options(store, dir, {
      transform: async (entry) => {
        if (!taken) {
          taken = true
          await acquireClaim({ store, job: 'target', partition: 0, takeover: 'force', owner: 'intruder' })
        }
        return toNewProgram(entry, { get: async () => undefined })
      },
    })).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: 'TIDEMARK_OWNERSHIP_LOST' })
    expect(await manifests(store, 'target')).toEqual([])
    expect((await readClaim(store, 'target', 0))?.record).toMatchObject({ owner: { name: 'intruder' } })
  })
})

describe('transformState with outputs', () => {
  it('keeps the outbox only into the same job (its records, its ids), and the dedupe watermarks always', async () => {
    const dir = tempDir('tidemark-transform-outputs-')
    const store = await source(dir)
    const read = async (job: string): Promise<{ outbox: number; dedupe: unknown }> => {
      const path = join(dir, `restored-${job}`)
      await restoreSnapshot({ snapshotStore: store, job, partition: 0, target: path })
      const restored = await PartitionStore.open({ path, states: [OUTBOX_STATE, DEDUPE_STATE] })
      try {
        let outbox = 0
        for await (const _ of restored.transaction().value(OUTBOX_STATE).entries()) outbox++
        return { outbox, dedupe: await restored.transaction().value(DEDUPE_STATE).get('upstream') }
      } finally {
        await restored.close()
      }
    }
    await transformState(options(store, dir))
    expect(await read('target')).toEqual({ outbox: 0, dedupe: ['41', 0] })
    await transformState(options(store, dir, { to: { job: 'sales' } }))
    expect(await read('sales')).toEqual({ outbox: 1, dedupe: ['41', 0] })
  })
})

describe('transformState options', () => {
  it('are checked before anything is read or written, with errors that name the field', async () => {
    const dir = tempDir('tidemark-transform-options-')
    const store = await source(dir)
    const log = await openFileLog(join(dir, 'log'), { sync: false })
    onTestFinished(() => log.close())
    const base = options(store, dir)
    const bad: Array<[Partial<TransformStateOptions> | Record<string, unknown>, ErrorConstructor, RegExp]> = [
      [{ snapshotStore: {} as SnapshotStore }, TypeError, /options\.snapshotStore must be a SnapshotStore/],
      [{ from: { job: 'sales', partition: -1 } }, RangeError, /options\.from/],
      [{ from: { job: 'sales', partition: 0, snapshot: 'latest' } }, RangeError, /options\.from\.snapshot must be a snapshot id/],
      [{ from: { job: 'sales', partition: 0, offset: 5 as unknown as bigint } }, TypeError, /options\.from\.offset must be a bigint offset, got the number 5 \(write 5n\)/],
      [{ from: { job: 'sales', partition: 0, offset: 5n } }, TypeError, /options\.from\.replay \(with options\.from\.offset\) must be an object/],
      [{ from: { job: 'sales', partition: 'orders-3', offset: 5n, replay: { log, topic: TOPIC, handler: newHandler } } }, RangeError, /a number/],
      [{ to: { job: 'target', replace: 'yes' as unknown as boolean } }, TypeError, /options\.to\.replace must be a boolean/],
      [{ perState: () => undefined }, TypeError, /not both/],
      [{ unlisted: 'keep' as 'drop' }, RangeError, /options\.unlisted must be 'refuse' or 'drop'/],
      [{ batchSize: 0 }, RangeError, /options\.batchSize must be an integer from 1/],
      [{ states: [totals, totals] }, RangeError, /options\.states\[1\]: state "totals" is listed twice/],
      [{ colour: 'red' }, RangeError, /unknown transformState option 'colour'/],
    ]
    for (const [extra, type, message] of bad) {
      await expect(transformState({ ...base, ...extra } as TransformStateOptions)).rejects.toThrow(type)
      await expect(transformState({ ...base, ...extra } as TransformStateOptions)).rejects.toThrow(message)
    }
    expect(await manifests(store, 'target')).toEqual([])
    expect(await readClaim(store, 'target', 0)).toBeUndefined()
  })

  it('refuses a snapshot store that cannot hold the claim', async () => {
    const dir = tempDir('tidemark-transform-options-')
    const store = await source(dir)
    // The same store, as one on a server that ignores conditional writes.
    const plain = Object.create(store, { capabilities: { value: Object.freeze({ conditionalPut: false, compareAndSwap: false }) } }) as SnapshotStore
    await expect(transformState({ ...options(store, dir), snapshotStore: plain })).rejects.toThrow(/cannot hold the target partition's claim/)
  })
})
