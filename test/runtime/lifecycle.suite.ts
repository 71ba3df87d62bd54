// The partition lifecycle's contract (src/runtime/partition-lifecycle.ts),
// run against each runtime that uses it: PartitionProcessor over the
// embedded file log, and StatefulConsumer over Kafka. What a runtime adds
// (its source loop) is tested beside it; what the lifecycle promises
// (claim, restore, failure policy, shutdown, the refusal of a store that
// cannot hold claims) must hold the same way in both.
import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished, vi } from 'vitest'
import { acquireClaim, FsSnapshotStore, PartitionStore, readClaim, type SnapshotStore, type TidemarkError } from '../../src/index.js'
import { fold, type Fold, type WordEvent } from '../kafka-consumer/fixture.js'
import { randomName, tempDir } from '../helpers/tmp.js'

/** One runtime holding one partition of a source. */
export interface LifecycleRunner {
  start(): Promise<{ source: string; epoch: number }>
  /** Resolves once the partition's position reached `offset`. */
  appliedThrough(offset: bigint): Promise<void>
  /** The partition's state as its open store holds it. */
  state(): Promise<Fold>
  /** Resolves with the error that stopped the partition. */
  stopped(): Promise<TidemarkError>
  close(): Promise<void>
}

/** A fresh source with one partition written to, and how to open a runtime on it. */
export interface LifecycleEnv {
  /** The partition's name in the snapshot store. */
  key: string
  /** Appends word events to the partition; resolves with their offsets. */
  append(values: WordEvent[]): Promise<Array<{ offset: bigint; value: WordEvent }>>
  /** Opens of each local store, before its start, that only read its position (a consumer group member advertising what it holds). */
  positionReadsAtStart: number
  /** Constructs the runtime (a caller mistake throws here, synchronously). */
  open(options: { job: string; stateDir: string; store: SnapshotStore; handler?: (value: WordEvent) => void }): LifecycleRunner
  close(): Promise<void>
}

export interface LifecycleHarness {
  name: string
  env(): Promise<LifecycleEnv>
}

const WORDS = ['tide', 'mark', 'state', 'log']

function words(count: number, seed = 0): WordEvent[] {
  return Array.from({ length: count }, (_, i) => ({ word: WORDS[(i + seed) % WORDS.length]!, n: (i % 7) + 1 }))
}

export function lifecycleSuite(harness: LifecycleHarness): void {
  describe(`partition lifecycle: ${harness.name}`, () => {
    async function setup(): Promise<{ env: LifecycleEnv; store: FsSnapshotStore; job: string }> {
      const env = await harness.env()
      onTestFinished(() => env.close())
      const store = new FsSnapshotStore({ root: join(tempDir('tidemark-lifecycle-'), 'snapshots') })
      onTestFinished(() => store.close())
      return { env, store, job: randomName('job') }
    }

    it('refuses, when constructed, a snapshot store that cannot write conditionally (it could not hold the claim)', async () => {
      const { env, store, job } = await setup()
      const plain = Object.create(store) as FsSnapshotStore
      Object.defineProperty(plain, 'capabilities', { value: Object.freeze({ conditionalPut: false, compareAndSwap: false }) })
      expect(() => env.open({ job, stateDir: tempDir(), store: plain })).toThrow(RangeError)
      expect(() => env.open({ job, stateDir: tempDir(), store: plain })).toThrow(/options\.snapshots\.store .*conditionalPut/)
      // The same store with conditional writes is taken (the decision, tested both ways).
      const runner = env.open({ job, stateDir: tempDir(), store })
      await runner.start()
      await runner.close()
    })

    it('takes the claim before the state, above every snapshot epoch, and releases it at close', async () => {
      const { env, store, job } = await setup()
      const appended = await env.append(words(50))
      const first = env.open({ job, stateDir: tempDir(), store })
      const started = await first.start()
      expect(started.epoch).toBeGreaterThan(0)
      const held = await readClaim(store, job, env.key)
      expect(held?.record?.epoch).toBe(started.epoch)
      await first.appliedThrough(appended.at(-1)!.offset)
      await first.close()
      expect((await readClaim(store, job, env.key))?.record?.leaseUntil).toBe(0)
      // The next owner starts at once (no wait for a lease), with a higher epoch.
      const second = env.open({ job, stateDir: tempDir(), store })
      const again = await second.start()
      expect(again.epoch).toBeGreaterThan(started.epoch)
      await second.close()
    })

    it('restores the newest snapshot into an empty directory and resumes exactly after its position', async () => {
      const { env, store, job } = await setup()
      const first = await env.append(words(300))
      const stateDir = tempDir()
      const a = env.open({ job, stateDir, store })
      await a.start()
      await a.appliedThrough(first.at(-1)!.offset)
      await a.close()
      await rm(stateDir, { recursive: true, force: true })
      const b = env.open({ job, stateDir, store })
      const started = await b.start()
      expect(started.source).toBe('snapshot')
      const more = await env.append(words(120, 1))
      await b.appliedThrough(more.at(-1)!.offset)
      expect(await b.state()).toEqual(fold([...first, ...more]))
      await b.close()
    })

    it('a restart over its own store, not behind the newest snapshot, uses that store as it is and opens it once', async () => {
      const { env, store, job } = await setup()
      const appended = await env.append(words(80))
      const stateDir = tempDir()
      const a = env.open({ job, stateDir, store })
      await a.start()
      await a.appliedThrough(appended.at(-1)!.offset)
      await a.close()
      // Counted, not replaced: the store opened while the claim is taken must be the one that runs.
      const opens = vi.spyOn(PartitionStore, 'open')
      onTestFinished(() => opens.mockRestore())
      const b = env.open({ job, stateDir, store })
      expect((await b.start()).source).toBe('local')
      const perStore = new Map<string, number>()
      for (const [options] of opens.mock.calls) if (options.path.startsWith(stateDir)) perStore.set(options.path, (perStore.get(options.path) ?? 0) + 1)
      expect(perStore.size).toBeGreaterThan(0)
      for (const [path, count] of perStore) expect({ path, count }).toEqual({ path, count: 1 + env.positionReadsAtStart })
      expect(await b.state()).toEqual(fold(appended))
      const more = await env.append(words(20, 3))
      await b.appliedThrough(more.at(-1)!.offset)
      expect(await b.state()).toEqual(fold([...appended, ...more]))
      await b.close()
    })

    it('stops with TIDEMARK_OWNERSHIP_LOST when a newer owner takes the claim, and commits nothing after it', async () => {
      const { env, store, job } = await setup()
      const first = await env.append(words(100))
      const runner = env.open({ job, stateDir: tempDir(), store })
      const started = await runner.start()
      await runner.appliedThrough(first.at(-1)!.offset)
      const stopped = runner.stopped()
      const newer = await acquireClaim({ store, job, partition: env.key, leaseMs: null, takeover: 'force', minEpoch: started.epoch })
      onTestFinished(() => newer.release().then(() => undefined, () => undefined))
      // Events keep coming: the runtime notices the claim within its checks (a renewal, a look before a batch).
      let lost: TidemarkError | undefined
      void stopped.then((e) => { lost = e })
      // Each round waits for its events to commit (or for the stop); the runtime looks at its claim about once a
      // second (a renewal, a look before a batch), so the rounds go on until it has (the bound only ends a broken run).
      for (let round = 0; lost === undefined && round < 20_000; round++) {
        const batch = await env.append(words(5, round))
        await Promise.race([runner.appliedThrough(batch.at(-1)!.offset), stopped])
      }
      expect(lost?.code).toBe('TIDEMARK_OWNERSHIP_LOST')
      await runner.close()
      // The newer owner's claim stands: the stopped owner did not release it.
      await expect(newer.check()).resolves.toBeUndefined()
    })

    it('stops on a handler failure (TIDEMARK_HANDLER_FAILED), commits nothing of that batch, and releases the claim', async () => {
      const { env, store, job } = await setup()
      const first = await env.append(words(40))
      const stateDir = tempDir()
      let poisoned = true
      const runner = env.open({ job, stateDir, store, handler: (v) => { if (poisoned && v.word === 'poison') throw new Error('boom') } })
      await runner.start()
      await runner.appliedThrough(first.at(-1)!.offset)
      const stopped = runner.stopped()
      const bad = await env.append([{ word: 'poison', n: 1 }])
      const error = await stopped
      expect(error.code).toBe('TIDEMARK_HANDLER_FAILED')
      await runner.close()
      expect((await readClaim(store, job, env.key))?.record?.leaseUntil).toBe(0)
      // Its owner restarts it: the failed event is applied once, nothing before it twice.
      poisoned = false
      const again = env.open({ job, stateDir, store })
      await again.start()
      await again.appliedThrough(bad[0]!.offset)
      expect(await again.state()).toEqual(fold([...first, ...bad]))
      await again.close()
    })
  })
}
