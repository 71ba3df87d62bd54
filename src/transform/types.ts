import type { Codec, Position, StateDefinition } from '../store/index.js'
import type { EventHandler } from '../runtime/index.js'
import type { RevisionedLog } from '../log/index.js'
import type { SnapshotStore } from '../snapshot-store/index.js'

/**
 * One entry of a state: a value state's key and value, or a map state's key,
 * sub-key and value. Keys are strings for states with string keys and bytes
 * (a Uint8Array) for states declared with `keyType: 'bytes'`; values are
 * decoded, and a versioned state's value is at its current version.
 */
export interface StateEntry<V = unknown> {
  state: string
  key: string | Uint8Array
  /** Map states only. */
  subKey?: string | Uint8Array
  value: V
}

/** What a per-key transform returns: the entries to write into the target (none drops the entry). */
export type TransformOutput = StateEntry | readonly StateEntry[] | null | undefined | void

/** Reads of the target as written so far: what a merge of several source entries into one target entry needs. */
export interface TargetReader {
  /** The value written so far under the key (and sub-key, for a map state) of a target state; undefined when none. */
  get(state: string, key: string | Uint8Array, subKey?: string | Uint8Array): Promise<unknown>
}

/** What a per-state transform writes with. */
export interface TargetWriter extends TargetReader {
  /** Writes one entry into a target state (a later write of the same key replaces it); the target is committed in batches. */
  put(entry: StateEntry): Promise<void>
}

/**
 * Runs once per entry of every source state, in state name order and then
 * key order; returns what to write into the target: the entry as it is (a
 * copy), renamed (another `state`), re-keyed, split (several entries),
 * merged (read what was written so far with `target.get`), or nothing (a
 * drop). It may be async.
 */
export type KeyTransform = (entry: StateEntry, target: TargetReader) => TransformOutput | Promise<TransformOutput>

/** One source state, as a per-state transform sees it. */
export interface SourceState {
  name: string
  kind: 'value' | 'map'
  /** Its entries in key order, decoded by the source's definition; read once. */
  entries(): AsyncIterable<StateEntry>
}

/** Runs once per source state; what it does not put into `target` is dropped. */
export type StateTransform = (state: SourceState, target: TargetWriter) => void | Promise<void>

export type TransformProgress =
  | { phase: 'claimed'; job: string; partition: string; epoch: number }
  | { phase: 'restore'; bytesDownloaded: number; bytesTotal: number }
  | { phase: 'replay'; done: number; total: number }
  | { phase: 'transform'; read: number; written: number }
  | { phase: 'snapshot'; id: string }

/** What both transformState and bootstrapState take about the target and the work. */
export interface TargetOptions {
  /** Where the target's snapshots and claim live (and, unless `from.snapshotStore` says otherwise, the source's). It must write conditionally: it holds the claim. */
  snapshotStore: SnapshotStore
  /** The state definitions of the program that will run on the target: entries are written at their current versions. */
  states: readonly StateDefinition[]
  /** Entries written per commit of the target store (default 10,000). */
  batchSize?: number
  /** Where the temporary stores go (default os.tmpdir()); they are removed at the end, whatever happens. */
  workDir?: string
  /** A name for the target's claim, for `tidemark status` (default `<host>:<pid> transform`). */
  owner?: string
  onProgress?: (progress: TransformProgress) => void
}

/** The target partition. */
export interface TransformTarget {
  job: string
  /** Default: the source's partition (for transformState); required for bootstrapState. */
  partition?: number | string
  /**
   * Replace the target's state when it has snapshots: its claim is taken by
   * force (a running owner stops with TIDEMARK_OWNERSHIP_LOST) and the new
   * snapshot becomes its newest. Default: true when the target is the source
   * (the same job and partition in the same snapshot store), else false, and
   * a target with snapshots is refused (TIDEMARK_TRANSFORM_TARGET_NOT_EMPTY).
   */
  replace?: boolean
}

/** The source of transformState: a snapshot of a job, or its state as of an offset. */
export interface TransformSource {
  job: string
  partition: number | string
  /** Where the source's snapshots are (default: the options' snapshotStore). */
  snapshotStore?: SnapshotStore
  /** A snapshot id; default: the newest that verifies. */
  snapshot?: string
  /**
   * The state as of this offset instead (every event at or before it): the
   * newest snapshot at or before it, then `replay.log` replayed up to it
   * through `replay.handler`, as restoreToPoint does. Needs `replay`, and a
   * numeric partition.
   */
  offset?: bigint
  replay?: { log: RevisionedLog; topic: string; handler: EventHandler<never>; codec?: Codec<unknown>; batchSize?: number }
  /** The source program's state definitions, which decode its entries (default: the target's `states`). */
  states?: readonly StateDefinition[]
}

export interface TransformStateOptions extends TargetOptions {
  from: TransformSource
  to: TransformTarget
  /** Per key. Without it and without `perState`, every entry is copied into the target state of the same name. */
  transform?: KeyTransform
  /** Per state, instead of `transform`. */
  perState?: StateTransform
  /**
   * A state the source holds that `from.states` does not declare cannot be
   * decoded: `'refuse'` (default) fails with TIDEMARK_TRANSFORM_STATE_UNDECLARED
   * before anything is written, `'drop'` leaves it out of the target.
   */
  unlisted?: 'refuse' | 'drop'
}

export interface BootstrapStateOptions extends TargetOptions {
  to: TransformTarget & { partition: number | string }
  /** The entries, each naming a target state (readStateRecords reads them from a JSON lines file). */
  records: AsyncIterable<StateEntry> | Iterable<StateEntry>
  /** Where the job resumes: the positions the new snapshot carries (default none: the job starts at the log's beginning). */
  positions?: readonly Position[]
  /** Per record, as transformState's; default: each record as it is. */
  transform?: KeyTransform
}

/** The snapshot written and where it came from. */
export interface TransformResult {
  job: string
  partition: string
  /** The new snapshot, the target's newest. */
  snapshot: { id: string; key: string; epoch: number }
  /** Its positions: the source's, so that the job resumes exactly there. */
  positions: Position[]
  /** Its lineage (SnapshotManifest.lineage): local stores of another one are never used as they are. */
  lineage: string
  /** A snapshot of a job (the one restored, if any; the offset it was read at), or records. */
  source: { job: string; partition: string; snapshot: string | null; offset: bigint | null; replayed: number } | { records: true }
  /** Source entries (or records) read, and entries written into the target. */
  read: number
  written: number
  /** Entries per target state, by name, as written. */
  states: Record<string, number>
}
