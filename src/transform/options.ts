/**
 * The options of transformState and bootstrapState, checked once, before
 * anything is read or written, with messages that name the field.
 */
import { hostname, tmpdir } from 'node:os'
import { resolve } from 'node:path'
import { layoutOfOption, SNAPSHOT_ID, type SnapshotLayout } from '../snapshot/index.js'
import type { SnapshotStore } from '../snapshot-store/index.js'
import { validatePosition, type Position, type StateDefinition } from '../store/index.js'
import { checkInt, checkKnown, describeValue } from '../util/index.js'
import type { BootstrapStateOptions, KeyTransform, StateEntry, StateTransform, TransformProgress, TransformSource, TransformStateOptions } from './types.js'

export const TRANSFORM_DEFAULTS = Object.freeze({
  batchSize: 10_000,
  unlisted: 'refuse' as 'refuse' | 'drop',
})

/** What both functions resolve: the target and the work. */
export interface ResolvedTarget {
  snapshotStore: SnapshotStore
  layout: SnapshotLayout
  /** undefined: decided by whether the target is the source (transformState). */
  replace: boolean | undefined
  states: readonly StateDefinition[]
  batchSize: number
  workDir: string
  owner: string
  onProgress: ((progress: TransformProgress) => void) | undefined
}

export interface ResolvedTransform extends ResolvedTarget {
  from: {
    snapshotStore: SnapshotStore
    layout: SnapshotLayout
    snapshot: string | undefined
    offset: bigint | undefined
    replay: Required<Pick<NonNullable<TransformSource['replay']>, 'log' | 'topic' | 'handler'>> & Pick<NonNullable<TransformSource['replay']>, 'codec' | 'batchSize'> | undefined
    states: readonly StateDefinition[]
  }
  transform: { kind: 'key'; fn: KeyTransform } | { kind: 'state'; fn: StateTransform } | { kind: 'copy' }
  unlisted: 'refuse' | 'drop'
}

export interface ResolvedBootstrap extends ResolvedTarget {
  records: AsyncIterable<StateEntry> | Iterable<StateEntry>
  positions: Position[]
  transform: KeyTransform | undefined
}

const TARGET_KNOWN = ['snapshotStore', 'states', 'batchSize', 'workDir', 'owner', 'onProgress']

export function resolveTransformOptions(options: TransformStateOptions): ResolvedTransform {
  const o = object(options, 'options')
  checkKnown(o, [...TARGET_KNOWN, 'from', 'to', 'transform', 'perState', 'unlisted'], 'transformState')
  const from = object(o.from, 'options.from')
  checkKnown(from, ['job', 'partition', 'snapshotStore', 'snapshot', 'offset', 'replay', 'states'], 'options.from')
  const layout = layoutOf(from.job, from.partition, 'options.from')
  const target = resolveTarget(o, (o.to as { partition?: unknown } | undefined)?.partition ?? from.partition)
  const snapshotStore = from.snapshotStore === undefined ? target.snapshotStore : store(from.snapshotStore, 'options.from.snapshotStore')
  if (from.snapshot !== undefined && (typeof from.snapshot !== 'string' || !SNAPSHOT_ID.test(from.snapshot))) {
    throw new RangeError(`options.from.snapshot must be a snapshot id like 0000000001-000000000042, got ${describeValue(from.snapshot)}`)
  }
  let offset: bigint | undefined
  let replay: ResolvedTransform['from']['replay']
  if (from.offset !== undefined) {
    if (typeof from.offset !== 'bigint') throw new TypeError(`options.from.offset must be a bigint offset, got ${typeof from.offset === 'number' ? `the number ${from.offset} (write ${from.offset}n)` : describeValue(from.offset)}`)
    if (from.offset < 0n) throw new RangeError(`options.from.offset must not be negative, got ${from.offset}`)
    if (from.snapshot !== undefined) throw new TypeError('options.from takes either snapshot or offset, not both')
    if (!/^\d+$/.test(layout.partition)) throw new RangeError(`options.from.offset replays a log into a PartitionProcessor job's partition, a number; ${JSON.stringify(layout.partition)} is not one`)
    const r = object(from.replay, 'options.from.replay (with options.from.offset)')
    checkKnown(r, ['log', 'topic', 'handler', 'codec', 'batchSize'], 'options.from.replay')
    const log = r.log as { read?: unknown; tail?: unknown } | null
    if (log === null || typeof log !== 'object' || typeof log.read !== 'function' || typeof log.tail !== 'function') throw new TypeError(`options.from.replay.log must be a RevisionedLog, got ${describeValue(r.log)}`)
    if (typeof r.topic !== 'string' || r.topic === '') throw new TypeError(`options.from.replay.topic must be a non-empty string, got ${describeValue(r.topic)}`)
    if (typeof r.handler !== 'function') throw new TypeError(`options.from.replay.handler must be a function (tx, event, context) => void, got ${describeValue(r.handler)}`)
    const codec = r.codec as { decode?: unknown } | undefined
    if (codec !== undefined && (codec === null || typeof codec.decode !== 'function')) throw new TypeError('options.from.replay.codec must be a Codec with decode(bytes)')
    if (r.batchSize !== undefined) checkInt(r.batchSize, 'options.from.replay.batchSize', 1, 1_000_000)
    offset = from.offset
    replay = r as unknown as NonNullable<ResolvedTransform['from']['replay']>
  } else if (from.replay !== undefined) {
    throw new TypeError('options.from.replay goes with options.from.offset')
  }
  const states = from.states === undefined ? target.states : stateList(from.states, 'options.from.states')

  if (o.transform !== undefined && o.perState !== undefined) throw new TypeError('give options.transform (per key) or options.perState (per state), not both')
  let transform: ResolvedTransform['transform'] = { kind: 'copy' }
  if (o.transform !== undefined) transform = { kind: 'key', fn: fn<KeyTransform>(o.transform, 'options.transform', '(entry, target) => entries') }
  if (o.perState !== undefined) transform = { kind: 'state', fn: fn<StateTransform>(o.perState, 'options.perState', '(state, target) => void') }
  const unlisted = o.unlisted ?? TRANSFORM_DEFAULTS.unlisted
  if (unlisted !== 'refuse' && unlisted !== 'drop') throw new RangeError(`options.unlisted must be 'refuse' or 'drop', got ${describeValue(unlisted)}`)

  return Object.freeze({
    ...target,
    from: Object.freeze({ snapshotStore, layout, snapshot: from.snapshot as string | undefined, offset, replay, states }),
    transform,
    unlisted,
  })
}

export function resolveBootstrapOptions(options: BootstrapStateOptions): ResolvedBootstrap {
  const o = object(options, 'options')
  checkKnown(o, [...TARGET_KNOWN, 'to', 'records', 'positions', 'transform'], 'bootstrapState')
  const to = object(o.to, 'options.to')
  if (to.partition === undefined) throw new TypeError('options.to.partition is required: the partition the records are the state of')
  const target = resolveTarget(o, to.partition)
  const records = o.records as { [Symbol.asyncIterator]?: unknown; [Symbol.iterator]?: unknown } | null
  if (records === null || typeof records !== 'object' || (typeof records[Symbol.asyncIterator] !== 'function' && typeof records[Symbol.iterator] !== 'function')) {
    throw new TypeError(`options.records must be an iterable or async iterable of { state, key, subKey?, value } (readStateRecords(path, states) reads a file), got ${describeValue(o.records)}`)
  }
  const given = o.positions ?? []
  if (!Array.isArray(given)) throw new TypeError(`options.positions must be an array of { topic, partition, offset }, got ${describeValue(given)}`)
  const positions = given.map((p, i) => validatePosition(p, `options.positions[${i}]`))
  const transform = o.transform === undefined ? undefined : fn<KeyTransform>(o.transform, 'options.transform', '(entry, target) => entries')
  return Object.freeze({ ...target, records: o.records as ResolvedBootstrap['records'], positions, transform })
}

function resolveTarget(o: Record<string, unknown>, partition: unknown): ResolvedTarget {
  const snapshotStore = store(o.snapshotStore, 'options.snapshotStore')
  // The claim lives beside the snapshots: a store that cannot write conditionally cannot hold it.
  if (snapshotStore.capabilities?.conditionalPut !== true || snapshotStore.capabilities.compareAndSwap !== true) {
    throw new RangeError(`options.snapshotStore (${snapshotStore.url}) cannot hold the target partition's claim: it needs capabilities.conditionalPut and capabilities.compareAndSwap`)
  }
  const to = object(o.to, 'options.to')
  checkKnown(to, ['job', 'partition', 'replace'], 'options.to')
  const layout = layoutOf(to.job, partition, 'options.to')
  if (to.replace !== undefined && typeof to.replace !== 'boolean') throw new TypeError(`options.to.replace must be a boolean, got ${describeValue(to.replace)}`)
  const states = stateList(o.states, 'options.states')
  const batchSize = checkInt(o.batchSize ?? TRANSFORM_DEFAULTS.batchSize, 'options.batchSize', 1, 1_000_000)
  if (o.workDir !== undefined && (typeof o.workDir !== 'string' || o.workDir === '')) throw new TypeError(`options.workDir must be a non-empty path, got ${describeValue(o.workDir)}`)
  const workDir = resolve((o.workDir as string | undefined) ?? tmpdir())
  if (o.owner !== undefined && (typeof o.owner !== 'string' || o.owner === '')) throw new TypeError(`options.owner must be a non-empty string, got ${describeValue(o.owner)}`)
  const owner = (o.owner as string | undefined) ?? `${hostname()}:${process.pid} transform`
  const onProgress = o.onProgress === undefined ? undefined : fn<(p: TransformProgress) => void>(o.onProgress, 'options.onProgress', '(progress) => void')
  return { snapshotStore, layout, replace: to.replace as boolean | undefined, states, batchSize, workDir, owner, onProgress }
}

function stateList(value: unknown, name: string): readonly StateDefinition[] {
  if (!Array.isArray(value)) throw new TypeError(`${name} must be an array of state definitions (valueState(), mapState()), got ${describeValue(value)}`)
  const seen = new Map<string, number>()
  for (const [i, def] of (value as unknown[]).entries()) {
    const d = def as Partial<StateDefinition> | null
    if (d === null || typeof d !== 'object' || (d.kind !== 'value' && d.kind !== 'map') || typeof d.name !== 'string' || !Buffer.isBuffer(d.prefix)) {
      throw new TypeError(`${name}[${i}] must be a state definition made by valueState() or mapState(), got ${describeValue(def)}`)
    }
    const first = seen.get(d.name)
    if (first !== undefined) throw new RangeError(`${name}[${i}]: state ${JSON.stringify(d.name)} is listed twice (also ${name}[${first}])`)
    seen.set(d.name, i)
  }
  return value as readonly StateDefinition[]
}

function layoutOf(job: unknown, partition: unknown, name: string): SnapshotLayout {
  if (typeof job !== 'string' || job === '') throw new TypeError(`${name}.job must be a non-empty string, got ${describeValue(job)}`)
  if (typeof partition !== 'string' && typeof partition !== 'number') throw new TypeError(`${name}.partition must be a number or a partition name ('orders-3'), got ${describeValue(partition)}`)
  return layoutOfOption(job, partition, name)
}

function store(value: unknown, name: string): SnapshotStore {
  const s = value as Partial<SnapshotStore> | null
  if (s === null || typeof s !== 'object' || typeof s.put !== 'function' || typeof s.list !== 'function' || typeof s.url !== 'string') {
    throw new TypeError(`${name} must be a SnapshotStore (openSnapshotStore(url)), got ${describeValue(value)}`)
  }
  return value as SnapshotStore
}

function object(value: unknown, name: string): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new TypeError(`${name} must be an object, got ${describeValue(value)}`)
  return value as Record<string, unknown>
}

function fn<F>(value: unknown, name: string, shape: string): F {
  if (typeof value !== 'function') throw new TypeError(`${name} must be a function ${shape}, got ${describeValue(value)}`)
  return value as F
}
