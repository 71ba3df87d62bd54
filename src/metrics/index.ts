export { METRICS_CHANNELS, channels as metricsChannels } from './channels.js'
export type {
  CommitMessage, LagMessage, MetricsChannelName, MetricsMessages, OutboxMessage, OwnershipMessage, PartitionLabels, ReplayMessage, RestoreMessage,
  SnapshotLabels, SnapshotMessage,
} from './channels.js'
export { PartitionMetrics } from './partition-metrics.js'
export { restoreEnded, restoreObserved, restoreProgress, snapshotEnded, snapshotStarted } from './snapshot-metrics.js'
export type { SnapshotFigures } from './snapshot-metrics.js'
