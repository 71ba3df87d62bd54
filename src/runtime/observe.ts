import { errorFields, offsetField, type Logger } from '../logging/logger.js'
import type { PartitionMetrics } from '../metrics/partition-metrics.js'
import type { ProcessorEvents } from './partition-processor.js'

/**
 * What a PartitionProcessor's events say to its logger and to the metrics
 * channels. Snapshots and restores are logged and measured by the
 * Snapshotter and restoreSnapshot themselves (the processor hands them its
 * logger), so only the processor's own events are taken here.
 */
export function observeProcessorEvent<K extends keyof ProcessorEvents>(logger: Logger, metrics: PartitionMetrics, event: K, payload: ProcessorEvents[K][0]): void {
  const labels = metrics.labels
  switch (event) {
    case 'progress': {
      const p = payload as ProcessorEvents['progress'][0]
      if (p.phase !== 'replay') return
      metrics.replay(p.done, p.total, p.final)
      if (p.final) logger.info({ ...labels, events: p.done, elapsedMs: Math.round(p.elapsedMs) }, 'replay done')
      return
    }
    case 'started': {
      const s = payload as ProcessorEvents['started'][0]
      if (s.epoch > 0) metrics.ownership('acquired', s.epoch)
      logger.info({ ...labels, source: s.source, snapshot: s.snapshot, offset: offsetField(s.offset), epoch: s.epoch, restoreMs: Math.round(s.restoreMs) }, 'partition started')
      return
    }
    case 'ownership': {
      const o = payload as ProcessorEvents['ownership'][0]
      metrics.ownership(o.type)
      if (o.type === 'holder-dead') logger.warn({ ...labels, holder: o.holder.name, holderEpoch: o.epoch, pid: o.pid, reason: o.reason }, 'partition claim taken at once: its holder on this host is proven dead')
      else if (o.type === 'lost') logger.error({ ...labels, ...errorFields(o.error) }, 'partition claim lost: the partition stops')
      else logger.warn({ ...labels, ...errorFields(o.error) }, `partition claim: ${o.type}`)
      return
    }
  }
}
