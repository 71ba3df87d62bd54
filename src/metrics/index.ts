export { METRICS_CHANNELS, OWNERSHIP_EVENTS, RESTORE_SOURCES, SNAPSHOT_FAILURE_CODES, SNAPSHOT_OUTCOMES, channels as metricsChannels } from './channels.js'
export type {
  CommitMessage, LagMessage, MetricsChannelName, MetricsMessages, OutboxMessage, OwnershipMessage, PartitionLabels, PartitionMessage, ReplayMessage, RestoreMessage,
  SnapshotLabels, SnapshotMessage, StateSizeMessage,
} from './channels.js'
export { PartitionMetrics } from './partition-metrics.js'
export { restoreEnded, restoreObserved, restoreProgress, snapshotEnded, snapshotStarted } from './snapshot-metrics.js'
export type { SnapshotFigures } from './snapshot-metrics.js'
