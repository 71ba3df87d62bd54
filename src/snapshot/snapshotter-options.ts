import { checkInt } from '../util/index.js'
import { GC_CADENCE_DEFAULTS } from './gc.js'
import { MAX_EPOCH } from './layout.js'
import { checkBoolean, checkFileList, checkNumber, SNAPSHOT_DEFAULTS, type CheckedFile } from './options.js'
import type { SnapshotterOptions } from './snapshotter-types.js'

export type Resolved = Readonly<Required<Omit<SnapshotterOptions, 'snapshotStore' | 'partitionStore' | 'onEvent' | 'beforeCommit' | 'job' | 'partition' | 'logger' | 'knownManifests' | 'verifiedFiles'>>>

export const KNOWN = ['snapshotStore', 'partitionStore', 'job', 'partition', 'writerCheck', 'onEvent', 'beforeCommit', 'knownManifests', 'verifiedFiles', 'logger', 'checkpointDir', ...Object.keys(SNAPSHOT_DEFAULTS), ...Object.keys(GC_CADENCE_DEFAULTS)]

/** The Snapshotter's settings from its options (checked by name), with their defaults. */
export function resolveSnapshotterOptions(o: Record<string, unknown>, partitionStorePath: string): Resolved {
  const d = SNAPSHOT_DEFAULTS
  const checkpointDir = o.checkpointDir ?? `${partitionStorePath}.checkpoints`
  if (typeof checkpointDir !== 'string' || checkpointDir === '') throw new TypeError('checkpointDir must be a non-empty path string')
  return Object.freeze({
    epoch: checkInt(o.epoch ?? d.epoch, 'epoch', 0, MAX_EPOCH),
    retain: checkInt(o.retain ?? d.retain, 'retain', 1),
    graceMs: checkInt(o.graceMs ?? d.graceMs, 'graceMs', 0),
    gcAfterSnapshot: checkBoolean(o.gcAfterSnapshot ?? d.gcAfterSnapshot, 'gcAfterSnapshot'),
    gcEverySnapshots: checkInt(o.gcEverySnapshots ?? GC_CADENCE_DEFAULTS.gcEverySnapshots, 'gcEverySnapshots', 1),
    gcIntervalMs: checkInt(o.gcIntervalMs ?? GC_CADENCE_DEFAULTS.gcIntervalMs, 'gcIntervalMs', 0),
    checkpointDir,
    maxObjectBytes: checkInt(o.maxObjectBytes ?? d.maxObjectBytes, 'maxObjectBytes', 1024 * 1024),
    uploadConcurrency: checkInt(o.uploadConcurrency ?? d.uploadConcurrency, 'uploadConcurrency', 1, 64),
    maxAmplification: checkNumber(o.maxAmplification ?? d.maxAmplification, 'maxAmplification', 1),
    maxChainLength: checkInt(o.maxChainLength ?? d.maxChainLength, 'maxChainLength', 1),
    checkpoint: checkCheckpointMode(o.checkpoint ?? d.checkpoint),
    writerCheck: checkWriterCheck(o.writerCheck ?? 'listing'),
  })
}

export function checkVerifiedFiles(value: unknown): CheckedFile[] | undefined {
  return value === undefined ? undefined : checkFileList<CheckedFile>(value, 'verifiedFiles', false, 'RestoreResult.verifiedFiles')
}

function checkWriterCheck(value: unknown): 'listing' | 'create-only' {
  if (value !== 'listing' && value !== 'create-only') throw new RangeError(`writerCheck must be 'listing' or 'create-only', got ${typeof value === 'string' ? `'${value}'` : typeof value}`)
  return value
}

function checkCheckpointMode(value: unknown): 'open' | 'close' {
  if (value !== 'open' && value !== 'close') throw new RangeError(`checkpoint must be 'open' or 'close', got ${typeof value === 'string' ? `'${value}'` : typeof value}`)
  return value
}
