import { errorFields, offsetField, type Logger } from '../../../src/logging/index.js'
import { metricsChannels } from '../../../src/metrics/index.js'
import type { StatefulConsumerEvents } from './stateful-consumer.js'

/**
 * What a StatefulConsumer's events say to its logger and to the ownership
 * metrics channel. Snapshots, restores and commits are logged and measured
 * where they happen (the Snapshotter, restoreSnapshot, the partition task).
 */
export function observeConsumerEvent<K extends keyof StatefulConsumerEvents>(logger: Logger, job: string, event: K, payload: StatefulConsumerEvents[K][0]): void {
  switch (event) {
    case 'assignment': {
      const a = payload as StatefulConsumerEvents['assignment'][0]
      logger.info({ job, assigned: a.assigned.map(key), revoked: a.revoked.map(key), partitions: a.partitions.length }, 'group assignment')
      return
    }
    case 'partition-started': {
      const s = payload as StatefulConsumerEvents['partition-started'][0]
      if (s.epoch > 0 && metricsChannels.ownership.hasSubscribers) metricsChannels.ownership.publish({ job, partition: key(s), event: 'acquired', epoch: s.epoch })
      logger.info({ job, topic: s.topic, partition: s.partition, source: s.source, snapshot: s.snapshot, position: offsetField(s.position), fetchFrom: offsetField(s.fetchFrom), epoch: s.epoch }, 'partition started')
      return
    }
    case 'partition-failed': {
      const f = payload as StatefulConsumerEvents['partition-failed'][0]
      if (metricsChannels.ownership.hasSubscribers && codeOf(f.error) === 'TIDEMARK_OWNERSHIP_LOST') metricsChannels.ownership.publish({ job, partition: key(f), event: 'lost' })
      logger.error({ job, topic: f.topic, partition: f.partition, ...errorFields(f.error) }, 'partition stopped; it stays paused until the group moves it')
      return
    }
    case 'ownership': {
      const { event: o, ...tp } = payload as StatefulConsumerEvents['ownership'][0]
      if (o.type !== 'holder-dead') return
      if (metricsChannels.ownership.hasSubscribers) metricsChannels.ownership.publish({ job, partition: key(tp), event: 'holder-dead' })
      logger.warn({ job, topic: tp.topic, partition: tp.partition, holder: o.holder.name, holderEpoch: o.epoch, pid: o.pid, reason: o.reason }, 'partition claim taken at once: its holder on this host is proven dead')
      return
    }
    case 'partition-closed': {
      const c = payload as StatefulConsumerEvents['partition-closed'][0]
      logger.info({ job, topic: c.topic, partition: c.partition, reason: c.reason, position: offsetField(c.position), handoff: c.handoff?.id, handoffFailed: c.handoffFailed, handoffMs: Math.round(c.handoffMs) }, 'partition closed')
      return
    }
    case 'record-skipped': {
      const r = payload as StatefulConsumerEvents['record-skipped'][0]
      logger.warn({ job, topic: r.topic, partition: r.partition, offset: offsetField(r.offset), action: r.action, ...errorFields(r.error) }, 'record did not decode')
      return
    }
    case 'truncated': {
      const t = payload as StatefulConsumerEvents['truncated'][0]
      logger.warn({ job, topic: t.topic, partition: t.partition, position: offsetField(t.position), logStart: offsetField(t.logStart), action: t.action }, 'partition state ends before the log starts')
      return
    }
    case 'crash': {
      const c = payload as StatefulConsumerEvents['crash'][0]
      if (c.restart) logger.warn({ job, ...errorFields(c.error) }, 'kafkajs consumer crashed; it rejoins')
      else logger.error({ job, ...errorFields(c.error) }, 'kafkajs consumer crashed and does not restart')
      return
    }
  }
}

function key(tp: { topic: string; partition: number }): string {
  return `${tp.topic}-${tp.partition}`
}

function codeOf(error: unknown): unknown {
  return (error as { code?: unknown } | null)?.code
}
