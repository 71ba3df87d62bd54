import type { TidemarkError } from '../errors.js'
import type { DeadHolderProof } from '../ownership/holder-process.js'
import type { ClaimOwner } from '../ownership/record.js'
import type { RestoreEvent } from '../snapshot/restore/index.js'
import type { SnapshotResult, SnapshotterEvent } from '../snapshot/snapshotter-types.js'
import type { RecordedState } from '../store/state-registry.js'
import type { Progress } from './progress.js'
import type { StateSizeExceeded } from './state-size.js'

/** What the lifecycle reports about the partition's claim. */
export type OwnershipEvent =
  /**
   * The claim was taken at once, before its holder's lease ran out, because
   * that holder ran on this host and its process is proven gone: no process
   * has its pid (`no-process`), or the one that has it started later
   * (`pid-reused`). Reported once the claim is held, before the restore.
   */
  | { type: 'holder-dead'; holder: ClaimOwner; epoch: number; pid: number; reason: DeadHolderProof['reason'] }
  /** A renewal failed with a store error; the next tick retries it, and no batch commits once the lease has run out without one succeeding. */
  | { type: 'renew-failed'; error: TidemarkError; leaseUntil: number | null }
  /** The claim was taken by another owner (or the snapshots were fenced by a newer epoch): the partition stops with this error. */
  | { type: 'lost'; error: TidemarkError }
  /** The claim could not be released (a store error); the next owner gets it once the lease runs out, or takes it by force. */
  | { type: 'release-failed'; error: TidemarkError }

/** Where each report of the lifecycle goes; every callback is called where its throw has nobody to go to, so it must not throw. */
export interface LifecycleEvents {
  progress?(progress: Progress): void
  restore(event: RestoreEvent): void
  snapshot(result: SnapshotResult): void
  /** A snapshot failed and processing goes on (a failure that stops the partition goes to onFailure instead). */
  snapshotFailed(error: TidemarkError): void
  snapshotter(event: SnapshotterEvent): void
  ownership(event: OwnershipEvent): void
  /** Debug timings of a start's steps (claimed, prefetching, restored, opened, ready). */
  phase?(step: string): void
  /** Once per start: the store holds states the program does not list (kept; docs/state-evolution.md#states-the-program-no-longer-lists). */
  undeclaredStates?(states: RecordedState[]): void
  /** Each measure of the partition's state size (at the start, then after commits at a bounded rate), with its soft limit. */
  stateSize?(bytes: number, limit: number | undefined): void
  /** The state size went above its soft limit: once per crossing (a warn line is logged too). */
  stateSizeExceeded?(exceeded: StateSizeExceeded): void
}
