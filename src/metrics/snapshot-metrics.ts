import { channels, type SnapshotLabels } from './channels.js'

/** What a snapshot's metrics need of its result (SnapshotResult has it; this layer does not import the snapshot layer). */
export interface SnapshotFigures {
  stallMs: number
  bytesUploaded: number
  bytesTotal: number
  full: boolean
  positions: ReadonlyArray<{ offset: bigint }>
}

/** A clock reading for snapshotEnded(); 0 (no clock read) while nobody listens. */
export function snapshotStarted(): number {
  return channels.snapshot.hasSubscribers ? performance.now() : 0
}

/** Publishes a snapshot's end: its result, or the error it failed with (a fencing also on the ownership channel). */
export function snapshotEnded(labels: SnapshotLabels, startedAt: number, outcome: { result: SnapshotFigures } | { error: unknown }): void {
  if (channels.snapshot.hasSubscribers) {
    const durationMs = startedAt > 0 ? performance.now() - startedAt : 0
    if ('result' in outcome) {
      const r = outcome.result
      const offset = r.positions.reduce<bigint | undefined>((max, p) => (max === undefined || p.offset > max ? p.offset : max), undefined)
      channels.snapshot.publish({ job: labels.job, partition: labels.partition, outcome: 'ok', durationMs, stallMs: r.stallMs, bytesUploaded: r.bytesUploaded, bytesTotal: r.bytesTotal, full: r.full, offset })
    } else {
      channels.snapshot.publish({ job: labels.job, partition: labels.partition, outcome: 'failed', durationMs, code: codeOf(outcome.error) })
    }
  }
  if ('error' in outcome && codeOf(outcome.error) === 'TIDEMARK_SNAPSHOT_FENCED' && channels.ownership.hasSubscribers) {
    channels.ownership.publish({ job: labels.job, partition: labels.partition, event: 'fenced' })
  }
}

/** Restore progress: bytes downloaded so far. */
export function restoreProgress(labels: SnapshotLabels, bytesDownloaded: number, bytesTotal: number): void {
  if (channels.restore.hasSubscribers) channels.restore.publish({ job: labels.job, partition: labels.partition, phase: 'progress', bytesDownloaded, bytesTotal })
}

/** A restore's end: the store is in place. */
export function restoreEnded(labels: SnapshotLabels, result: { source: 'snapshot' | 'local' | 'empty'; bytesDownloaded: number; bytesTotal: number; durationMs: number }): void {
  if (!channels.restore.hasSubscribers) return
  channels.restore.publish({
    job: labels.job, partition: labels.partition, phase: 'done', source: result.source, bytesDownloaded: result.bytesDownloaded, bytesTotal: result.bytesTotal, durationMs: result.durationMs,
  })
}

/** Whether anyone listens for restore progress (a restore then counts its bytes even without onProgress). */
export function restoreObserved(): boolean {
  return channels.restore.hasSubscribers
}

function codeOf(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'string' && code.startsWith('TIDEMARK_') ? code : 'unknown'
}
