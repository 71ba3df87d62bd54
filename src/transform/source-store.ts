/**
 * The source of a transform: a job's snapshot, or its state as of an
 * offset (restoreToPoint: the newest snapshot at or before it, then the log
 * replayed), restored into a temporary directory and only read there. The
 * job's snapshots and local stores are never touched.
 */
import { TidemarkError } from '../errors.js'
import { DEDUPE_STATE, OUTBOX_STATE } from '../outputs/index.js'
import { restoreToPoint, type EventHandler } from '../runtime/index.js'
import { restoreSnapshot } from '../snapshot/index.js'
import { PartitionStore, scanState, type Codec, type Position, type StateDefinition } from '../store/index.js'
import type { ResolvedTransform } from './options.js'
import type { SourceState, StateEntry, TransformProgress } from './types.js'

/** Tidemark's own states, which a transform copies as they are (or drops) and never hands to the user's function. */
export const INTERNAL_STATES: readonly StateDefinition[] = [OUTBOX_STATE as StateDefinition, DEDUPE_STATE as StateDefinition]

export class SourceStore {
  readonly store: PartitionStore
  /** The snapshot restored (null: none, an offset read from the log's start). */
  readonly snapshot: string | null
  readonly replayed: number
  /** The declared states the source holds, in name order. */
  readonly states: readonly StateDefinition[]
  /** Tidemark's own states the source holds. */
  readonly internal: readonly StateDefinition[]

  private constructor(store: PartitionStore, snapshot: string | null, replayed: number, states: readonly StateDefinition[], internal: readonly StateDefinition[]) {
    this.store = store
    this.snapshot = snapshot
    this.replayed = replayed
    this.states = states
    this.internal = internal
  }

  /**
   * Restores the source into `path` and opens it. A state the source holds
   * that `from.states` does not declare is refused (unlisted 'refuse',
   * TIDEMARK_TRANSFORM_STATE_UNDECLARED) or left out ('drop').
   */
  static async open(r: ResolvedTransform, path: string, onProgress: (p: TransformProgress) => void): Promise<SourceStore> {
    const { from } = r
    let snapshot: string | null = null
    let replayed = 0
    if (from.offset !== undefined) {
      const replay = from.replay!
      const result = await restoreToPoint<unknown>({
        job: from.layout.job, partition: Number(from.layout.partition), topic: replay.topic, log: replay.log,
        states: from.states, handler: replay.handler as EventHandler<unknown>,
        ...(replay.codec === undefined ? {} : { codec: replay.codec as Codec<unknown> }),
        ...(replay.batchSize === undefined ? {} : { batchSize: replay.batchSize }),
        snapshotStore: from.snapshotStore, target: { offset: from.offset }, path,
        onProgress: (p) => onProgress(p.phase === 'restore' ? { phase: 'restore', bytesDownloaded: p.done, bytesTotal: p.total } : { phase: 'replay', done: p.done, total: p.total }),
      })
      snapshot = result.snapshot ?? null
      replayed = result.replayed
    } else {
      const result = await restoreSnapshot({
        snapshotStore: from.snapshotStore, job: from.layout.job, partition: from.layout.partition, target: path, useLocal: false,
        states: from.states, ...(from.snapshot === undefined ? {} : { snapshot: from.snapshot }),
        onProgress: (p) => onProgress({ phase: 'restore', bytesDownloaded: p.bytesDownloaded, bytesTotal: p.bytesTotal }),
      })
      snapshot = result.snapshot?.id ?? null
    }

    // Opened bare first: which states it holds decides what it is opened with.
    const bare = await PartitionStore.open({ path, create: false })
    const recorded = bare.recordedStates()
    await bare.close()
    const held = new Set(recorded.map((s) => s.name))
    const internal = INTERNAL_STATES.filter((s) => held.has(s.name))
    const declared = new Set(from.states.map((s) => s.name))
    const undeclared = recorded.filter((s) => !declared.has(s.name) && !INTERNAL_STATES.some((i) => i.name === s.name))
    if (undeclared.length > 0 && r.unlisted === 'refuse') {
      const names = undeclared.map((s) => s.name)
      throw new TidemarkError(
        'TIDEMARK_TRANSFORM_STATE_UNDECLARED',
        `the source ${from.layout.prefix}${snapshot === null ? '' : ` (snapshot ${snapshot})`} holds state(s) ${names.map((n) => JSON.stringify(n)).join(', ')} that from.states does not declare, so their entries cannot be decoded: declare them (the source program's definitions), or drop them (unlisted: 'drop', --drop-unlisted)`,
        { details: { states: names, job: from.layout.job, partition: from.layout.partition } },
      )
    }
    const states = from.states.filter((s) => held.has(s.name)).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    const store = await PartitionStore.open({ path, create: false, states: [...from.states, ...internal] })
    return new SourceStore(store, snapshot, replayed, states, internal)
  }

  get positions(): Position[] {
    return this.store.positions()
  }

  /** One declared state, as a per-state transform gets it. */
  state(def: StateDefinition): SourceState {
    return { name: def.name, kind: def.kind, entries: () => this.entries(def) }
  }

  async *entries(def: StateDefinition): AsyncGenerator<StateEntry> {
    for await (const e of scanState(this.store, def)) yield { state: def.name, ...e }
  }

  close(): Promise<void> {
    return this.store.close()
  }
}
